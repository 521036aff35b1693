"""Tests of companion_lib.self_distillation: identities, closed forms, reference agreement, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import check_grad
from sklearn.linear_model import LogisticRegression

from companion_lib import self_distillation as sd


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def problem(rng):
    N, d, K = 120, 6, 3
    X = rng.normal(size=(N, d))
    y = rng.integers(0, K, size=N)
    return X, y, K


# -- basics ----------------------------------------------------------------------------------------
def test_one_hot_and_outputs_are_distributions(problem, rng):
    X, y, K = problem
    Y = sd.one_hot(y, K)
    assert Y.shape == (len(y), K) and np.array_equal(Y.argmax(1), y) and np.allclose(Y.sum(1), 1)
    P = sd.softmax_outputs(X, rng.normal(size=(K, X.shape[1])))
    assert np.all(P > 0) and np.allclose(P.sum(axis=1), 1)


# -- the teacher -----------------------------------------------------------------------------------
def test_teacher_matches_sklearn_logistic_regression(problem):
    X, y, K = problem
    lam = 1e-2
    W = sd.fit_softmax_ridge(X, sd.one_hot(y, K), lam)
    ref = LogisticRegression(C=1 / (len(y) * lam), fit_intercept=False, tol=1e-10, max_iter=10_000).fit(X, y)
    assert np.abs(sd.softmax_outputs(X, W) - ref.predict_proba(X)).max() < 1e-4
    assert np.abs(W - ref.coef_).max() < 1e-3


def test_teacher_matches_sklearn_on_digits():
    X_train, X_test, y_train, y_test = sd.digits_split(0)
    lam = 1e-3
    W = sd.fit_softmax_ridge(X_train, sd.one_hot(y_train, 10), lam)
    ref = LogisticRegression(C=1 / (len(y_train) * lam), fit_intercept=False, max_iter=5000, tol=1e-8)
    ref.fit(X_train, y_train)
    ours = sd.softmax_outputs(X_test, W)
    assert np.abs(ours - ref.predict_proba(X_test)).max() < 1e-2
    assert abs(np.mean(ours.argmax(1) == y_test) - ref.score(X_test, y_test)) < 0.01


def test_stationarity_identity_holds_for_soft_targets(problem, rng):
    X, y, K = problem
    T = rng.dirichlet(np.ones(K), size=len(y))
    W = sd.fit_softmax_ridge(X, T, 0.05)
    assert sd.stationarity_residual(X, T, W, 0.05) < 1e-5


def test_ce_gradient_matches_finite_differences(problem, rng):
    X, y, K = problem
    T = sd.one_hot(y, K)
    f = lambda w: sd._ce_objective(w, X, T, 0.1, K)[0]
    g = lambda w: sd._ce_objective(w, X, T, 0.1, K)[1]
    w = rng.normal(size=K * X.shape[1])
    assert check_grad(f, g, w) / np.linalg.norm(g(w)) < 1e-5


def test_ce_hessian_vector_product_matches_gradient_differences(problem, rng):
    X, y, K = problem
    T = rng.dirichlet(np.ones(K), size=len(y))
    w, v = rng.normal(size=K * X.shape[1]), rng.normal(size=K * X.shape[1])
    grad = lambda u: sd._ce_objective(u, X, T, 0.1, K)[1]
    h = 1e-6
    numeric = (grad(w + h * v) - grad(w - h * v)) / (2 * h)
    exact = sd._ce_hessp(w, v, X, T, 0.1, K)
    assert np.abs(numeric - exact).max() < 1e-6 * max(1.0, np.abs(exact).max())
    # symmetric and positive definite (the objective is strictly convex): v'Hv >= lam |v|^2
    u = rng.normal(size=v.size)
    assert math.isclose(u @ sd._ce_hessp(w, v, X, T, 0.1, K), v @ sd._ce_hessp(w, u, X, T, 0.1, K), rel_tol=1e-9)
    assert v @ exact >= 0.1 * (v @ v) * (1 - 1e-9)


# -- self-distillation -----------------------------------------------------------------------------
def test_self_distill_rounds_chain_targets(problem):
    X, y, K = problem
    run = sd.self_distill(X, y, K, 0.05, rounds=2)
    assert len(run.weights) == len(run.train_outputs) == 3
    # round t fits round t-1's outputs: stationarity with those targets
    assert sd.stationarity_residual(X, run.train_outputs[0], run.weights[1], 0.05) < 1e-5
    assert run.predict(X, 2).shape == (len(y),)


def test_self_distillation_reduces_to_averaging_on_clusters():
    cluster = np.repeat([0, 1], 4)
    X = np.hstack([np.sqrt(0.5) * sd.one_hot(cluster, 2), np.sqrt(0.5) * np.eye(8)])
    y = np.array([0, 0, 0, 1, 1, 1, 1, 0])
    run = sd.self_distill(X, y, 2, 0.02, rounds=4)
    p_wrong = [P[3, 1] for P in run.train_outputs]  # probability of input 3's wrong label
    assert p_wrong[0] > 0.5 > p_wrong[-1]
    assert all(a > b for a, b in zip(p_wrong, p_wrong[1:]))


# -- PLL student -----------------------------------------------------------------------------------
def test_top2_targets_two_halves():
    P = np.array([[0.1, 0.5, 0.4], [0.7, 0.2, 0.1]])
    assert np.array_equal(sd.top2_targets(P), [[0, 0.5, 0.5], [0.5, 0.5, 0]])


def test_gce_loss_limits():
    P = np.array([[0.2, 0.8], [0.6, 0.4]])
    S = np.array([[0, 1], [1, 0]])
    # q = 1 is the mean absolute error 1 - p_y
    assert math.isclose(sd.gce_loss(P, S, q=1.0), np.mean([0.2, 0.4]))
    # q -> 0 tends to the cross-entropy
    assert math.isclose(sd.gce_loss(P, S, q=1e-6), np.mean(-np.log([0.8, 0.6])), rel_tol=1e-4)


def test_gce_gradient_matches_finite_differences(problem, rng):
    X, y, K = problem
    S = sd.top2_targets(rng.dirichlet(np.ones(K), size=len(y))) > 0
    f = lambda w: sd._gce_objective(w, X, S, 0.01, K, 0.7)[0]
    g = lambda w: sd._gce_objective(w, X, S, 0.01, K, 0.7)[1]
    w = 0.3 * rng.normal(size=K * X.shape[1])
    assert check_grad(f, g, w) / np.linalg.norm(g(w)) < 1e-5


def test_gce_objective_equals_gce_loss_plus_penalty(problem, rng):
    X, y, K = problem
    S = sd.top2_targets(rng.dirichlet(np.ones(K), size=len(y)))
    W = rng.normal(size=(K, X.shape[1]))
    value = sd._gce_objective(W.ravel(), X, S > 0, 0.1, K, 0.7)[0]
    expected = sd.gce_loss(sd.softmax_outputs(X, W), S, 0.7) + 0.05 * np.sum(W * W)
    assert math.isclose(value, expected, rel_tol=1e-10)


def test_pll_ce_student_fits_two_hot_targets(problem):
    X, y, K = problem
    teacher = sd.fit_softmax_ridge(X, sd.one_hot(y, K), 0.05)
    P0 = sd.softmax_outputs(X, teacher)
    W = sd.fit_pll_student(X, P0, 0.05, loss="ce")
    assert sd.stationarity_residual(X, sd.top2_targets(P0), W, 0.05) < 1e-5
    W_gce = sd.fit_pll_student(X, P0, 0.05, loss="gce", W0=teacher)
    assert W_gce.shape == teacher.shape


# -- noise -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["sym", "asym"])
def test_corruption_matrices_are_stochastic(kind):
    C = sd.corruption_matrix(kind, 5, 0.4)
    assert np.allclose(C.sum(axis=1), 1) and np.allclose(np.diag(C), 0.6) and np.all(C >= 0)


def test_asym_sends_extra_mass_to_next_class():
    C = sd.corruption_matrix("asym", 4, 0.4)
    assert math.isclose(C[0, 1], 0.2) and math.isclose(C[0, 2], 0.1) and math.isclose(C[3, 0], 0.2)


def test_superclass_noise_stays_in_cluster_and_spares_singletons():
    C = sd.corruption_matrix("superclass", 5, 0.5, clusters=[0, 0, 0, 1, 2])
    assert np.allclose(C.sum(axis=1), 1)
    assert np.allclose(C[0], [0.5, 0.25, 0.25, 0, 0])
    assert np.allclose(C[3], [0, 0, 0, 1, 0]) and np.allclose(C[4], [0, 0, 0, 0, 1])


def test_corrupt_labels_follows_the_matrix(rng):
    y = np.repeat(np.arange(4), 5000)
    C = sd.corruption_matrix("sym", 4, 0.6)
    y_hat = sd.corrupt_labels(y, C, rng)
    empirical = np.stack([np.bincount(y_hat[y == k], minlength=4) / 5000 for k in range(4)])
    assert np.abs(empirical - C).max() < 0.02


def test_corrupt_labels_exactly_matches_counts(rng):
    y = np.repeat(np.arange(3), 10)
    C = sd.corruption_matrix("sym", 3, 0.5)
    y_hat = sd.corrupt_labels_exactly(y, C, rng)
    for k in range(3):
        counts = np.bincount(y_hat[y == k], minlength=3)
        assert counts.sum() == 10 and counts[k] == 5 and sorted(np.delete(counts, k)) == [2, 3]


def test_superclass_clusters_recovers_planted_groups(rng):
    centres = np.array([[1, 1, 0, 0, 0, 0], [1, 0.9, 0, 0, 0, 0], [0, 0, 0, 1, 1, 0], [0, 0, 0, 0.9, 1, 0]], float)
    y = np.repeat(np.arange(4), 30)
    X = centres[y] + 0.05 * rng.normal(size=(120, 6))
    cl = sd.superclass_clusters(X, y, 4)
    assert cl[0] == cl[1] and cl[2] == cl[3] and cl[0] != cl[2]


# -- theory ----------------------------------------------------------------------------------------
def test_block_gram_eigenvalues_match_numpy():
    G, y = sd.block_gram(3, 7, 0.5, 0.2)
    mu = np.sort(np.linalg.eigvalsh(G))
    mu1, mu2, mu3 = sd.block_gram_eigenvalues(3, 7, 0.5, 0.2)
    expected = np.sort([mu1] + [mu2] * 2 + [mu3] * (3 * 6))
    assert np.allclose(mu, expected) and np.bincount(y).tolist() == [7, 7, 7]


def test_block_gram_perturbation_is_symmetric(rng):
    G, _ = sd.block_gram(2, 5, 0.4, 0.1, eps=0.05, rng=rng)
    assert np.allclose(G, G.T) and np.allclose(np.diag(G), 1)


def test_linearized_closed_form_is_iterated_shrinkage(rng):
    N, K, lam = 12, 3, 0.02
    Phi = rng.normal(size=(N, 5))
    G = Phi @ Phi.T
    Y = sd.one_hot(rng.integers(0, K, N), K)
    A = G @ np.linalg.inv(G + K * N * lam * np.eye(N))
    # iterate the linearised fixed point P - J/K = (Y - J/K) A, round by round
    P_iter, target = [], Y
    for _ in range(3):
        target = 1 / K + A @ (target - 1 / K)
        P_iter.append(target)
    closed = sd.linearized_rounds(G, Y, lam, rounds=2)
    assert all(np.allclose(a, b) for a, b in zip(P_iter, closed))
    assert np.allclose(sd.linearized_outputs(G, Y, lam, 2), closed[2])
    assert all(np.allclose(P.sum(axis=1), 1) for P in closed)


def test_linearization_is_accurate_for_small_logits(rng):
    X = rng.normal(size=(30, 4)) / 2
    y = rng.integers(0, 3, 30)
    exact = sd.self_distill(X, y, 3, 2.0, rounds=1).train_outputs
    closed = sd.linearized_rounds(X @ X.T, sd.one_hot(y, 3), 2.0, rounds=1)
    assert max(np.abs(e - c).max() for e, c in zip(exact, closed)) < 5e-3


def test_plurality_margin_symmetric_noise():
    y = np.repeat(np.arange(4), 100)
    y_hat = sd.corrupt_labels_exactly(y, sd.corruption_matrix("sym", 4, 0.6))
    assert math.isclose(sd.plurality_margin(y, y_hat, 4), 1 - 0.6 - 0.6 / 3, abs_tol=1e-9)


def test_t_star_values():
    assert sd.t_star(1.0, 0.99, 0.3) == 0          # log(2) / log(3.3) < 1: the teacher is already right
    assert sd.t_star(1.0, 0.99, 0.5) == 1          # log(2) / log(1.98) is just above 1
    assert sd.t_star(0.064, 0.99, 0.5) == 4
    assert sd.t_star(-0.1, 0.99, 0.5) is None
    # monotone: a smaller margin never needs fewer rounds
    ts = [sd.t_star(D, 0.99, 0.5) for D in (0.5, 0.2, 0.1, 0.05, 0.01)]
    assert ts == sorted(ts)


def test_block_solver_equals_general_solver(rng):
    K, n, c, d = 3, 8, 0.4, 0.1
    N = K * n
    lam = 0.6 / (K * N)
    y = np.repeat(np.arange(K), n)
    y_hat = sd.corrupt_labels(y, sd.corruption_matrix("sym", K, 0.5), rng)
    Phi = np.hstack([np.full((N, 1), math.sqrt(d)), math.sqrt(c - d) * sd.one_hot(y, K), math.sqrt(1 - c) * np.eye(N)])
    general = sd.self_distill(Phi, y_hat, K, lam, rounds=2).train_outputs
    reduced = sd.block_model_rounds(y, y_hat, K, c, d, lam, rounds=2).outputs
    for t in range(3):
        assert np.abs(general[t] - reduced[t][y, y_hat]).max() < 1e-5


def test_block_model_reaches_t_star_and_pll_is_one_round():
    K, n, c, d = 4, 250, 0.4, 0.1
    N = K * n
    lam = (1 - c) / (K * N)
    mu1, mu2, mu3 = sd.block_gram_eigenvalues(K, n, c, d)
    a2, a3 = mu2 / (mu2 + K * N * lam), mu3 / (mu3 + K * N * lam)
    y = np.repeat(np.arange(K), n)
    y_hat = sd.corrupt_labels_exactly(y, sd.corruption_matrix("sym", K, 0.7))
    ts = sd.t_star(sd.plurality_margin(y, y_hat, K), a2, a3)
    run = sd.block_model_rounds(y, y_hat, K, c, d, lam, rounds=ts)
    assert run.noisy_accuracy(0) == 0 and run.noisy_accuracy(ts) == 1.0
    assert sd.block_model_pll(run, c, d, lam).noisy_accuracy(0) == 1.0


def test_block_model_linearized_equals_closed_form_on_the_block_gram(rng):
    K, n, c, d, lam = 3, 10, 0.4, 0.1, 0.01
    G, y = sd.block_gram(K, n, c, d)
    y_hat = sd.corrupt_labels(y, sd.corruption_matrix("sym", K, 0.5), rng)
    closed = sd.linearized_rounds(G, sd.one_hot(y_hat, K), lam, rounds=3)
    typed = sd.block_model_linearized(y, y_hat, K, c, d, lam, rounds=3)
    assert len(typed.outputs) == 4
    for t in range(4):
        assert np.abs(closed[t] - typed.outputs[t][y, y_hat]).max() < 1e-12
        # accuracy on the mislabelled inputs agrees with the per-input computation
        assert math.isclose(typed.noisy_accuracy(t), sd.noisy_sample_accuracy(closed[t], y, y_hat))


def test_block_model_counts_errors_and_accuracy_consistently():
    K, n, c, d = 3, 20, 0.4, 0.1
    y = np.repeat(np.arange(K), n)
    y_hat = sd.corrupt_labels_exactly(y, sd.corruption_matrix("sym", K, 0.4))
    run = sd.block_model_rounds(y, y_hat, K, c, d, 0.6 / (K * K * n), rounds=3)
    mislabelled = int(np.sum(y != y_hat))
    for t in range(4):
        errors = run.noisy_errors(t)
        assert isinstance(errors, int) and 0 <= errors <= mislabelled
        assert math.isclose(run.noisy_accuracy(t), 1 - errors / mislabelled)
    assert run.noisy_errors(0) == mislabelled          # the teacher memorises every wrong label


def test_numerical_study_follows_its_labels_and_t_star():
    out = sd.numerical_study(3, K=3, n=40, lam=1e-3, eta=0.4, rounds=8)
    y = np.repeat(np.arange(3), 40)
    y_hat = sd.corrupt_labels(y, sd.corruption_matrix("sym", 3, 0.4), np.random.default_rng(3))
    assert out["seed"] == 3 and out["mislabelled"] == int(np.sum(y != y_hat))
    assert math.isclose(out["Delta"], sd.plurality_margin(y, y_hat, 3))
    assert len(out["exact_errors"]) == len(out["linearized_errors"]) == 9
    assert out["exact_errors"][0] == out["mislabelled"]
    # the linearised closed form is the dynamics formula (5) was derived from
    assert out["linearized_first"] == out["t_star"]
    first = next(t for t, e in enumerate(out["exact_errors"]) if e == 0)
    assert out["exact_first"] == first
    with pytest.raises(TypeError, match="seed"):
        sd.numerical_study(1.5)


def test_noisy_sample_accuracy():
    P = np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7]])
    assert sd.noisy_sample_accuracy(P, np.array([0, 0, 1]), np.array([1, 1, 1])) == 0.5


def test_distillation_gains_on_digits_improves_at_high_noise():
    X_train, X_test, y_train, y_test = sd.digits_split(0)
    acc = sd.distillation_gains(X_train, y_train, X_test, y_test, 10, 0.7, 1e-3, seed=0, rounds=2)
    assert set(acc) == {"teacher", "t=1", "t=2", "PLL-GCE", "PLL-CE", "realised_eta"}
    assert abs(acc["realised_eta"] - 0.7) < 0.05
    assert acc["t=2"] > acc["teacher"] and acc["PLL-GCE"] > acc["teacher"]
    rounds = sd.accuracy_by_round(X_train, y_train, X_test, y_test, 10, 0.7, 1e-3, seed=0, rounds=2)
    assert np.allclose(rounds, [acc["teacher"], acc["t=1"], acc["t=2"]])


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, exc, match", [
    (lambda: sd.one_hot([0, 1], 1), ValueError, "K must be >= 2"),
    (lambda: sd.one_hot([0, 2], 2), ValueError, "class index"),
    (lambda: sd.one_hot([0.5, 1], 2), TypeError, "integer"),
    (lambda: sd.one_hot([0, 1], 2.0), TypeError, "K must be an int"),
    (lambda: sd.corruption_matrix("sym", 3, 1.0), ValueError, "eta"),
    (lambda: sd.corruption_matrix("sym", 3, -0.1), ValueError, "eta"),
    (lambda: sd.corruption_matrix("other", 3, 0.1), ValueError, "kind"),
    (lambda: sd.corruption_matrix("superclass", 3, 0.1), ValueError, "clusters"),
    (lambda: sd.fit_softmax_ridge(np.ones((3, 2)), np.eye(3)[:, :2] * 0 + 0.5, 0.0), ValueError, "lam"),
    (lambda: sd.fit_softmax_ridge(np.ones((3, 2)), np.full((2, 2), 0.5), 0.1), ValueError, "one row per sample"),
    (lambda: sd.fit_softmax_ridge(np.array([[np.nan, 1.0]]), np.array([[1.0, 0.0]]), 0.1), ValueError, "NaN"),
    (lambda: sd.fit_softmax_ridge(np.ones(3), np.ones((3, 2)) / 2, 0.1), ValueError, "2-D"),
    (lambda: sd.fit_softmax_ridge(np.ones((2, 2)), np.array([[0.7, 0.7], [0.5, 0.5]]), 0.1), ValueError, "probability"),
    (lambda: sd.fit_pll_student(np.ones((2, 2)), np.full((2, 2), 0.5), 0.1, loss="mse"), ValueError, "loss"),
    (lambda: sd.gce_loss(np.full((1, 2), 0.5), np.ones((1, 2)), q=0), ValueError, "q"),
    (lambda: sd.block_gram(2, 3, 0.1, 0.4), ValueError, "d < c"),
    (lambda: sd.block_gram(2, 0, 0.4, 0.1), ValueError, "n must"),
    (lambda: sd.t_star(0.1, 0.5, 0.9), ValueError, "alpha3 < alpha2"),
    (lambda: sd.self_distill(np.ones((2, 2)), [0, 1], 2, 0.1, rounds=-1), ValueError, "rounds"),
    (lambda: sd.corrupt_labels([0, 1], np.eye(2), rng=0), TypeError, "rng"),
    (lambda: sd.plurality_margin([0, 1], [0], 2), ValueError, "same length"),
    (lambda: sd.noisy_sample_accuracy(np.eye(2), [0, 1], [0, 1]), ValueError, "mislabelled"),
    (lambda: sd.block_model_linearized([0, 0, 1], [0, 1, 1], 2, 0.4, 0.1, 0.1, 1), ValueError, "same number"),
    (lambda: sd.block_model_linearized([0, 1], [0, 1], 2, 0.1, 0.4, 0.1, 1), ValueError, "d < c"),
])
def test_bad_input_raises_clear_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_first_perfect_round():
    assert sd.first_perfect_round([0.0, 0.4, 1.0, 1.0]) == 2
    assert sd.first_perfect_round([1.0]) == 0
    assert sd.first_perfect_round([0.0, 0.99]) is None
    with pytest.raises(ValueError, match="1-D"):
        sd.first_perfect_round([])


def test_linearized_noisy_accuracy_reaches_t_star_without_perturbation():
    # eps = 0: the linearised closed form is exactly the dynamics behind formula (5), so its first perfect
    # round is t* (true by construction; a unit test, not a claim of the reproduce page)
    K, n, c, d = 4, 60, 0.4, 0.1
    N = K * n
    lam = (1 - c) / (K * N)
    G, y = sd.block_gram(K, n, c, d)
    y_hat = sd.corrupt_labels_exactly(y, sd.corruption_matrix("sym", K, 0.6))
    _, mu2, mu3 = sd.block_gram_eigenvalues(K, n, c, d)
    a2, a3 = mu2 / (mu2 + K * N * lam), mu3 / (mu3 + K * N * lam)
    ts = sd.t_star(sd.plurality_margin(y, y_hat, K), a2, a3)
    accs = sd.linearized_noisy_accuracy(G, y, y_hat, K, lam, ts + 2)
    assert len(accs) == ts + 3
    assert sd.first_perfect_round(accs) == ts
