r"""Self-distillation as label averaging (Jeong and Chung, ICLR 2025).

*Rethinking Self-Distillation: Label Averaging and Enhanced Soft Label Refinement with Partial
Labels*, https://openreview.net/forum?id=EJfLvrzh2Q (arXiv 2402.10482).

Setting (linear probing on fixed features). Training pairs :math:`(x_i, \hat y_i)`, :math:`i=1..N`,
with :math:`K` classes and fixed features :math:`\phi_i \in \mathbb R^d`. A linear model
:math:`W \in \mathbb R^{K\times d}` (no bias) predicts :math:`p(x)=\mathrm{softmax}(W\phi(x))`.
Round :math:`t` fits targets :math:`Y^{(t)}` by

.. math::  \mathcal L_t(W) = \frac1N \sum_i \mathrm{CE}(Y^{(t)}_i, \mathrm{softmax}(W\phi_i))
           + \frac\lambda2 \lVert W\rVert_F^2                                   \qquad (1)

with :math:`Y^{(0)}=\hat Y` (noisy one-hot labels, the *teacher*) and :math:`Y^{(t)}=P^{(t-1)}`, the
previous model's outputs on the training inputs (multi-round *self-distillation*, SD).

* Stationarity of (1): :math:`W = (Y-P)\Phi^\top/(N\lambda)`                                   (2)
* Linearised softmax :math:`\mathrm{softmax}(z)\approx(\mathbf 1+z)/K` gives the closed form
  :math:`P^{(t)} = J/K + (\hat Y - J/K)A^{t+1}`, :math:`A = G(G+KN\lambda I)^{-1}`, :math:`G=\Phi^\top\Phi` (3)
* Block Gram model (:math:`G_{ii}=1`, :math:`c` within a class, :math:`d` across): eigenvalues
  :math:`\mu_1=1-c+n(c-d)+Knd`, :math:`\mu_2=1-c+n(c-d)`, :math:`\mu_3=1-c`                       (4)
* Rounds after which every mislabelled sample is predicted correctly:
  :math:`t^\star=\lceil \log(1+1/\Delta)/\log(\alpha_2/\alpha_3)\rceil-1`, :math:`\alpha_j=\mu_j/(\mu_j+KN\lambda)` (5)
* PLL student: one round on the teacher's top-2 labels with weight 1/2 each (theory), or with the
  generalised cross-entropy :math:`(1-p_y^q)/q` on both labels, initialised from the teacher (the
  official code, :math:`q=0.7`).

Array conventions in code: samples are rows. Features ``X`` are ``(N, d)``, targets and outputs
``(N, K)`` (the transpose of the paper's :math:`K\times N` matrices), weights ``W`` are ``(K, d)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.optimize import minimize
from scipy.spatial.distance import squareform
from scipy.special import log_softmax, softmax

from .common.validation import check_positive

__all__ = [
    "one_hot", "softmax_outputs", "fit_softmax_ridge", "stationarity_residual",
    "self_distill", "SelfDistillation", "top2_targets", "gce_loss", "fit_gce", "fit_pll_student",
    "corruption_matrix", "corrupt_labels", "corrupt_labels_exactly", "superclass_clusters",
    "linearized_outputs", "linearized_rounds", "block_gram", "block_gram_eigenvalues", "shrink_factors",
    "plurality_margin", "t_star", "BlockModel", "block_model_rounds", "block_model_pll", "block_model_linearized",
    "numerical_study", "noisy_sample_accuracy", "first_perfect_round", "linearized_noisy_accuracy",
    "digits_split", "accuracy_by_round", "distillation_gains",
]


# --------------------------------------------------------------------------------------------------
# input checks
# --------------------------------------------------------------------------------------------------
def _matrix(a, name: str, cols: int | None = None) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array, got shape {a.shape}")
    if cols is not None and a.shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return a


def _labels(y, name: str, K: int | None = None) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of class indices, got shape {y.shape}")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        raise TypeError(f"{name} must hold integer class indices, got dtype {y.dtype}")
    if y.size and y.min() < 0:
        raise ValueError(f"{name} must be non-negative class indices")
    if K is not None and y.size and y.max() >= K:
        raise ValueError(f"{name} has class index {y.max()} but K={K}")
    return y.astype(int)


def _num_classes(K) -> int:
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)):
        raise TypeError(f"K must be an int, got {type(K).__name__}")
    if K < 2:
        raise ValueError(f"K must be >= 2 classes, got {K}")
    return int(K)


_positive = check_positive  # shared with the other chapters (companion_lib.common.validation)


def _noise_rate(eta) -> float:
    if isinstance(eta, bool) or not isinstance(eta, (int, float, np.floating, np.integer)):
        raise TypeError(f"eta must be a number, got {type(eta).__name__}")
    if not 0 <= eta < 1:
        raise ValueError(f"eta must be in [0, 1), got {eta}")
    return float(eta)


def _rounds(rounds) -> int:
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)):
        raise TypeError(f"rounds must be an int, got {type(rounds).__name__}")
    if rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")
    return int(rounds)


def one_hot(y, K: int) -> np.ndarray:
    """One-hot rows ``(N, K)`` for integer labels ``y`` (the columns of the paper's :math:`\\hat Y`)."""
    K = _num_classes(K)
    y = _labels(y, "y", K)
    out = np.zeros((y.size, K))
    out[np.arange(y.size), y] = 1.0
    return out


# --------------------------------------------------------------------------------------------------
# the teacher and self-distillation rounds: objective (1)
# --------------------------------------------------------------------------------------------------
def softmax_outputs(X, W) -> np.ndarray:
    """Model outputs :math:`p(x_i)=\\mathrm{softmax}(W\\phi_i)` as rows ``(N, K)``."""
    X = _matrix(X, "X")
    W = _matrix(W, "W", cols=X.shape[1])
    return softmax(X @ W.T, axis=1)


def _ce_objective(w, X, T, lam, K):
    W = w.reshape(K, X.shape[1])
    Z = X @ W.T
    Z -= Z.max(axis=1, keepdims=True)        # a shift per row changes neither softmax nor the loss
    E = np.exp(Z)
    s = E.sum(axis=1, keepdims=True)
    N = X.shape[0]
    # -sum_ik T_ik log p_ik = sum_i log s_i - sum_ik T_ik z_ik, because every row of T sums to 1
    loss = (np.log(s).sum() - np.vdot(T, Z)) / N + 0.5 * lam * np.vdot(w, w)
    E /= s                                   # the outputs P, in place
    E -= T                                   # the residuals P - Y
    grad = E.T @ X / N + lam * W             # dL/dW = (P - Y)^T Phi / N + lam W
    return loss, grad.ravel()


def _ce_hessp(w, v, X, T, lam, K):
    """Hessian of objective (1) times a direction ``v``: for each sample, the logits' Hessian
    :math:`\\mathrm{diag}(p)-pp^\\top` applied to :math:`V\\phi_i`, mapped back by :math:`\\phi_i^\\top`, plus
    :math:`\\lambda V` (the targets do not enter, since every row of ``T`` sums to 1)."""
    W, V = w.reshape(K, X.shape[1]), v.reshape(K, X.shape[1])
    Z = X @ W.T
    Z -= Z.max(axis=1, keepdims=True)
    P = np.exp(Z)
    P /= P.sum(axis=1, keepdims=True)
    R = P * (X @ V.T)                        # p * (V phi_i), per sample
    R -= P * R.sum(axis=1, keepdims=True)    # (diag(p) - p p^T) V phi_i
    return (R.T @ X / X.shape[0] + lam * V).ravel()


def fit_softmax_ridge(X, T, lam: float, W0=None, tol: float = 1e-8, max_iter: int = 2000) -> np.ndarray:
    """Minimise objective (1): mean cross-entropy to soft targets ``T`` plus :math:`\\frac\\lambda2\\lVert W\\rVert_F^2`.

    The objective is smooth and strictly convex, so a trust-region Newton method with exact
    Hessian-vector products (scipy's ``trust-ncg``) finds its unique minimiser in a few steps; the
    result satisfies the stationarity identity (2) up to ``tol`` (the largest gradient entry).

    Parameters
    ----------
    X: ``(N, d)`` fixed features :math:`\\phi_i`.
    T: ``(N, K)`` targets, each row a probability vector (one-hot for the teacher).
    lam: the weight decay :math:`\\lambda > 0`.
    W0: optional ``(K, d)`` warm start.

    Returns
    -------
    ``(K, d)`` weights :math:`W`.
    """
    X = _matrix(X, "X")
    T = _matrix(T, "T")
    if T.shape[0] != X.shape[0]:
        raise ValueError(f"T must have one row per sample of X ({X.shape[0]}), got {T.shape[0]}")
    K = _num_classes(T.shape[1])
    if np.any(T < -1e-12) or not np.allclose(T.sum(axis=1), 1.0, atol=1e-6):
        raise ValueError("T's rows must be probability vectors (non-negative, summing to 1)")
    lam = _positive(lam, "lam")
    w0 = np.zeros(K * X.shape[1]) if W0 is None else _matrix(W0, "W0", cols=X.shape[1]).ravel()
    if w0.size != K * X.shape[1]:
        raise ValueError(f"W0 must have shape ({K}, {X.shape[1]})")
    res = minimize(_ce_objective, w0, args=(X, T, lam, K), jac=True, hessp=_ce_hessp, method="trust-ncg",
                   options={"maxiter": max_iter, "gtol": tol})
    return res.x.reshape(K, X.shape[1])


def stationarity_residual(X, T, W, lam: float) -> float:
    """Max-abs violation of identity (2): :math:`\\lVert W - (Y-P)^\\top\\Phi/(N\\lambda)\\rVert_\\infty` in row convention."""
    X = _matrix(X, "X")
    T = _matrix(T, "T")
    W = _matrix(W, "W", cols=X.shape[1])
    lam = _positive(lam, "lam")
    P = softmax_outputs(X, W)
    return float(np.max(np.abs(W - (T - P).T @ X / (X.shape[0] * lam))))


@dataclass
class SelfDistillation:
    """The result of :func:`self_distill`: weights and training outputs of rounds 0 (teacher) .. R."""

    weights: list[np.ndarray]
    train_outputs: list[np.ndarray]

    @property
    def teacher(self) -> np.ndarray:
        return self.weights[0]

    def predict(self, X, round: int) -> np.ndarray:
        """Predicted classes of round ``round`` on features ``X``."""
        return softmax_outputs(X, self.weights[round]).argmax(axis=1)


def self_distill(X, y_noisy, K: int, lam: float, rounds: int) -> SelfDistillation:
    """Multi-round self-distillation: the teacher fits ``one_hot(y_noisy)``; round t fits round t-1's outputs.

    Each round is warm-started from the previous one (the minimiser is unique, so this only saves
    time). Returns weights and training outputs :math:`P^{(0)},\\dots,P^{(R)}`.
    """
    rounds = _rounds(rounds)
    targets = one_hot(y_noisy, K)
    X = _matrix(X, "X")
    if targets.shape[0] != X.shape[0]:
        raise ValueError("y_noisy must have one label per row of X")
    weights, outputs = [], []
    W = None
    for _ in range(rounds + 1):
        W = fit_softmax_ridge(X, targets, lam, W0=W)
        targets = softmax_outputs(X, W)
        weights.append(W)
        outputs.append(targets)
    return SelfDistillation(weights, outputs)


# --------------------------------------------------------------------------------------------------
# the PLL student
# --------------------------------------------------------------------------------------------------
def top2_targets(P) -> np.ndarray:
    """Two-hot targets ``(N, K)``: weight 1/2 on each of the teacher's two most likely classes."""
    P = _matrix(P, "P")
    _num_classes(P.shape[1])
    top = np.argsort(-P, axis=1, kind="stable")[:, :2]
    T = np.zeros_like(P)
    np.put_along_axis(T, top, 0.5, axis=1)
    return T


def gce_loss(P, candidates, q: float = 0.7) -> float:
    """Generalised cross-entropy averaged over candidate labels: mean over (i, y in S_i) of :math:`(1-p_y^q)/q`.

    ``candidates`` is an ``(N, K)`` 0/1 (or two-hot) mask of each sample's candidate set
    :math:`S_i`. For :math:`q\\to0` this tends to the cross-entropy; :math:`q=1` is the MAE loss.
    """
    P = _matrix(P, "P")
    S = _matrix(candidates, "candidates", cols=P.shape[1]) > 0
    if not 0 < q <= 1:
        raise ValueError(f"q must be in (0, 1], got {q}")
    if not S.any(axis=1).all():
        raise ValueError("every sample needs at least one candidate label")
    return float(np.sum((1 - P[S] ** q) / q) / S.sum())


def _gce_objective(w, X, S, lam, K, q):
    W = w.reshape(K, X.shape[1])
    Z = X @ W.T
    Z -= Z.max(axis=1, keepdims=True)
    P = np.exp(Z)
    P /= P.sum(axis=1, keepdims=True)
    count = S.sum()
    Pq = np.where(S, P, 1.0) ** q
    loss = np.sum(np.where(S, (1 - Pq) / q, 0.0)) / count + 0.5 * lam * np.sum(W * W)
    # d/dz (1 - p_y^q)/q = -p_y^q (e_y - p), summed over the candidates y of each sample
    coef = np.where(S, Pq, 0.0)
    grad_Z = -(coef - coef.sum(axis=1, keepdims=True) * P) / count
    grad = grad_Z.T @ X + lam * W
    return loss, grad.ravel()


def fit_gce(X, candidates, lam: float, q: float = 0.7, W0=None, tol: float = 1e-8,
            max_iter: int = 2000) -> np.ndarray:
    """Minimise the mean GCE over each sample's candidate labels plus :math:`\\frac\\lambda2\\lVert W\\rVert_F^2`.

    ``candidates`` is an ``(N, K)`` mask (non-zero entries are candidates). The objective is not
    convex, so the start ``W0`` matters; the official code starts from the teacher.
    """
    X = _matrix(X, "X")
    S = _matrix(candidates, "candidates") > 0
    if S.shape[0] != X.shape[0]:
        raise ValueError("candidates must have one row per sample of X")
    K = _num_classes(S.shape[1])
    if not S.any(axis=1).all():
        raise ValueError("every sample needs at least one candidate label")
    lam = _positive(lam, "lam")
    if not 0 < q <= 1:
        raise ValueError(f"q must be in (0, 1], got {q}")
    w0 = np.zeros(K * X.shape[1]) if W0 is None else _matrix(W0, "W0", cols=X.shape[1]).ravel()
    if w0.size != K * X.shape[1]:
        raise ValueError(f"W0 must have shape ({K}, {X.shape[1]})")
    res = minimize(_gce_objective, w0, args=(X, S, lam, K, q), jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter, "gtol": tol, "ftol": 1e-15, "maxcor": 20})
    return res.x.reshape(K, X.shape[1])


