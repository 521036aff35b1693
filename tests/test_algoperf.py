"""Unit tests of companion_lib.algoperf (AlgoPerf scoring, harness and submissions)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from companion_lib.algoperf import (
    BASE_WORKLOADS, HELD_OUT_WORKLOADS, MAX_RUNTIME_SECONDS, PUBLISHED_SCORES, STUDY_STRIDE, SUBMISSIONS, WORKLOADS,
    SimpleShampoo, Submission, apply_held_out_rules, benchmark_score, budget_steps, get_submission,
    inverse_root, load_time_to_targets, make_workload, median_times, per_study_scores, performance_profile,
    performance_ratios, profile_taus, run_competition, run_study, run_trial, set_target,
    speedup_vs_baseline, study_ids, study_time_to_target, targets_reached, time_to_target, warmup_cosine,
)

INF = np.inf


# ----------------------------------------------------------------------------- scoring: real data
@pytest.mark.parametrize("ruleset", ["external", "self"])
def test_load_time_to_targets_shape(ruleset):
    df = load_time_to_targets(ruleset)
    assert list(df.columns) == sorted(set(BASE_WORKLOADS) | set(HELD_OUT_WORKLOADS))
    assert set(df.index) == set(PUBLISHED_SCORES[ruleset])
    assert df.shape == ((11, 14) if ruleset == "external" else (6, 14))


def test_load_time_to_targets_rejects_unknown_ruleset():
    with pytest.raises(ValueError, match="ruleset"):
        load_time_to_targets("internal")


@pytest.mark.parametrize("ruleset", ["external", "self"])
def test_published_scores_reproduce(ruleset):
    score = benchmark_score(load_time_to_targets(ruleset), HELD_OUT_WORKLOADS, BASE_WORKLOADS)
    published = pd.Series(PUBLISHED_SCORES[ruleset])
    assert (score[published.index] - published).abs().max() < 1e-3
    assert list(score.sort_values(ascending=False).index) == list(published.index)


def test_speedups_of_the_winners():
    g_ext, ratios = speedup_vs_baseline(load_time_to_targets("external"), "shampoo_submission")
    assert 0.26 <= 1 - g_ext <= 0.30
    assert ratios["imagenet_resnet"] == pytest.approx(1.0)  # both missed: budget / budget
    g_self, _ = speedup_vs_baseline(load_time_to_targets("self"), "schedule_free_adamw", budget_factor=3)
    assert 0.06 <= 1 - g_self <= 0.10


# ----------------------------------------------------------------------------- scoring: toy tables
def _toy():
    return pd.DataFrame({"a": [1.0, 2.0, 8.0], "b": [3.0, INF, 3.0], "a_v": [1.0, 1.0, 1.0]},
                        index=["s1", "s2", "s3"])


def test_performance_ratios_divide_by_best():
    r = performance_ratios(_toy()[["a", "b"]])
    np.testing.assert_allclose(r["a"], [1, 2, 8])
    assert r.loc["s2", "b"] == INF and r.loc["s3", "b"] == 1.0


def test_performance_ratios_all_missing_column_is_nan():
    r = performance_ratios(pd.DataFrame({"a": [INF, INF]}))
    assert r["a"].isna().all()


def test_performance_profile_counts():
    r = pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, np.nan]}, index=["x", "y"])
    rho = performance_profile(r, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(rho.loc["x"], [0.5, 0.5, 1.0])
    np.testing.assert_allclose(rho.loc["y"], [0.0, 0.5, 0.5])  # NaN never counts as solved


def test_benchmark_score_closed_form():
    # ratio 1 on all workloads -> score 1; a single workload with ratio 2.5 out of 2: area known
    t = pd.DataFrame({"a": [1.0, 2.5], "b": [1.0, 1.0]}, index=["best", "other"])
    s = benchmark_score(t, tau_max=4.0, num_points=10_001)
    assert s["best"] == pytest.approx(1.0)
    # rho = 1/2 on [1, 2.5), 1 on [2.5, 4] -> (0.5*1.5 + 1*1.5)/3 = 0.75
    assert s["other"] == pytest.approx(0.75, abs=1e-3)


@pytest.mark.parametrize("seed", range(5))
def test_benchmark_score_lies_in_unit_interval(seed):
    # 0 <= B <= 1 holds by construction (a normalised area under a fraction): a unit test, not a claim
    rng = np.random.default_rng(seed)
    t = pd.DataFrame(rng.lognormal(3.0, 1.0, size=(6, 4)), columns=list("abcd"),
                     index=[f"s{i}" for i in range(6)])
    t = t.mask(rng.random(t.shape) < 0.2, INF).mask(rng.random(t.shape) < 0.1, np.nan)
    for tau_max, n in ((4.0, 100), (2.0, 7), (8.0, 1000)):
        s = benchmark_score(t, tau_max=tau_max, num_points=n)
        assert ((s >= 0) & (s <= 1)).all(), s
    # the best-everywhere submission scores exactly 1
    t.loc["best"] = t.min(skipna=True).fillna(1.0).replace(INF, 1.0) / 2
    assert benchmark_score(t)["best"] == pytest.approx(1.0)


def test_benchmark_score_zero_when_never_reached():
    t = pd.DataFrame({"a": [1.0, INF], "b": [1.0, INF]}, index=["s", "never"])
    assert benchmark_score(t)["never"] == 0.0


def test_cut_removes_slow_runs_via_variant():
    t = _toy().copy()
    t.loc["s3", "a_v"] = 5.0  # variant 5x slower than the best -> base a set to inf for s3
    base = apply_held_out_rules(t, {"a_v": "a"}, ["a", "b"], tau_max=4.0)
    assert base.loc["s3", "a"] == INF
    no_cut = apply_held_out_rules(t, {"a_v": "a"}, ["a", "b"], tau_max=None)
    assert no_cut.loc["s3", "a"] == 8.0


def test_variant_ignored_when_base_missed():
    # x is fast on the variant but never trained the base workload: its variant time must not set
    # the variant's best, otherwise s (5x slower than x on the variant) would lose its base credit.
    t = pd.DataFrame({"a": [INF, 10.0], "a_v": [1.0, 5.0]}, index=["x", "s"])
    base = apply_held_out_rules(t, {"a_v": "a"}, ["a"], tau_max=4.0)
    assert base.loc["x", "a"] == INF and base.loc["s", "a"] == 10.0


def test_base_set_inf_when_variant_missed():
    t = pd.DataFrame({"a": [1.0, 2.0], "a_v": [1.0, np.nan]}, index=["s1", "s2"])
    base = apply_held_out_rules(t, {"a_v": "a"}, ["a"])
    assert base.loc["s2", "a"] == INF


def test_scoring_input_validation():
    with pytest.raises(TypeError, match="times"):
        benchmark_score(np.ones((2, 2)))
    with pytest.raises(ValueError, match="non-negative"):
        performance_ratios(pd.DataFrame({"a": [-1.0]}))
    with pytest.raises(ValueError, match="missing"):
        apply_held_out_rules(_toy(), {"zzz": "a"}, ["a"])
    with pytest.raises(ValueError, match="tau_max"):
        profile_taus(1.0)
    with pytest.raises(ValueError, match="num_points"):
        profile_taus(4.0, 1)
    with pytest.raises(TypeError, match="ratios"):
        performance_profile(np.ones((2, 2)), [1.0])
    with pytest.raises(ValueError, match="unknown submission"):
        speedup_vs_baseline(load_time_to_targets("external"), "nobody")


def test_time_to_target_and_studies():
    assert time_to_target([10, 20, 30], [0.5, 0.2, 0.1], 0.2) == 20
    assert time_to_target([10, 20, 30], [0.5, 0.4, 0.3], 0.2) == INF
    assert time_to_target([10, 20], [0.1, 0.9], 0.8, minimize=False) == 20
    with pytest.raises(ValueError, match="equal length"):
        time_to_target([1, 2], [0.1], 0.1)
    # studies x trials: best trial per study, then the median over studies
    assert study_time_to_target([[5, 3], [INF, 9], [1, INF]]) == 3
    assert study_time_to_target([4, 8, INF]) == 8
    with pytest.raises(ValueError, match="non-negative"):
        study_time_to_target([[-1.0]])


# ----------------------------------------------------------------------------- optimizers
def test_inverse_root_identity():
    torch.manual_seed(0)
    a = torch.randn(5, 5, dtype=torch.float64)
    a = a @ a.T + 0.5 * torch.eye(5, dtype=torch.float64)
    r = inverse_root(a, 4)
    np.testing.assert_allclose((r @ r @ r @ r @ a).numpy(), np.eye(5), atol=1e-8)
    with pytest.raises(ValueError, match="square"):
        inverse_root(torch.ones(2, 3))


def test_simple_shampoo_matches_pytorch_optimizer_on_a_quadratic():
    from pytorch_optimizer import Shampoo

    torch.manual_seed(0)
    A = torch.randn(6, 6, dtype=torch.float64)
    A = A @ A.T / 6 + 0.1 * torch.eye(6, dtype=torch.float64)
    B = torch.randn(4, 4, dtype=torch.float64)
    B = B @ B.T / 4 + 0.1 * torch.eye(4, dtype=torch.float64)
    W0 = torch.randn(6, 4, dtype=torch.float64)

    def run(make):
        W = W0.clone().requires_grad_(True)
        opt = make([W])
        for _ in range(15):
            opt.zero_grad()
            (0.5 * torch.trace(W.T @ A @ W @ B)).backward()
            opt.step()
        return W.detach()

    ref = run(lambda p: Shampoo(p, lr=0.1, matrix_eps=1e-6, preconditioning_compute_steps=1))
    ours = run(lambda p: SimpleShampoo(p, lr=0.1, betas=(0.0, 0.999), stat_decay=None, eps=1e-6,
                                       damping=0.0, graft=None, precondition_frequency=1))
    torch.testing.assert_close(ours, ref, rtol=1e-8, atol=1e-10)


def test_simple_shampoo_grafting_keeps_adam_norm():
    torch.manual_seed(1)
    W = torch.randn(5, 3, requires_grad=True)
    opt = SimpleShampoo([W], lr=1.0, betas=(0.0, 0.999), eps=1e-8)
    W0 = W.detach().clone()
    (W ** 2).sum().backward()
    g = W.grad.clone()
    opt.step()
    adam_step = g / (g.abs() + 1e-8)  # first Adam step with bias correction: ~sign(g)
    assert float((W.detach() - W0).norm()) == pytest.approx(float(adam_step.norm()), rel=1e-4)


def test_simple_shampoo_validation():
    p = [torch.zeros(2, 2, requires_grad=True)]
    with pytest.raises(ValueError, match="lr"):
        SimpleShampoo(p, lr=0.0)
    with pytest.raises(ValueError, match="graft"):
        SimpleShampoo(p, graft="sgd")
    with pytest.raises(ValueError, match="precondition_frequency"):
        SimpleShampoo(p, precondition_frequency=0)


def test_warmup_cosine_shape():
    vals = [warmup_cosine(s, 100, 0.1) for s in range(120)]
    assert vals[0] == pytest.approx(0.1) and vals[9] == pytest.approx(1.0)
    assert vals[100] == pytest.approx(0.0, abs=1e-12) and vals[119] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b - 1e-12 for a, b in zip(vals[9:], vals[10:]))
    with pytest.raises(ValueError, match="warmup_fraction"):
        warmup_cosine(0, 10, 1.0)


def test_submissions_registry():
    assert set(SUBMISSIONS) == {"nadamw", "schedule_free_adamw", "shampoo", "sgd_nesterov"}
    assert get_submission("shampoo").name == "shampoo"
    with pytest.raises(ValueError, match="unknown submission"):
        get_submission("lion")
    for sub in SUBMISSIONS.values():
        model = torch.nn.Linear(3, 2)
        opt, _ = sub.init_optimizer(list(model.parameters()), sub.self_tuning, 50)
        model(torch.randn(4, 3)).sum().backward()
        if sub.eval_mode:
            opt.train()
        opt.step()


# ----------------------------------------------------------------------------- harness
def test_make_workload_shapes():
    for name in WORKLOADS:
        wl = make_workload(name)
        assert wl.X_train.shape[1] == wl.layer_sizes[0]
        model = wl.build_model(0)
        out = model(wl.X_val[:3])
        assert out.shape == (3, wl.layer_sizes[-1])
    assert make_workload("digits_mlp", variant="tanh").activation == "tanh"
    with pytest.raises(ValueError, match="unknown workload"):
        make_workload("imagenet")
    with pytest.raises(ValueError, match="variant"):
        make_workload("digits_mlp", variant="gelu")


def test_illcond_features_are_rotated_and_ill_conditioned():
    wl = make_workload("illcond_clf")
    X = wl.X_train.numpy().astype(float)
    eig = np.linalg.eigvalsh(np.cov(X.T))
    assert eig.max() / eig.min() > 1e3  # ill-conditioned
    var = X.var(0)
    assert var.max() / var.min() < 20  # ... but not axis-aligned: per-feature variances are similar


def test_budget_steps():
    wl = make_workload("digits_mlp", step_hint=30)
    assert budget_steps(wl) == 40 and budget_steps(wl, "self") == 120
    with pytest.raises(ValueError, match="ruleset"):
        budget_steps(wl, "both")


def test_run_trial_logs_and_stops_at_target():
    wl = make_workload("digits_mlp", step_hint=30, eval_every=10)
    sub = SUBMISSIONS["nadamw"]
    full = run_trial(wl, sub, sub.self_tuning, seed=0, max_steps=30, stop_at_target=False)
    np.testing.assert_array_equal(full.steps, [10, 20, 30])
    assert np.all(np.diff(full.seconds) >= 0)
    assert full.steps_to_target == INF  # no target set
    again = run_trial(wl, sub, sub.self_tuning, seed=0, max_steps=30, stop_at_target=False)
    np.testing.assert_array_equal(full.metrics, again.metrics)  # deterministic given the seed
    easy = dataclasses.replace(wl, target=float(full.metrics[0]))
    res = run_trial(easy, sub, sub.self_tuning, seed=0, max_steps=30)
    assert res.steps_to_target == 10 and len(res.steps) == 1
    with pytest.raises(TypeError, match="submission"):
        run_trial(wl, "nadamw", {}, 0)


def test_set_target_and_competition_tiny():
    wl = make_workload("digits_mlp", step_hint=20, eval_every=10)
    sub = SUBMISSIONS["nadamw"]
    target, table = set_target(wl, [(sub, sub.search_space[0])], seeds=(0, 1))
    assert len(table) == 1 and 0 <= target <= 1
    wl = dataclasses.replace(wl, target=target)
    study = run_study(wl, sub, "external", 0, max_trials=1)
    assert set(study) == {"steps", "seconds"} and study["steps"] in (10.0, 20.0, 30.0, INF)
    res = run_competition([wl], [sub, SUBMISSIONS["schedule_free_adamw"]], "self", [0, 1])
    assert set(res.columns) == {"submission", "workload", "study", "steps", "seconds"}
    assert len(res) == 4
    t = median_times(res, "steps")
    assert t.shape == (2, 1)
    with pytest.raises(ValueError, match="target"):
        run_study(dataclasses.replace(wl, target=None), sub, "external", 0)
    with pytest.raises(ValueError, match="unit"):
        median_times(res, "hours")


def test_target_is_reached_by_half_of_its_own_reruns():
    """The target is the median of the best candidate's reruns, so at least half of those reruns reach it
    (a property of the construction: the book's claims do not test it)."""
    wl = make_workload("digits_ae", step_hint=20, eval_every=5)
    sub = SUBMISSIONS["nadamw"]
    hp = sub.search_space[0]
    seeds = (3, 4, 5)
    target, _ = set_target(wl, [(sub, hp)], seeds=seeds)
    free = dataclasses.replace(wl, target=None)
    bests = [run_trial(free, sub, hp, s, max_steps=wl.step_hint, stop_at_target=False,
                       horizon=wl.step_hint).best_metric for s in seeds]
    assert target == float(np.median(bests))
    assert sum(b <= target for b in bests) >= len(seeds) / 2


def _long_table(rows):
    return pd.DataFrame(rows, columns=["submission", "workload", "study", "steps", "seconds"])


def test_per_study_scores_score_each_study_alone():
    res = _long_table([("a", "w1", 0, 10, 1.0), ("b", "w1", 0, 20, 1.0), ("a", "w2", 0, INF, INF),
                       ("b", "w2", 0, 30, 2.0), ("a", "w1", 7, 40, 1.0), ("b", "w1", 7, 20, 3.0),
                       ("a", "w2", 7, 5, 1.0), ("b", "w2", 7, 50, 1.0)])
    scores = per_study_scores(res, "steps")
    assert list(scores.columns) == [0, 7] and set(scores.index) == {"a", "b"}
    for s in (0, 7):
        alone = benchmark_score(median_times(res[res.study == s], "steps"))
        pd.testing.assert_series_equal(scores[s], alone, check_names=False)
    # study 0: a fastest on w1, misses w2; b twice slower on w1 (ratio 2), fastest on w2
    assert scores.loc["a", 0] == pytest.approx(0.5, abs=0.01)
    assert scores.loc["b", 0] == pytest.approx(0.5 + 0.5 * (4 - 2) / 3, abs=0.02)
    # a study's score differs from the score of the median times (one number per competition)
    assert not np.allclose(scores.mean(axis=1), benchmark_score(median_times(res, "steps")))
    with pytest.raises(ValueError, match="unit"):
        per_study_scores(res, "hours")


def test_targets_reached_counts_finite_times():
    res = _long_table([("a", "w1", 0, 10, 1.0), ("a", "w2", 0, INF, INF), ("b", "w1", 0, INF, INF),
                       ("b", "w2", 0, INF, INF), ("a", "w1", 1, 10, 1.0), ("a", "w2", 1, 20, 2.0),
                       ("b", "w1", 1, 30, 1.0), ("b", "w2", 1, INF, INF)])
    reached = targets_reached(res)
    assert reached.loc["a"].tolist() == [1, 2] and reached.loc["b"].tolist() == [0, 1]
    with pytest.raises(ValueError, match="no row"):
        targets_reached(res.iloc[:0])


def test_max_runtime_table_matches_base_workloads():
    assert set(MAX_RUNTIME_SECONDS) == set(BASE_WORKLOADS)
    assert isinstance(SUBMISSIONS["nadamw"], Submission)


def test_run_trial_horizon_is_the_external_budget_by_default():
    # AlgoPerf tells a submission the budget (workload.step_hint); target setting schedules over 3/4 of it
    wl = make_workload("digits_mlp", step_hint=30, eval_every=10)
    seen = []
    base = SUBMISSIONS["nadamw"]

    def init(params, hp, horizon):
        seen.append(horizon)
        return base.init_optimizer(params, hp, horizon)

    spy = dataclasses.replace(base, init_optimizer=init)
    run_trial(wl, spy, spy.self_tuning, seed=0, max_steps=10, stop_at_target=False)
    run_trial(wl, spy, spy.self_tuning, seed=0, max_steps=10, stop_at_target=False, horizon=30)
    set_target(wl, [(spy, spy.search_space[0])], seeds=(0,))
    assert seen == [budget_steps(wl), 30, 30, 30]
    with pytest.raises(ValueError, match="horizon"):
        run_trial(wl, spy, spy.self_tuning, seed=0, max_steps=10, horizon=0)


def test_study_ids_spawn_distinct_studies_per_seed():
    assert study_ids([0, 1, 2]) == [0, 1, 2]
    ids = study_ids([0, 1, 2], studies_per_seed=2)
    assert ids == [0, STUDY_STRIDE, 1, 1 + STUDY_STRIDE, 2, 2 + STUDY_STRIDE]
    assert len(set(study_ids([11, 12, 13], 3))) == 9
    with pytest.raises(ValueError, match="studies_per_seed"):
        study_ids([0], studies_per_seed=0)
    with pytest.raises(ValueError, match="distinct"):
        study_ids([1, 1])
