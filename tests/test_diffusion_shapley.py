"""Unit tests of companion_lib.diffusion_shapley (Lin, Lu et al., ICLR 2025)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from companion_lib import diffusion_shapley as ds
from companion_lib.diffusion_shapley import ddpm, experiment


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _random_game(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=2**n)
    return v


# -- coalitions -----------------------------------------------------------------------------------
def test_all_subsets_and_codes_round_trip():
    m = ds.all_subsets(4)
    assert m.shape == (16, 4) and m.dtype == bool
    np.testing.assert_array_equal(ds.subset_codes(m), np.arange(16))
    assert m[5].tolist() == [True, False, True, False]


@pytest.mark.parametrize("bad", [0, 21, -1])
def test_all_subsets_rejects_bad_n(bad):
    with pytest.raises(ValueError, match="n must be"):
        ds.all_subsets(bad)


def test_all_subsets_rejects_non_int():
    with pytest.raises(TypeError, match="n must be an int"):
        ds.all_subsets(3.0)


def test_subset_codes_rejects_1d():
    with pytest.raises(ValueError, match="masks must be 2-D"):
        ds.subset_codes(np.array([True, False]))


# -- attributions ---------------------------------------------------------------------------------
def test_exact_shapley_matches_shap_library_exact_explainer():
    shap = pytest.importorskip("shap")
    n = 5
    v = _random_game(n, seed=3)

    def model(Z):
        return v[ds.subset_codes(np.asarray(Z) > 0.5)]

    explainer = shap.explainers.Exact(model, shap.maskers.Independent(np.zeros((1, n)), max_samples=1))
    reference = explainer(np.ones((1, n))).values[0]
    np.testing.assert_allclose(ds.exact_shapley(v), reference, atol=1e-10)


def test_exact_shapley_matches_permutation_definition():
    n = 4
    v = _random_game(n, seed=1)
    phi = np.zeros(n)
    perms = list(__import__("itertools").permutations(range(n)))
    for order in perms:
        code = 0
        for i in order:
            phi[i] += v[code | (1 << i)] - v[code]
            code |= 1 << i
    np.testing.assert_allclose(ds.exact_shapley(v), phi / len(perms), atol=1e-12)


def test_shapley_axioms_efficiency_symmetry_null_player():
    n = 5
    masks = ds.all_subsets(n)
    # players 0 and 1 symmetric, player 4 null, plus an interaction between 2 and 3
    v = 1.0 * masks[:, 0] + 1.0 * masks[:, 1] + 2.0 * (masks[:, 2] & masks[:, 3]) + 0.5 * masks[:, 2]
    v = v + 0.7 * (masks[:, 0] | masks[:, 1])
    phi = ds.exact_shapley(v)
    assert phi.sum() == pytest.approx(v[-1] - v[0])
    assert phi[0] == pytest.approx(phi[1])
    assert phi[4] == pytest.approx(0.0)
    assert phi[2] == pytest.approx(1.5) and phi[3] == pytest.approx(1.0)


def test_additive_game_all_scores_agree():
    n = 6
    w = np.arange(1, n + 1, dtype=float) - 3
    v = ds.all_subsets(n) @ w + 4.0
    for fn in (ds.exact_shapley, ds.banzhaf, ds.leave_one_out):
        np.testing.assert_allclose(fn(v), w, atol=1e-12)


def test_banzhaf_and_loo_closed_forms_on_unanimity_game():
    n = 4
    masks = ds.all_subsets(n)
    v = masks.all(axis=1).astype(float)          # unanimity game of all players
    np.testing.assert_allclose(ds.exact_shapley(v), np.full(n, 1 / n))
    np.testing.assert_allclose(ds.banzhaf(v), np.full(n, 1 / 2 ** (n - 1)))
    np.testing.assert_allclose(ds.leave_one_out(v), np.ones(n))


@pytest.mark.parametrize("fn", [ds.exact_shapley, ds.banzhaf, ds.leave_one_out])
def test_game_validation(fn):
    with pytest.raises(ValueError, match="length 2\\*\\*n"):
        fn(np.zeros(6))
    with pytest.raises(ValueError, match="1-D"):
        fn(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="finite"):
        fn(np.array([0.0, np.nan, 1.0, 2.0]))


def test_kernel_weights_sum_to_one_and_are_symmetric():
    p = ds.shapley_kernel_weights(6)
    assert p.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(p, p[::-1])
    with pytest.raises(ValueError):
        ds.shapley_kernel_weights(1)


def test_kernel_shap_with_all_subsets_is_exact_shapley():
    n = 6
    v = _random_game(n, seed=2)
    masks = ds.all_subsets(n)
    inner = masks[1:-1]
    size = inner.sum(1)
    weights = ds.shapley_kernel_weights(n)[size - 1] / np.array([math.comb(n, k) for k in size])
    phi = ds.kernel_shap(inner, v[1:-1], v[0], v[-1], weights=weights)
    np.testing.assert_allclose(phi, ds.exact_shapley(v), atol=1e-9)


def test_kernel_shap_is_efficient_and_converges():
    n = 6
    v = _random_game(n, seed=4)
    z = ds.sample_shapley_subsets(n, 4000, rng=0, paired=True)
    phi = ds.kernel_shap(z, v[ds.subset_codes(z)], v[0], v[-1])
    assert phi.sum() == pytest.approx(v[-1] - v[0])
    np.testing.assert_allclose(phi, ds.exact_shapley(v), atol=0.08)


def test_paired_sampling_gives_complements_and_no_trivial_sets():
    z = ds.sample_shapley_subsets(8, 10, rng=1, paired=True)
    assert z.shape == (10, 8)
    np.testing.assert_array_equal(z[0::2], ~z[1::2])
    assert z.any(1).all() and (~z).any(1).all()
    assert ds.sample_shapley_subsets(8, 7, rng=1).shape == (7, 8)


def test_kernel_shap_validation():
    with pytest.raises(ValueError, match="z must be"):
        ds.kernel_shap(np.ones((3, 2)), np.ones(2), 0.0, 1.0)
    with pytest.raises(ValueError, match="finite"):
        ds.kernel_shap(np.ones((2, 2)), np.array([1.0, np.inf]), 0.0, 1.0)
    with pytest.raises(ValueError, match="m must be"):
        ds.sample_shapley_subsets(4, 0)


def test_lds_perfect_and_reversed_and_validation():
    rng = np.random.default_rng(0)
    masks = rng.random((30, 5)) < 0.5
    tau = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    y = masks @ tau
    assert ds.lds(tau, masks, y) == pytest.approx(100.0)
    assert ds.lds(-tau, masks, y) == pytest.approx(-100.0)
    with pytest.raises(ValueError, match="need attributions"):
        ds.lds(tau[:3], masks, y)
    with pytest.raises(ValueError, match="at least 3"):
        ds.lds(tau, masks[:2], y[:2])



def test_lds_is_scipy_spearman_also_with_ties():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(3)
    masks = rng.random((40, 6)) < 0.5
    tau = rng.normal(size=6)
    y = np.round(masks @ rng.normal(size=6) + rng.normal(scale=0.5, size=40), 1)   # ties in y
    tau_tied = np.array([1.0, 1.0, 2.0, 2.0, 0.0, 3.0])                             # ties in the predictions
    for t in (tau, tau_tied):
        assert ds.lds(t, masks, y) == pytest.approx(100 * spearmanr(masks @ t, y).statistic, abs=1e-9)
    assert ds.lds(np.zeros(6), masks, y) == 0.0


# -- global properties ----------------------------------------------------------------------------
def test_properties_of_perfect_and_of_far_samples():
    c = ds.mode_centers()
    perfect = np.repeat(c, 10, axis=0)
    props = ds.global_properties(perfect)
    assert props["precision"][0] == pytest.approx(1.0)
    assert props["diversity"][0] == pytest.approx(3.0)        # log2(8) bits
    assert props["IS"][0] == pytest.approx(8.0, rel=1e-3)     # exp(log 8): sharp and uniform
    one_mode = np.repeat(c[:1], 10, axis=0)
    p1 = ds.global_properties(one_mode)
    assert p1["IS"][0] == pytest.approx(1.0, abs=1e-3) and p1["diversity"][0] == pytest.approx(0.0)
    far = np.full((5, 2), 50.0)
    pf = ds.global_properties(far)
    assert pf["precision"][0] == 0.0 and pf["IS"][0] == pytest.approx(1.0)


def test_properties_are_per_model_and_validate_shape():
    x = np.stack([np.repeat(ds.mode_centers(), 2, axis=0), np.full((16, 2), 9.0)])
    np.testing.assert_allclose(ds.precision(x), [1.0, 0.0])
    with pytest.raises(ValueError, match="samples must be"):
        ds.precision(np.zeros((4, 3)))


def test_make_contributors_shapes_and_design():
    X, owner = ds.make_contributors(40, seed=1)
    assert X.shape == (320, 2) and X.dtype == np.float32
    np.testing.assert_array_equal(np.bincount(owner), np.full(8, 40))
    prec = [ds.precision(X[owner == i])[0] for i in range(8)]
    assert prec[0] > 0.9 and prec[6] > 0.9 and prec[5] < 0.8 and prec[4] < 0.6
    with pytest.raises(ValueError):
        ds.make_contributors(0)
    with pytest.raises(TypeError):
        ds.make_contributors(2.5)


# -- DDPM -----------------------------------------------------------------------------------------
def test_linear_beta_schedule():
    s = ds.linear_beta_schedule(10, 1e-3, 0.1)
    assert s.T == 10
    assert s.betas[0].item() == pytest.approx(1e-3) and s.betas[-1].item() == pytest.approx(0.1)
    np.testing.assert_allclose(s.alpha_bars.numpy(), np.cumprod(1 - s.betas.numpy()), rtol=1e-5)
    with pytest.raises(ValueError):
        ds.linear_beta_schedule(0)
    with pytest.raises(ValueError):
        ds.linear_beta_schedule(10, 0.2, 0.1)


def test_init_denoisers_shapes_and_param_count():
    p = ds.init_denoisers(3, hidden=8, seed=0)
    assert p["W1"].shape == (3, 18, 8) and p["W3"].shape == (3, 8, 2)
    assert ds.n_params(p) == 18 * 8 + 8 + 8 * 8 + 8 + 8 * 2 + 2
    assert not torch.equal(p["W1"][0], p["W1"][1])     # independent initialisations
    with pytest.raises(ValueError):
        ds.init_denoisers(0)


def test_batched_training_equals_separate_training():
    """A stack of K models trains each model exactly as if it were trained alone."""
    X, owner = ds.make_contributors(8, seed=0)
    s = ds.linear_beta_schedule(20)
    p = ds.init_denoisers(2, hidden=8, seed=0)
    masks = np.array([[1, 0, 0, 0, 0, 0, 0, 0], [0, 1, 1, 0, 0, 0, 0, 0]], bool)
    together = ds.train_denoisers(p, X, owner, masks, s, steps=5, batch=4)
    # the same model 0 in a stack whose other model has another coalition: model 0 is unchanged
    masks2 = np.array([[1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]], bool)
    together2 = ds.train_denoisers(p, X, owner, masks2, s, steps=5, batch=4)
    for k in p:
        torch.testing.assert_close(together[k][0], together2[k][0])
        assert not torch.equal(together[k][1], together2[k][1])


def test_training_reduces_loss_and_does_not_modify_input():
    X, owner = ds.make_contributors(32, seed=0)
    s = ds.linear_beta_schedule(50)
    p = ds.init_denoisers(1, hidden=16, seed=0)
    before = {k: v.clone() for k, v in p.items()}
    trained = ds.train_denoisers(p, X, owner, np.ones((1, 8), bool), s, steps=300, lr=1e-2, batch=64)
    for k in p:
        assert torch.equal(p[k], before[k])
    g = torch.Generator().manual_seed(0)
    x0 = torch.as_tensor(X)[None]
    t = torch.randint(0, s.T, (1, x0.shape[1]), generator=g)
    eps = torch.randn(x0.shape, generator=g)
    a = s.alpha_bars[t][..., None]
    xt = a.sqrt() * x0 + (1 - a).sqrt() * eps
    loss = lambda th: ((ddpm._forward(th, xt, t, s.T) - eps) ** 2).mean().item()  # noqa: E731
    assert loss(trained) < 0.8 * loss(p)


def test_training_validation():
    X, owner = ds.make_contributors(4)
    s = ds.linear_beta_schedule(10)
    p = ds.init_denoisers(2, hidden=4)
    with pytest.raises(ValueError, match="masks must be"):
        ds.train_denoisers(p, X, owner, np.ones((3, 8), bool), s, 1)
    with pytest.raises(ValueError, match="non-empty"):
        ds.train_denoisers(p, X, owner, np.zeros((2, 8), bool), s, 1)
    with pytest.raises(ValueError, match="steps"):
        ds.train_denoisers(p, X, owner, np.ones((2, 8), bool), s, -1)
    with pytest.raises(TypeError, match="params"):
        ds.train_denoisers({"W1": 1}, X, owner, np.ones((2, 8), bool), s, 1)


def test_sampling_shape_determinism_and_a_known_denoiser():
    s = ds.linear_beta_schedule(30)
    p = ds.init_denoisers(3, hidden=8, seed=1)
    a = ds.sample_denoisers(p, 5, s, seed=4)
    b = ds.sample_denoisers(p, 5, s, seed=4)
    assert a.shape == (3, 5, 2) and torch.equal(a, b) and torch.isfinite(a).all()
    # A denoiser that outputs zero noise: the sampler is then an exact linear recursion.
    zero = {k: torch.zeros_like(v) for k, v in p.items()}
    x = ds.sample_denoisers(zero, 4000, s, seed=0)
    var = 1.0
    for t in range(s.T - 1, -1, -1):
        var = var / s.alphas[t].item() + (s.betas[t].item() if t > 0 else 0.0)
    assert x.var().item() == pytest.approx(var, rel=0.1)



def test_time_table_is_the_embedding_bit_for_bit():
    t = torch.randint(0, 100, (7, 5), generator=torch.Generator().manual_seed(0))
    assert torch.equal(ddpm._time_table(100)[t], ddpm._time_embedding(t, 100))


def test_sampler_runs_the_same_network_as_forward():
    """The sampler feeds the time embedding to the first layer as one bias per model and step; a plain
    sampler built on _forward (the training network) must give the same points up to float rounding."""
    s = ds.linear_beta_schedule(20)
    p = ds.init_denoisers(3, hidden=8, seed=2)
    g = torch.Generator().manual_seed(5 + 2)
    x = torch.randn(3, 50, 2, generator=g)
    for t in range(s.T - 1, -1, -1):
        eps = ddpm._forward(p, x, torch.full((3, 50), t), s.T)
        x = (x - s.betas[t] / (1 - s.alpha_bars[t]).sqrt() * eps) / s.alphas[t].sqrt()
        if t > 0:
            x = x + s.betas[t].sqrt() * torch.randn(3, 50, 2, generator=g)
    assert torch.allclose(ds.sample_denoisers(p, 50, s, seed=5), x, atol=1e-5)


# -- pruning --------------------------------------------------------------------------------------
def _to_sequential(params):
    W1, b1, W2, b2, W3, b3 = (params[k][0] for k in ("W1", "b1", "W2", "b2", "W3", "b3"))
    net = torch.nn.Sequential(torch.nn.Linear(W1.shape[0], W1.shape[1]), torch.nn.SiLU(),
                              torch.nn.Linear(W2.shape[0], W2.shape[1]), torch.nn.SiLU(),
                              torch.nn.Linear(W3.shape[0], W3.shape[1]))
    with torch.no_grad():
        for lin, W, b in ((net[0], W1, b1), (net[2], W2, b2), (net[4], W3, b3)):
            lin.weight.copy_(W.T)
            lin.bias.copy_(b[0])
    return net


@pytest.mark.parametrize("ratio", [0.25, 0.5])
def test_magnitude_prune_matches_torch_pruning(ratio):
    tp = pytest.importorskip("torch_pruning")
    p = ds.init_denoisers(1, hidden=16, seed=5)
    # make unit norms clearly distinct so that the ranking has no ties
    p["W2"] = p["W2"] * torch.linspace(0.2, 3.0, 16)[None, :, None].flip(1)
    net = _to_sequential(p)
    pruner = tp.pruner.MagnitudePruner(net, torch.randn(1, 18),
                                       importance=tp.importance.MagnitudeImportance(p=2),
                                       pruning_ratio=ratio, ignored_layers=[net[4]])
    pruner.step()
    ours = _to_sequential(ds.magnitude_prune(p, ratio))
    for a, b in zip(net, ours):
        if isinstance(a, torch.nn.Linear):
            assert a.weight.shape == b.weight.shape
            torch.testing.assert_close(a.weight, b.weight)
            torch.testing.assert_close(a.bias, b.bias)


def test_magnitude_prune_keeps_the_function_of_kept_units_and_validates():
    p = ds.init_denoisers(2, hidden=10, seed=0)
    q = ds.magnitude_prune(p, 0.5)
    assert q["W1"].shape == (2, 18, 5) and q["W2"].shape == (2, 5, 5) and q["W3"].shape == (2, 5, 2)
    assert ds.n_params(q) < ds.n_params(p)
    same = ds.magnitude_prune(p, 0.0)
    for k in p:
        torch.testing.assert_close(same[k], p[k])
    with pytest.raises(ValueError, match="ratio"):
        ds.magnitude_prune(p, 1.0)


# -- games ----------------------------------------------------------------------------------------
def test_subset_game_retrain_finetune_and_null_value():
    X, owner = ds.make_contributors(8, seed=0)
    s = ds.linear_beta_schedule(10)
    masks = ds.all_subsets(8)[[0, 1, 3, 255]]
    g = ds.subset_game(masks, X, owner, s, steps=3, hidden=8, n_samples=16, seed=0)
    assert set(g) == {"IS", "diversity", "precision", "cpu_seconds"}
    assert all(g[k].shape == (4,) for k in ds.PROPERTIES) and g["cpu_seconds"] >= 0
    g2 = ds.subset_game(masks[:1], X, owner, s, steps=3, hidden=8, n_samples=16, seed=0)
    assert g2["IS"][0] == g["IS"][0]                      # the empty set: the same null model
    full = ds.train_denoisers(ds.init_denoisers(1, 8), X, owner, np.ones((1, 8), bool), s, 3)
    small = ds.sparsify(full, X, owner, s, ratio=0.5, recover_steps=2)
    assert ds.n_params(small) < ds.n_params(full)
    g3 = ds.subset_game(masks, X, owner, s, steps=2, init=small, n_samples=16, hidden=8, chunk=2)
    assert np.isfinite(g3["precision"]).all()
    with pytest.raises(ValueError, match="masks must be"):
        ds.subset_game(np.ones(8, bool), X, owner, s, steps=1)
    with pytest.raises(ValueError, match="stack of one"):
        ds.subset_game(masks, X, owner, s, steps=1, init=ds.init_denoisers(2, 8))


# -- evaluation helpers ---------------------------------------------------------------------------
def test_lds_at_budget_shapes_nan_for_tiny_budgets_and_exact_game():
    n = 6
    w = np.arange(n, dtype=float)
    v = ds.all_subsets(n) @ w
    test = ds.all_subsets(n)[ds.all_subsets(n).sum(1) == 3]
    out = ds.lds_at_budget(v, cost_per_subset=1.0, setup_cost=2.0, budgets=[3.0, 40.0], test_masks=test,
                           test_values=test @ w, draws=3, rng=0)
    assert out.shape == (2, 3)
    assert np.isnan(out[0]).all()                  # one coalition only: no estimate
    assert (out[1] > 99).all()                     # additive game: KernelSHAP is exact (ties aside)
    with pytest.raises(ValueError, match="cost_per_subset"):
        ds.lds_at_budget(v, 0.0, 0.0, [1.0], test, test @ w)


def test_counterfactual_change_removes_top_and_bottom():
    n = 4
    tau = np.array([3.0, -1.0, 2.0, 0.0])
    values = {0b1010: 5.0, 0b0101: 15.0}           # top 2 = {0, 2} removed -> {1, 3}; bottom 2 removed -> {0, 2}
    top, bottom = ds.counterfactual_change(tau, 2, values, full_value=10.0)
    assert top == pytest.approx(-50.0) and bottom == pytest.approx(50.0)
    with pytest.raises(ValueError, match="k must be"):
        ds.counterfactual_change(tau, 4, values, 10.0)
    with pytest.raises(ValueError, match="lookup"):
        ds.counterfactual_change(tau, 1, values, 10.0)


def test_run_games_tiny_configuration():
    G = ds.run_games(seed=0, points_per_contributor=4, T=5, hidden=4, retrain_steps=2, ft_steps=1,
                     recover_steps=1, n_samples=8, batch=4, eval_sizes=(4,))
    assert G["masks"].shape == (256, 8) and G["eval_masks"].shape == (70, 8)
    for name in ("retrain", "finetune", "sparsified"):
        assert G[name]["precision"].shape == (256,) and G[name]["cpu_seconds"] >= 0
    assert G["retrain"]["IS"][0] == G["sparsified"]["IS"][0] == G["finetune"]["IS"][0]
    assert G["n_params"]["pruned"] < G["n_params"]["full"]
    assert ds.n_params(G["sparse_model"]) == G["n_params"]["pruned"]
    assert G["macs"]["retrain"] > G["macs"]["finetune"] > G["macs"]["sparsified"] > 0


def test_coalition_cost_counts_training_and_sampling():
    assert ds.coalition_cost(10, steps=2, batch=4, T=5, n_samples=3) == 10 * (3 * 2 * 4 + 5 * 3)
    assert ds.coalition_cost(10, 0, 4, 0, 3) == 0.0
    with pytest.raises(ValueError, match="steps"):
        ds.coalition_cost(10, -1, 4, 5, 3)


def test_run_games_cost_ratio_is_fixed_by_the_configuration():
    """The multiply-add speed-up of sparsified FT over retraining follows from the configuration alone
    (parameter counts, steps, batch, T, samples): a unit test, not a result of the chapter."""
    cfg = dict(points_per_contributor=4, T=5, hidden=8, retrain_steps=6, ft_steps=2, recover_steps=1,
               n_samples=8, batch=4, eval_sizes=(4,))
    G = ds.run_games(seed=0, **cfg)
    P_full = (2 + ds.TIME_FEATURES) * 8 + 8 + 8 * 8 + 8 + 8 * 2 + 2
    P_small = (2 + ds.TIME_FEATURES) * 4 + 4 + 4 * 4 + 4 + 4 * 2 + 2
    assert G["n_params"] == {"full": P_full, "pruned": P_small}
    ratio = G["macs"]["retrain"] / G["macs"]["sparsified"]
    expected = P_full * (3 * 6 * 4 + 5 * 8) / (P_small * (3 * 2 * 4 + 5 * 8))
    assert ratio == pytest.approx(expected)
    assert G["macs"]["finetune"] / G["macs"]["sparsified"] == pytest.approx(P_full / P_small)




def test_an_explicit_cpu_device_gives_the_same_numbers():
    """Issue 37: the models train and sample on a device argument (the GPU when present); on the CPU,
    passing device="cpu" explicitly changes nothing, bit for bit."""
    X, owner = ds.make_contributors(4, seed=1)
    s = ds.linear_beta_schedule(6)
    masks = ds.all_subsets(8)[[0, 1, 5, 255]]
    a = ds.subset_game(masks, X, owner, s, 3, hidden=4, batch=4, n_samples=8, seed=2)
    b = ds.subset_game(masks, X, owner, s, 3, hidden=4, batch=4, n_samples=8, seed=2, device="cpu")
    for name in ds.PROPERTIES:
        assert np.array_equal(a[name], b[name])
    p = ds.init_denoisers(2, hidden=4, seed=0)
    t1 = ds.train_denoisers(p, X, owner, masks[1:3], s, 3, batch=4, seed=0)
    t2 = ds.train_denoisers(p, X, owner, masks[1:3], s, 3, batch=4, seed=0, device="cpu")
    assert all(torch.equal(t1[k], t2[k]) for k in t1)
    assert torch.equal(ds.sample_denoisers(t1, 5, s, seed=1), ds.sample_denoisers(t1, 5, s, seed=1, device="cpu"))
    cfg = dict(points_per_contributor=2, T=4, hidden=4, retrain_steps=1, ft_steps=1, recover_steps=1,
               n_samples=4, batch=2, eval_sizes=(4,))
    g1, g2 = ds.run_games(seed=0, device="cpu", **cfg), ds.run_games(seed=0, **cfg)
    assert all(np.array_equal(g1[m][p], g2[m][p]) for m in ("retrain", "finetune", "sparsified")
               for p in ds.PROPERTIES)
    assert g1["full_model"]["W1"].device.type == "cpu"


def test_book_scale_multiply_add_ratio_is_below_the_papers_smallest_speed_up():
    """Table 2 of the paper reports speed-ups from 5.3x. At the chapter's default configuration (width 32,
    half of the hidden units pruned, 500 retraining against 200 fine-tuning steps, batch 32, T = 100,
    256 samples) the multiply-add ratio of retraining to sparsified FT is fixed by the formula at about
    4.7, below 5.3: a property of the configuration, so the chapter tests it here and claims nothing."""
    import inspect

    d = {k: v.default for k, v in inspect.signature(ds.run_games).parameters.items()}
    h = d["hidden"]
    h_small = h - math.floor(d["prune_ratio"] * h)
    P_full = (2 + ds.TIME_FEATURES) * h + h + h * h + h + h * 2 + 2
    P_small = (2 + ds.TIME_FEATURES) * h_small + h_small + h_small * h_small + h_small + h_small * 2 + 2
    assert (P_full, P_small) == (1730, 610)
    mac = {name: ds.coalition_cost(P, steps, d["batch"], d["T"], d["n_samples"])
           for name, P, steps in (("retrain", P_full, d["retrain_steps"]), ("sparsified", P_small, d["ft_steps"]))}
    ratio = mac["retrain"] / mac["sparsified"]
    assert ratio == pytest.approx(1730 * (3 * 500 * 32 + 100 * 256) / (610 * (3 * 200 * 32 + 100 * 256)))
    assert 4.6 < ratio < 5.3


def _tiny_model_and_data(seed=0):
    X, owner = ds.make_contributors(3, seed=seed)
    schedule = ds.linear_beta_schedule(10, 1e-4, 0.05)
    params = ds.init_denoisers(1, 6, seed=seed)
    return params, X, owner, schedule


def test_loss_gradients_match_autograd_point_by_point():
    params, X, owner, schedule = _tiny_model_and_data()
    g = torch.Generator().manual_seed(3)
    t = torch.randint(0, schedule.T, (5,), generator=g)
    eps = torch.randn(5, 2, generator=g)
    pts = torch.as_tensor(X[:4])
    G = experiment._loss_gradients(params, pts, schedule, t, eps)
    assert G.shape == (4, ds.n_params(params))
    for j in range(4):
        theta = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        ab = schedule.alpha_bars[t][:, None]
        xt = ab.sqrt() * pts[j] + (1 - ab).sqrt() * eps
        loss = ((ddpm._forward(theta, xt[None], t[None], schedule.T)[0] - eps) ** 2).mean()
        loss.backward()
        ref = torch.cat([theta[k].grad.reshape(-1) for k in sorted(theta)])
        torch.testing.assert_close(G[j], ref, rtol=1e-4, atol=1e-6)


def test_gradient_attribution_aggregates_per_contributor_and_validates():
    params, X, owner, schedule = _tiny_model_and_data()
    samples = ds.sample_denoisers(params, 6, schedule, seed=0)[0]
    for method in ("trak", "cosine"):
        tau = ds.gradient_attribution(params, X, owner, samples, schedule, method=method, n_draws=4,
                                      proj_dim=8, seed=1)
        assert tau.shape == (8,) and np.all(np.isfinite(tau))
        again = ds.gradient_attribution(params, X, owner, samples, schedule, method=method, n_draws=4,
                                        proj_dim=8, seed=1)
        np.testing.assert_array_equal(tau, again)
    # a contributor's score is the sum of its points' scores: duplicating every point of contributor 0
    # (as a new, ninth contributor) gives the new contributor the same score
    X2 = np.concatenate([X, X[owner == 0]])
    owner2 = np.concatenate([owner, np.full(int((owner == 0).sum()), 8)])
    cos = ds.gradient_attribution(params, X2, owner2, samples, schedule, method="cosine", n_draws=4, seed=1)
    assert cos[8] == pytest.approx(cos[0])
    # cosine scores are bounded by the number of points of each contributor
    assert np.all(np.abs(cos) <= np.bincount(owner2) + 1e-9)
    with pytest.raises(ValueError, match="method"):
        ds.gradient_attribution(params, X, owner, samples, schedule, method="tracin")
    with pytest.raises(ValueError, match="one model"):
        ds.gradient_attribution(ds.init_denoisers(2, 6), X, owner, samples, schedule)
    with pytest.raises(ValueError, match="n_draws"):
        ds.gradient_attribution(params, X, owner, samples, schedule, n_draws=0)


def test_trak_scores_an_exact_copy_of_the_targets_highest():
    """With one contributor's own points as the targets, TRAK credits that contributor most (contributor 3,
    whose modes are those of 0 and 1, may come second)."""
    X, owner = ds.make_contributors(6, seed=2)
    schedule = ds.linear_beta_schedule(10, 1e-4, 0.05)
    params = ds.train_denoisers(ds.init_denoisers(1, 6, seed=2), X, owner, np.ones((1, 8), bool), schedule, 50,
                                lr=1e-2, batch=8)
    ranks = []
    for i in range(8):
        tau = ds.gradient_attribution(params, X, owner, X[owner == i], schedule, method="trak", n_draws=16,
                                      proj_dim=64, damping=1e-2, seed=0)
        ranks.append(int((tau > tau[i]).sum()))
    assert max(ranks) <= 1 and sum(r == 0 for r in ranks) >= 7