def fit_pll_student(X, P_teacher, lam: float, loss: str = "gce", q: float = 0.7, W0=None,
                    tol: float = 1e-8, max_iter: int = 2000) -> np.ndarray:
    """One PLL round on the teacher's top-2 labels.

    ``loss="ce"``: the theory's student, cross-entropy to the two-hot 1/2-1/2 targets (convex).
    ``loss="gce"``: the official code's student, GCE with exponent ``q`` on both candidate labels,
    plus weight decay, started from ``W0`` (pass the teacher's weights, as the paper's code does).
    """
    T = top2_targets(P_teacher)
    if loss == "ce":
        return fit_softmax_ridge(X, T, lam, W0=W0, tol=tol, max_iter=max_iter)
    if loss != "gce":
        raise ValueError(f"loss must be 'gce' or 'ce', got {loss!r}")
    return fit_gce(X, T, lam, q=q, W0=W0, tol=tol, max_iter=max_iter)


# --------------------------------------------------------------------------------------------------
# label noise
# --------------------------------------------------------------------------------------------------
def corruption_matrix(kind: str, K: int, eta: float, clusters=None) -> np.ndarray:
    """Row-stochastic corruption matrix :math:`C_{kj}=\\Pr(\\hat y=j\\mid y=k)`.

    * ``"sym"``: keep with probability :math:`1-\\eta`, else uniform over the other :math:`K-1` classes.
    * ``"asym"``: :math:`\\eta/K` to every other class and an extra :math:`\\eta/K` to class
      :math:`k+1 \\bmod K` (as in the official code).
    * ``"superclass"``: uniform over the other members of the class's cluster (``clusters[k]`` is
      the cluster id of class k); a class alone in its cluster is never corrupted.
    """
    K = _num_classes(K)
    eta = _noise_rate(eta)
    C = np.zeros((K, K))
    if kind == "sym":
        C[:] = eta / (K - 1)
        np.fill_diagonal(C, 1 - eta)
    elif kind == "asym":
        C[:] = eta / K
        np.fill_diagonal(C, 1 - eta)
        for k in range(K):
            C[k, (k + 1) % K] += eta / K
    elif kind == "superclass":
        if clusters is None:
            raise ValueError("superclass noise needs clusters (one cluster id per class)")
        clusters = np.asarray(clusters)
        if clusters.shape != (K,):
            raise ValueError(f"clusters must have shape ({K},), got {clusters.shape}")
        for k in range(K):
            mates = np.flatnonzero((clusters == clusters[k]) & (np.arange(K) != k))
            if mates.size == 0:
                C[k, k] = 1.0
            else:
                C[k, k] = 1 - eta
                C[k, mates] = eta / mates.size
    else:
        raise ValueError(f"kind must be 'sym', 'asym' or 'superclass', got {kind!r}")
    return C


