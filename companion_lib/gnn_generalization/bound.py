r"""Wasserstein distances, the k-variance and the k-variance margin bound (Theorem D.2, Algorithm 1).

Symbols follow the paper. $\lambda$ is the bounding encoder (a WL colour histogram), $\phi = f\circ\lambda$
the trained network's output, $y$ the labels, $K$ the number of classes, $m_c$ the number of training
graphs of class $c$, $\gamma$ the margin, $\delta$ the confidence and $n$ the number of sampled pairs of
halves. The bound is

$$\sqrt{\tfrac{\ln(2/\delta)}{2m}} + \frac1K\sum_c \frac{L_\rho\,\mathrm{Lip}(f)}{\gamma}
\Big(\underbrace{\tfrac1n\sum_{j=1}^n W_1(\lambda_\sharp\mu_{c,T^j},\lambda_\sharp\mu_{c,\tilde T^j})}_{w_c}
+ 2\Delta_c\sqrt{\tfrac{\ln(2K/\delta)}{n\lfloor m_c/2n\rfloor}}\Big),\qquad m=\sum_c\lfloor m_c/2n\rfloor .$$

``official_code=True`` switches to what the official implementation (``seanli3/hom_gen``,
``wl/compute_bound.py``) computes: $L_\rho = \sqrt{K-1}/K$, a base-10 logarithm in the concentration
term, the diameter $\Delta_c$ taken on $\phi$ instead of $\lambda$, and two halves drawn independently
(they may overlap).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import ot
from scipy.spatial.distance import cdist, pdist

__all__ = ["wasserstein1", "wasserstein1_from_cost", "k_variance", "lipschitz_constant", "separation",
           "diameter", "kvariance_bound", "BoundTerms", "concentration_separation", "check_embeddings",
           "n_distinct", "vc_bound"]


def check_embeddings(X, name: str) -> np.ndarray:
    """A finite 2-D float array with at least one row (a 1-D array is one point per entry)."""
    X = np.asarray(X, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty (n, d) array, got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return X


def _check_labels(y, n: int) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != n:
        raise ValueError(f"y must hold one label per embedding: got {y.shape} labels for {n} embeddings")
    return y


def wasserstein1_from_cost(cost, a=None, b=None) -> float:
    r"""$W_1 = \min_{\pi\in\Pi(a,b)}\sum_{ij}\pi_{ij}C_{ij}$ for a given cost matrix (POT's exact ``emd2``).

    ``a`` and ``b`` default to uniform weights.
    """
    C = np.asarray(cost, dtype=float)
    if C.ndim != 2 or 0 in C.shape or not np.all(np.isfinite(C)):
        raise ValueError(f"cost must be a finite non-empty 2-D array, got shape {C.shape}")
    a = np.full(C.shape[0], 1.0 / C.shape[0]) if a is None else np.asarray(a, dtype=float)
    b = np.full(C.shape[1], 1.0 / C.shape[1]) if b is None else np.asarray(b, dtype=float)
    if a.shape != (C.shape[0],) or b.shape != (C.shape[1],):
        raise ValueError("a and b must match the rows and columns of cost")
    if (a < 0).any() or (b < 0).any() or not np.isclose(a.sum(), b.sum()):
        raise ValueError("a and b must be non-negative with equal total mass")
    return float(ot.emd2(a, b, C))


def wasserstein1(X, Y) -> float:
    r"""$W_1$ between the uniform empirical measures on the rows of ``X`` and ``Y`` (Euclidean cost)."""
    X = check_embeddings(X, "X")
    Y = check_embeddings(Y, "Y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X and Y must have the same dimension, got {X.shape[1]} and {Y.shape[1]}")
    return wasserstein1_from_cost(cdist(X, Y))


def _halves(idx: np.ndarray, size: int, rng: np.random.Generator, overlap: bool) -> tuple[np.ndarray, np.ndarray]:
    if overlap:  # the official code: two independent draws without replacement
        return rng.choice(idx, size, replace=False), rng.choice(idx, size, replace=False)
    pick = rng.choice(idx, 2 * size, replace=False)
    return pick[:size], pick[size:]


def k_variance(X, k: int, rng: np.random.Generator, n_repeats: int = 1) -> float:
    r"""Monte Carlo k-variance $\mathbb E_{T,\tilde T}W_1(\mu_T,\mu_{\tilde T})$ of the rows of ``X``.

    $T$ and $\tilde T$ are disjoint random subsets of size ``k`` (so ``2k <= len(X)``), averaged over
    ``n_repeats`` draws: the inner term $w_c$ of Algorithm 1.
    """
    X = check_embeddings(X, "X")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if 2 * k > len(X):
        raise ValueError(f"k must satisfy 2k <= number of points ({len(X)}), got k={k}")
    if n_repeats < 1:
        raise ValueError(f"n_repeats must be >= 1, got {n_repeats}")
    idx = np.arange(len(X))
    vals = []
    for _ in range(int(n_repeats)):
        t, tt = _halves(idx, int(k), rng, overlap=False)
        vals.append(wasserstein1(X[t], X[tt]))
    return float(np.mean(vals))


def lipschitz_constant(lam, phi) -> float:
    r"""Algorithm 1, line 1: $\max \|\phi(G)-\phi(H)\| / \|\lambda(G)-\lambda(H)\|$ over pairs with $\lambda(G)\ne\lambda(H)$."""
    lam = check_embeddings(lam, "lam")
    phi = check_embeddings(phi, "phi")
    if len(lam) != len(phi):
        raise ValueError(f"lam and phi must describe the same graphs, got {len(lam)} and {len(phi)} rows")
    dl = pdist(lam)
    dp = pdist(phi)
    mask = dl > 0
    if not mask.any():
        raise ValueError("lam gives every graph the same embedding: Lip(f) is undefined")
    return float(np.max(dp[mask] / dl[mask]))


def separation(lam) -> float:
    """S of Prop. 4.3: the smallest non-zero distance between two embeddings."""
    d = pdist(check_embeddings(lam, "lam"))
    d = d[d > 0]
    if d.size == 0:
        raise ValueError("lam gives every graph the same embedding: no separation")
    return float(d.min())


def diameter(X) -> float:
    r"""$\Delta = \max\|x - x'\|$ over rows (0 for a single row)."""
    X = check_embeddings(X, "X")
    return float(pdist(X).max()) if len(X) > 1 else 0.0


@dataclass
class BoundTerms:
    """The k-variance margin bound and every term of it (one entry per class where it is a list)."""

    bound: float
    lip_f: float
    lip_rho: float
    gamma: float
    w1: list = field(default_factory=list)          # w_c, the sampled intra-class W1
    delta_c: list = field(default_factory=list)     # diameters
    class_terms: list = field(default_factory=list) # L_rho Lip(f)/gamma (w_c + 2 Delta_c sqrt(...))
    confidence: float = 0.0                         # sqrt(log(2/delta) / 2m)
    m: int = 0

    @property
    def mean_w1(self) -> float:
        return float(np.mean(self.w1))


def kvariance_bound(lam, phi, y, *, gamma: float = 1.0, delta: float = 0.1, n: int = 1,
                    rng: np.random.Generator, lip_rho: float | None = None,
                    official_code: bool = False) -> BoundTerms:
    r"""Algorithm 1 of the paper: the k-variance margin bound from training embeddings.

    Parameters
    ----------
    lam, phi:
        $\lambda$ (bounding encoder, e.g. :func:`wl_histograms`) and $\phi$ (network output) of the
        same training graphs, one row each.
    y:
        class labels of those graphs.
    gamma, delta, n:
        the margin $\gamma>0$, confidence $\delta\in(0,1)$ and the number $n$ of sampled pairs.
    lip_rho:
        $L_\rho$; default 1 (softmax scores, as in the paper's text) or $\sqrt{K-1}/K$ with
        ``official_code``.
    official_code:
        reproduce the official implementation's choices (see the module docstring).
    """
    lam = check_embeddings(lam, "lam")
    phi = check_embeddings(phi, "phi")
    if len(lam) != len(phi):
        raise ValueError(f"lam and phi must describe the same graphs, got {len(lam)} and {len(phi)} rows")
    y = _check_labels(y, len(lam))
    if not (isinstance(gamma, (int, float, np.floating)) and gamma > 0 and math.isfinite(gamma)):
        raise ValueError(f"gamma (the margin) must be a positive number, got {gamma!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n (pairs of halves) must be an integer >= 1, got {n!r}")
    classes = np.unique(y)
    K = len(classes)
    if K < 2:
        raise ValueError("y must contain at least two classes")
    if lip_rho is None:
        lip_rho = math.sqrt(K - 1) / K if official_code else 1.0
    log = (lambda x: math.log(x, 10)) if official_code else math.log
    lip_f = lipschitz_constant(lam, phi)
    terms = BoundTerms(bound=0.0, lip_f=lip_f, lip_rho=float(lip_rho), gamma=float(gamma))
    total = 0.0
    for c in classes:
        idx = np.flatnonzero(y == c)
        size = len(idx) // (2 * n)
        if size < 1:
            raise ValueError(f"class {c} has {len(idx)} training graphs: too few for n={n} pairs of halves")
        w = []
        for _ in range(int(n)):
            t, tt = _halves(idx, size, rng, overlap=official_code)
            w.append(wasserstein1(lam[t], lam[tt]))
        w_c = float(np.mean(w))
        d_c = diameter(phi[idx] if official_code else lam[idx])
        term = lip_rho * lip_f / gamma * (w_c + 2 * d_c * math.sqrt(log(2 * K / delta) / (n * size)))
        terms.w1.append(w_c)
        terms.delta_c.append(d_c)
        terms.class_terms.append(term)
        terms.m += size
        total += term
    terms.confidence = math.sqrt(math.log(2 / delta) / (2 * terms.m))
    terms.bound = total / K + terms.confidence
    return terms


def concentration_separation(lam, y, half: int, rng: np.random.Generator, n_repeats: int = 5) -> dict:
    r"""Section 6's two quantities, sampled: intra-class $W_1$ (concentration) and inter-class $W_1$ (separation).

    Intra: $W_1$ between two disjoint random sets of ``half`` graphs of the same class, averaged over
    classes and repeats. Inter: $W_1$ between ``half`` graphs of one class and ``half`` of another
    (all pairs of classes), averaged. Returns ``intra``, ``inter`` and their ``ratio`` (the trade-off of
    Prop. 5.2: lower is better).
    """
    lam = check_embeddings(lam, "lam")
    y = _check_labels(y, len(lam))
    if isinstance(half, bool) or not isinstance(half, (int, np.integer)) or half < 1:
        raise ValueError(f"half must be an integer >= 1, got {half!r}")
    classes = np.unique(y)
    if len(classes) < 2:
        raise ValueError("y must contain at least two classes")
    intra, inter = [], []
    for _ in range(int(n_repeats)):
        draws = {}
        for c in classes:
            idx = np.flatnonzero(y == c)
            if 2 * half > len(idx):
                raise ValueError(f"half={half} is too large: class {c} has {len(idx)} graphs")
            draws[c] = _halves(idx, int(half), rng, overlap=False)
            intra.append(wasserstein1(lam[draws[c][0]], lam[draws[c][1]]))
        for i, c in enumerate(classes):
            for c2 in classes[i + 1:]:
                inter.append(wasserstein1(lam[draws[c][0]], lam[draws[c2][0]]))
    out = {"intra": float(np.mean(intra)), "inter": float(np.mean(inter))}
    out["ratio"] = out["intra"] / out["inter"]
    return out


def n_distinct(lam) -> int:
    """The number of different embeddings among the rows of ``lam`` (graphs the encoder tells apart)."""
    lam = np.ascontiguousarray(check_embeddings(lam, "lam")) + 0.0     # + 0.0: -0.0 and 0.0 alike
    return len({row.tobytes() for row in lam})


def vc_bound(lam, delta: float = 0.1) -> float:
    r"""The VC comparison of Appendix E: $\sqrt{(D(\ln(2|S|/D)+1) - \ln(\delta/4))/|S|}$.

    $D$ is the number of training graphs that the WL encoder ``lam`` distinguishes, $|S|$ the
    number of training graphs.
    """
    lam = check_embeddings(lam, "lam")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    D, S = n_distinct(lam), len(lam)
    return float(math.sqrt((D * (math.log(2 * S / D) + 1) - math.log(delta / 4)) / S))