def corrupt_labels(y, C, rng: np.random.Generator) -> np.ndarray:
    """Draw :math:`\\hat y_i \\sim C_{y_i,\\cdot}` independently for every sample."""
    C = _matrix(C, "C")
    K = _num_classes(C.shape[0])
    if C.shape != (K, K) or np.any(C < 0) or not np.allclose(C.sum(axis=1), 1):
        raise ValueError("C must be a square row-stochastic matrix")
    y = _labels(y, "y", K)
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator")
    u = rng.random(y.size)
    cdf = np.cumsum(C, axis=1)[y]
    return np.minimum((u[:, None] >= cdf).sum(axis=1), K - 1)


def corrupt_labels_exactly(y, C, rng: np.random.Generator | None = None) -> np.ndarray:
    """Corrupt labels so that each true class's label histogram matches :math:`n_k C_{k,\\cdot}` exactly.

    Counts are rounded by largest remainders; ``rng`` (optional) shuffles which samples of a class
    receive which label. Used by the theory, where the corruption matrix is the empirical one.
    """
    C = _matrix(C, "C")
    K = _num_classes(C.shape[0])
    if C.shape != (K, K) or np.any(C < 0) or not np.allclose(C.sum(axis=1), 1):
        raise ValueError("C must be a square row-stochastic matrix")
    y = _labels(y, "y", K)
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator or None")
    y_noisy = y.copy()
    for k in range(K):
        idx = np.flatnonzero(y == k)
        if rng is not None:
            idx = rng.permutation(idx)
        raw = idx.size * C[k]
        counts = np.floor(raw).astype(int)
        short = idx.size - counts.sum()
        counts[np.argsort(-(raw - counts), kind="stable")[:short]] += 1
        y_noisy[idx] = np.repeat(np.arange(K), counts)
    return y_noisy


def superclass_clusters(X, y, K: int, cut: float = 0.8) -> np.ndarray:
    """Cluster classes by the correlation of their mean features (complete linkage).

    As in the official code: distance :math:`1-\\mathrm{corr}(\\bar\\phi_k,\\bar\\phi_j)`, a dendrogram cut
    at ``cut`` times the largest merge distance. Returns a cluster id per class.
    """
    X = _matrix(X, "X")
    K = _num_classes(K)
    y = _labels(y, "y", K)
    if not 0 < cut <= 1:
        raise ValueError(f"cut must be in (0, 1], got {cut}")
    means = np.stack([X[y == k].mean(axis=0) for k in range(K)])
    dist = np.clip(1 - np.corrcoef(means), 0, None)
    np.fill_diagonal(dist, 0)
    Z = linkage(squareform(dist, checks=False), method="complete")
    return fcluster(Z, t=cut * Z[:, 2].max(), criterion="distance") - 1


# --------------------------------------------------------------------------------------------------
# theory: the linearised closed form (3) and the block Gram model (4)-(5)
# --------------------------------------------------------------------------------------------------
def shrink_factors(G, lam: float, K: int) -> tuple[np.ndarray, np.ndarray]:
    """Eigen-decomposition of :math:`A=G(G+KN\\lambda I)^{-1}`: factors :math:`\\alpha_j=\\mu_j/(\\mu_j+KN\\lambda)` and eigenvectors."""
    G = _matrix(G, "G")
    if G.shape[0] != G.shape[1] or not np.allclose(G, G.T):
        raise ValueError("G must be a symmetric square matrix")
    K = _num_classes(K)
    lam = _positive(lam, "lam")
    mu, V = np.linalg.eigh(G)
    return mu / (mu + K * G.shape[0] * lam), V


def linearized_outputs(G, Y_hat, lam: float, t: int) -> np.ndarray:
    """Closed form (3), rows convention: :math:`P^{(t)} = 1/K + A^{t+1}(\\hat Y - 1/K)` with ``Y_hat`` ``(N, K)``."""
    return linearized_rounds(G, Y_hat, lam, _rounds(t))[-1]


def linearized_rounds(G, Y_hat, lam: float, rounds: int) -> list[np.ndarray]:
    """Closed form (3) for every round :math:`t=0..` ``rounds``, sharing one eigen-decomposition of ``G``."""
    Y_hat = _matrix(Y_hat, "Y_hat")
    K = _num_classes(Y_hat.shape[1])
    rounds = _rounds(rounds)
    alpha, V = shrink_factors(G, lam, K)
    if V.shape[0] != Y_hat.shape[0]:
        raise ValueError("G and Y_hat must describe the same number of samples")
    coeffs = V.T @ (Y_hat - 1.0 / K)  # the label matrix in G's eigenbasis
    return [1.0 / K + V @ ((alpha ** (t + 1))[:, None] * coeffs) for t in range(rounds + 1)]


def block_gram(K: int, n: int, c: float, d: float, eps: float = 0.0, rng=None) -> tuple[np.ndarray, np.ndarray]:
    """The block ("class-correlated") Gram matrix: 1 on the diagonal, ``c`` within a class, ``d`` across.

    ``eps > 0`` adds a symmetric uniform :math:`\\pm\\varepsilon` perturbation off the diagonal (as the
    official numerical code does). Returns ``(G, y_true)`` with classes in blocks of ``n``.
    """
    K = _num_classes(K)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if not 0 <= d < c < 1:
        raise ValueError(f"need 0 <= d < c < 1, got c={c}, d={d}")
    y = np.repeat(np.arange(K), n)
    G = np.where(y[:, None] == y[None, :], c, d).astype(float)
    if eps:
        if rng is None:
            raise ValueError("eps > 0 needs an rng")
        E = rng.uniform(-eps, eps, size=G.shape)
        G += np.triu(E, 1) + np.triu(E, 1).T
    np.fill_diagonal(G, 1.0)
    return G, y


def block_gram_eigenvalues(K: int, n: int, c: float, d: float) -> tuple[float, float, float]:
    """Eigenvalues (4) of the block Gram matrix: :math:`\\mu_1` (all-ones), :math:`\\mu_2` (class contrasts,
    multiplicity K-1), :math:`\\mu_3` (within-class, multiplicity K(n-1))."""
    K = _num_classes(K)
    return 1 - c + n * (c - d) + K * n * d, 1 - c + n * (c - d), 1 - c


def plurality_margin(y_true, y_noisy, K: int) -> float:
    """:math:`\\Delta=\\min_k(m_k[k]-\\max_{j\\ne k}m_k[j])`, with :math:`m_k` the label histogram of true class k.

    Positive exactly when every class's given labels have the true class as strict plurality.
    """
    K = _num_classes(K)
    y_true = _labels(y_true, "y_true", K)
    y_noisy = _labels(y_noisy, "y_noisy", K)
    if y_true.shape != y_noisy.shape:
        raise ValueError("y_true and y_noisy must have the same length")
    margins = []
    for k in range(K):
        m = np.bincount(y_noisy[y_true == k], minlength=K) / max(np.sum(y_true == k), 1)
        margins.append(m[k] - np.max(np.delete(m, k)))
    return float(min(margins))


def t_star(Delta: float, alpha2: float, alpha3: float) -> int | None:
    """Formula (5): rounds after which all mislabelled samples are corrected (linearised block model).

    Returns ``None`` when :math:`\\Delta \\le 0` (plurality condition violated: SD never corrects them).
    """
    if not 0 < alpha3 < alpha2 < 1:
        raise ValueError(f"need 0 < alpha3 < alpha2 < 1, got alpha2={alpha2}, alpha3={alpha3}")
    if Delta <= 0:
        return None
    return max(0, math.ceil(math.log(1 + 1 / Delta) / math.log(alpha2 / alpha3)) - 1)


@dataclass
class BlockModel:
    """Exact (softmax) solutions of the block Gram model, reduced by symmetry to sample *types*.

    A type is (true class k, given label l); all ``counts[k, l]`` samples of a type share their
    outputs. ``outputs[t][k, l]`` is the output distribution of type (k, l) at round t.
    """

    counts: np.ndarray
    outputs: list[np.ndarray]

    def noisy_accuracy(self, t: int) -> float:
        """Fraction of mislabelled samples (l != k) whose round-t prediction is the true class k."""
        return 1.0 - self.noisy_errors(t) / max(self._mislabelled().sum(), 1)

    def noisy_errors(self, t: int) -> int:
        """Number of mislabelled samples (l != k) whose round-t prediction is *not* the true class k."""
        pred = self.outputs[t].argmax(axis=2)
        k_idx = np.arange(self.counts.shape[0])[:, None]
        return int(round(np.sum(self._mislabelled() * (pred != k_idx))))

    def _mislabelled(self) -> np.ndarray:
        K = self.counts.shape[0]
        return self.counts * (np.arange(K)[:, None] != np.arange(K)[None, :])


def _block_fit(counts, T, c, d, lam, z0=None):
    """Minimise (1) on features :math:`\\phi_i=[\\sqrt d\\,|\\,\\sqrt{c-d}\\,e_{k(i)}\\,|\\,\\sqrt{1-c}\\,e_i]`,
    whose Gram matrix is the block model; by symmetry one weight vector per type suffices."""
    K = counts.shape[0]
    N = counts.sum()
    sd, sc, si = math.sqrt(d), math.sqrt(c - d), math.sqrt(1 - c)

    def unpack(w):
        return w[:K], w[K:K + K * K].reshape(K, K), w[K + K * K:].reshape(K, K, K)

    def objective(w):
        w0, Wc, U = unpack(w)  # U[k, l] is the individual weight column of a type-(k, l) sample
        Z = sd * w0[None, None, :] + sc * Wc.T[:, None, :] + si * U
        logP = log_softmax(Z, axis=2)
        R = np.exp(logP) - T  # dCE/dZ for each type
        n = counts[:, :, None]
        loss = -np.sum(n * T * logP) / N + 0.5 * lam * (w0 @ w0 + np.sum(Wc * Wc) + np.sum(n * U * U))
        g0 = sd * np.sum(n * R, axis=(0, 1)) / N + lam * w0
        gc = sc * np.sum(n * R, axis=1).T / N + lam * Wc
        gU = n * (si * R / N + lam * U)
        return loss, np.concatenate([g0, gc.ravel(), gU.ravel()])

    w = np.zeros(K + K * K + K ** 3) if z0 is None else z0
    res = minimize(objective, w, jac=True, method="L-BFGS-B",
                   options={"maxiter": 5000, "gtol": 1e-12, "ftol": 0.0, "maxcor": 30})
    w0, Wc, U = unpack(res.x)
    Z = sd * w0[None, None, :] + sc * Wc.T[:, None, :] + si * U
    return softmax(Z, axis=2), res.x


def _type_counts(y_true, y_noisy, K):
    K = _num_classes(K)
    y_true = _labels(y_true, "y_true", K)
    y_noisy = _labels(y_noisy, "y_noisy", K)
    if y_true.shape != y_noisy.shape:
        raise ValueError("y_true and y_noisy must have the same length")
    counts = np.zeros((K, K))
    np.add.at(counts, (y_true, y_noisy), 1)
    return counts


def block_model_rounds(y_true, y_noisy, K: int, c: float, d: float, lam: float, rounds: int) -> BlockModel:
    """Exact softmax self-distillation on the block Gram model for rounds 0..``rounds``."""
    counts = _type_counts(y_true, y_noisy, K)
    lam = _positive(lam, "lam")
    rounds = _rounds(rounds)
    if not 0 <= d < c < 1:
        raise ValueError(f"need 0 <= d < c < 1, got c={c}, d={d}")
    T = np.broadcast_to(np.eye(K)[None, :, :], (K, K, K)).copy()  # type (k, l) has one-hot target e_l
    outputs, w = [], None
    for _ in range(rounds + 1):
        P, w = _block_fit(counts, T, c, d, lam, w)
        outputs.append(P)
        T = P
    return BlockModel(counts, outputs)


def block_model_pll(teacher: BlockModel, c: float, d: float, lam: float) -> BlockModel:
    """One PLL round (two-hot cross-entropy, the theory's student) on the block model's teacher outputs."""
    K = teacher.counts.shape[0]
    T = top2_targets(teacher.outputs[0].reshape(K * K, K)).reshape(K, K, K)
    P, _ = _block_fit(teacher.counts, T, c, d, _positive(lam, "lam"))
    return BlockModel(teacher.counts, [P])


def block_model_linearized(y_true, y_noisy, K: int, c: float, d: float, lam: float, rounds: int) -> BlockModel:
    r"""Closed form (3) on the block Gram model, by sample type, without an :math:`N\times N` matrix.

    With equal class sizes :math:`n`, the label matrix splits along the three eigen-levels (4), so a sample
    of type (k, l) has the round-t output
    :math:`\frac1K\mathbf 1+\alpha_1^{t+1}(\bar y-\frac1K\mathbf 1)+\alpha_2^{t+1}(m_k-\bar y)
    +\alpha_3^{t+1}(e_l-m_k)`, with :math:`m_k` the label histogram of true class k and :math:`\bar y`
    the overall one. Equals :func:`linearized_rounds` on :func:`block_gram` (no perturbation).
    """
    counts = _type_counts(y_true, y_noisy, K)
    lam = _positive(lam, "lam")
    rounds = _rounds(rounds)
    if not 0 <= d < c < 1:
        raise ValueError(f"need 0 <= d < c < 1, got c={c}, d={d}")
    sizes = counts.sum(axis=1)
    if not np.all(sizes == sizes[0]) or sizes[0] == 0:
        raise ValueError("the block model needs every true class to have the same number of samples")
    n, N = int(sizes[0]), int(counts.sum())
    alpha1, alpha2, alpha3 = (mu / (mu + K * N * lam) for mu in block_gram_eigenvalues(K, n, c, d))
    m = counts / n                                    # m[k]: label histogram of true class k
    y_bar = counts.sum(axis=0) / N
    e = np.eye(K)[None, :, :]                         # type (k, l) has the one-hot label e_l
    outputs = [1.0 / K + alpha1 ** (t + 1) * (y_bar - 1.0 / K)[None, None, :]
               + alpha2 ** (t + 1) * (m - y_bar)[:, None, :] + alpha3 ** (t + 1) * (e - m[:, None, :])
               for t in range(rounds + 1)]
    return BlockModel(counts, outputs)


def numerical_study(seed: int, K: int = 4, n: int = 500, c: float = 0.4, d: float = 0.1, lam: float = 1e-5,
                    eta: float = 0.5, rounds: int = 20) -> dict:
    """The official numerical study (``numerical_solving.py``: its defaults are the defaults here) on the exact
    block Gram model, without its perturbation: labels flipped at random with probability ``eta`` to a uniform
    other class (``numpy.random.default_rng(seed)``), then rounds 0..``rounds`` of the exact softmax solution
    (:func:`block_model_rounds`) and of the linearised closed form (:func:`block_model_linearized`).

    Returns a dict: ``seed``, ``mislabelled`` (count), ``Delta`` (realised plurality margin), ``t_star``
    (formula (5), None without a plurality), ``exact_errors`` and ``linearized_errors`` (mislabelled samples
    predicted wrong, per round), ``exact_first`` and ``linearized_first`` (first round with no error, or None).
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    K = _num_classes(K)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(K), n)
    y_hat = corrupt_labels(y, corruption_matrix("sym", K, eta), rng)
    exact = block_model_rounds(y, y_hat, K, c, d, lam, rounds)
    linear = block_model_linearized(y, y_hat, K, c, d, lam, rounds)
    _, mu2, mu3 = block_gram_eigenvalues(K, n, c, d)
    alpha2, alpha3 = (mu / (mu + K * K * n * lam) for mu in (mu2, mu3))
    Delta = plurality_margin(y, y_hat, K)
    exact_errors = [exact.noisy_errors(t) for t in range(rounds + 1)]
    linear_errors = [linear.noisy_errors(t) for t in range(rounds + 1)]
    first = lambda errors: next((t for t, e in enumerate(errors) if e == 0), None)
    return dict(seed=int(seed), mislabelled=int(np.sum(y != y_hat)), Delta=Delta,
                t_star=t_star(Delta, alpha2, alpha3), exact_errors=exact_errors, linearized_errors=linear_errors,
                exact_first=first(exact_errors), linearized_first=first(linear_errors))


def noisy_sample_accuracy(P, y_true, y_noisy) -> float:
    """Accuracy against the true labels on the samples whose given label was flipped."""
    P = _matrix(P, "P")
    y_true = _labels(y_true, "y_true", P.shape[1])
    y_noisy = _labels(y_noisy, "y_noisy", P.shape[1])
    flipped = y_true != y_noisy
    if not flipped.any():
        raise ValueError("no sample is mislabelled")
    return float(np.mean(P[flipped].argmax(axis=1) == y_true[flipped]))


def first_perfect_round(accuracies) -> int | None:
    """The first round ``t`` whose accuracy on mislabelled inputs is exactly 1 (``None`` if there is none)."""
    accuracies = np.asarray(accuracies, dtype=float)
    if accuracies.ndim != 1 or accuracies.size == 0 or np.isnan(accuracies).any():
        raise ValueError("accuracies must be a non-empty 1-D sequence of numbers, one per round")
    hits = np.flatnonzero(accuracies == 1.0)
    return int(hits[0]) if hits.size else None


def linearized_noisy_accuracy(G, y_true, y_noisy, K: int, lam: float, rounds: int) -> list[float]:
    """Accuracy on the mislabelled inputs of the linearised closed form (3), rounds 0..``rounds``.

    This is the ``--approx`` mode of the official numerical study: ``G`` may be any symmetric matrix
    (for instance :func:`block_gram` with a perturbation ``eps``); no solver is involved.
    """
    K = _num_classes(K)
    y_true = _labels(y_true, "y_true", K)
    outputs = linearized_rounds(G, one_hot(y_noisy, K), lam, rounds)
    return [noisy_sample_accuracy(P, y_true, y_noisy) for P in outputs]


# --------------------------------------------------------------------------------------------------
# the Figure-2 experiment
# --------------------------------------------------------------------------------------------------
def digits_split(seed: int, test_size: float = 0.5):
    """The book's stand-in for frozen backbone features: scikit-learn's bundled 8x8 digits.

    Features are the 64 pixel intensities scaled to [0, 1] (no bias column, as in the paper's linear
    probe); a stratified train/test split with ``random_state=seed``. Returns
    ``X_train, X_test, y_train, y_test``.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if not 0 < test_size < 1:
        raise ValueError(f"test_size must be in (0, 1), got {test_size}")
    X, y = load_digits(return_X_y=True)
    return train_test_split(X / 16.0, y, test_size=test_size, stratify=y, random_state=seed)


def accuracy_by_round(X_train, y_train, X_test, y_test, K: int, eta: float, lam: float, seed: int,
                      rounds: int = 4, noise: str = "sym", clusters=None) -> list[float]:
    """Test accuracy of rounds 0 (teacher) .. ``rounds`` of self-distillation after corrupting the labels.

    The noise draw uses ``numpy.random.default_rng(seed)``, the same as :func:`distillation_gains`.
    """
    K = _num_classes(K)
    y_test = _labels(y_test, "y_test", K)
    rng = np.random.default_rng(seed)
    y_noisy = corrupt_labels(y_train, corruption_matrix(noise, K, eta, clusters), rng)
    run = self_distill(X_train, y_noisy, K, lam, rounds)
    return [float(np.mean(run.predict(X_test, t) == y_test)) for t in range(rounds + 1)]


def distillation_gains(X_train, y_train, X_test, y_test, K: int, eta: float, lam: float, seed: int,
                       rounds: int = 4, noise: str = "sym", clusters=None, q: float = 0.7) -> dict:
    """One cell of the paper's Figure 2: corrupt the training labels, then report test accuracies.

    Returns a dict with ``"teacher"``, ``"t=1"`` .. ``"t=R"``, ``"PLL-GCE"`` (official code's student,
    teacher-initialised) and ``"PLL-CE"`` (the theory's two-hot student), each a test accuracy in [0, 1],
    plus ``"realised_eta"``.
    """
    K = _num_classes(K)
    rng = np.random.default_rng(seed)
    C = corruption_matrix(noise, K, eta, clusters)
    y_noisy = corrupt_labels(y_train, C, rng)
    sd = self_distill(X_train, y_noisy, K, lam, rounds)
    acc = {"teacher": float(np.mean(sd.predict(X_test, 0) == y_test))}
    for t in range(1, rounds + 1):
        acc[f"t={t}"] = float(np.mean(sd.predict(X_test, t) == y_test))
    P0 = sd.train_outputs[0]
    for name, loss in (("PLL-GCE", "gce"), ("PLL-CE", "ce")):
        W = fit_pll_student(X_train, P0, lam, loss=loss, q=q, W0=sd.teacher)
        acc[name] = float(np.mean(softmax_outputs(X_test, W).argmax(axis=1) == y_test))
    acc["realised_eta"] = float(np.mean(y_noisy != np.asarray(y_train)))
    return acc
