r"""The CUT responses and losses, the P-spline base learner and L2Boost (L2Boost-CUT and L2Boost-IMP, for
regression and for the survival status), with the closed-form path of a linear smoother."""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np
from scipy import linalg
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.tree import DecisionTreeRegressor

from .data import _as_1d, _intervals, _positive_int
from .first_stage import DiscreteLaw, _grid_membership, _status_from_survival, bspline_basis

__all__ = [
    "cut_responses", "survival_status_responses", "naive_midpoint_response", "cut_loss", "l2_loss", "PSplineSmoother",
    "L2BoostRegressor", "L2BoostClassifier", "l2boost_pspline_path",
]


# ------------------------------------------------------------------------------------------------
# responses and losses
# ------------------------------------------------------------------------------------------------
def cut_responses(law: DiscreteLaw, left, right, g: Callable = np.log):
    r""":math:`\hat Y_k = \sum_{j: L<t_j\le R} g(t_j)^k m_{ij} / \sum_{j: L<t_j\le R} m_{ij}`, k = 1, 2:
    the CUT responses under an estimated discrete law (the integral in the definition of
    :math:`\hat Y_k` for a law with point masses)."""
    L, R = _intervals(left, right)
    if law.masses.shape[0] != len(L):
        raise ValueError(f"law has {law.masses.shape[0]} rows but there are {len(L)} intervals")
    A = _grid_membership(L, R, law.support)
    w = A * (law.masses + 1e-12)
    w = w / w.sum(axis=1, keepdims=True)
    gv = g(law.values())
    return w @ gv, w @ gv**2


def survival_status_responses(law: DiscreteLaw, left, right, s: float) -> np.ndarray:
    r"""Classification response :math:`2\Pr(Y>s\mid L<Y\le R,X)-1` under an estimated law."""
    L, R = _intervals(left, right)
    if not s > 0:
        raise ValueError(f"s must be > 0, got {s}")
    S = law.survival(np.array([s]))[:, 0]
    SL = (law.masses * (law.support[None, :] > L[:, None])).sum(axis=1)
    SR = (law.masses * (law.support[None, :] > R[:, None])).sum(axis=1)
    Ss = np.clip(S, SR, SL)
    return _status_from_survival(L, R, s, SL, SR, Ss)


def naive_midpoint_response(left, right) -> np.ndarray:
    r"""Naive imputation N: :math:`\log\frac{L+R}{2}`, and :math:`\log L` when :math:`R=\infty` (our
    choice; the paper does not say how N treats right-censored subjects)."""
    L, R = _intervals(left, right)
    return np.where(np.isinf(R), np.log(np.maximum(L, 1e-12)), np.log((L + np.where(np.isinf(R), 0, R)) / 2))


def cut_loss(y1, y2, f) -> float:
    r"""Empirical CUT loss :math:`\frac1n\sum_i \tfrac12\hat Y_{2i} - \hat Y_{1i} f_i + \tfrac12 f_i^2`."""
    y1, y2, f = _as_1d(y1, "y1"), _as_1d(y2, "y2"), _as_1d(f, "f")
    if not (y1.shape == y2.shape == f.shape):
        raise ValueError("y1, y2 and f must have the same shape")
    return float(np.mean(0.5 * y2 - y1 * f + 0.5 * f**2))


def l2_loss(y, f) -> float:
    r"""Empirical L2 loss :math:`\frac1n\sum_i \tfrac12 (y_i - f_i)^2`."""
    y, f = _as_1d(y, "y"), _as_1d(f, "f")
    if y.shape != f.shape:
        raise ValueError("y and f must have the same shape")
    return float(np.mean(0.5 * (y - f) ** 2))


# ------------------------------------------------------------------------------------------------
# base learner and L2Boost
# ------------------------------------------------------------------------------------------------
class PSplineSmoother:
    r"""Penalised cubic B-spline smoother :math:`\mathcal S = B(B^\top B+\lambda D^\top D)^{-1}B^\top`
    with a second-difference penalty; :math:`\lambda` is set by bisection so that
    :math:`\mathrm{tr}(\mathcal S) =` ``df`` (stands in for R's ``smooth.spline(df=20)``)."""

    def __init__(self, df: float = 20.0, n_basis: int = 40):
        self.df = float(df)
        self.n_basis = _positive_int(n_basis, "n_basis")
        if not 1.0 < self.df <= self.n_basis:
            raise ValueError(f"df must be in (1, n_basis={n_basis}], got {df}")

    def fit_design(self, x) -> "PSplineSmoother":
        """Build the basis on ``x`` and choose the penalty; afterwards :meth:`coef` fits residuals."""
        x = _as_1d(x, "x")
        self.lower_, self.upper_ = float(x.min()), float(x.max())
        B = bspline_basis(x, self.n_basis, self.lower_, self.upper_)
        G = B.T @ B
        Dm = np.diff(np.eye(self.n_basis), n=2, axis=0)
        P = Dm.T @ Dm

        # tr S(lam) = sum_j 1 / (1 + lam d_j) with P v = d (G + eps I) v: one eigenproblem, then bisection
        d = np.clip(linalg.eigh(P, G + 1e-8 * np.eye(self.n_basis), eigvals_only=True), 0.0, None)

        def trace(lam):
            return float(np.sum(1.0 / (1.0 + lam * d)))

        lo, hi = -8.0, 8.0                                     # bisection on log10(lambda)
        for _ in range(60):
            midpoint = (lo + hi) / 2
            if trace(10**midpoint) > self.df:
                lo = midpoint
            else:
                hi = midpoint
        self.lam_ = 10 ** ((lo + hi) / 2)
        self.B_, self.G_, self.P_ = B, G, P
        self.H_ = np.linalg.solve(G + self.lam_ * P + 1e-8 * np.eye(self.n_basis), B.T)  # (K, n)
        self.df_ = float(np.trace(B @ self.H_))
        ev, V = linalg.eigh(G, G + self.lam_ * P + 1e-8 * np.eye(self.n_basis))
        self.eig_ = (np.clip(ev, 1e-15, None), V)             # G v = s (G + lam P) v, V'(G + lam P)V = I
        return self

    def coef(self, r) -> np.ndarray:
        r"""Spline coefficients of the smoothed residual :math:`(B^\top B+\lambda P)^{-1}B^\top r`."""
        return self.H_ @ r

    def basis(self, x) -> np.ndarray:
        return bspline_basis(x, self.n_basis, self.lower_, self.upper_)

    def matrix(self) -> np.ndarray:
        r"""The smoother (hat) matrix :math:`\mathcal S` on the design points."""
        return self.B_ @ self.H_


@lru_cache(maxsize=8)
def _shared_smoother(x_bytes: bytes, df: float, n_basis: int) -> PSplineSmoother:
    """The P-spline smoother of a design, built once and shared by every fit on the same ``x`` (a
    replication fits about ten models on one training sample); the smoother is read-only after
    :meth:`PSplineSmoother.fit_design`, so sharing it changes no number."""
    return PSplineSmoother(df, n_basis).fit_design(np.frombuffer(x_bytes, dtype=float))


class L2BoostRegressor(RegressorMixin, BaseEstimator):
    r"""L2Boost by functional gradient descent (Algorithm 1 of the paper).

    ``fit(X, y1, y2=None)``: ``y1`` is the response (complete-data :math:`g(Y)`, or :math:`\hat Y_1`);
    each step fits the base learner to the negative gradient :math:`y_1 - f` and updates
    :math:`f \leftarrow f + \nu\hat h`. ``loss="cut"`` monitors the CUT loss (needs ``y2``, i.e.
    :math:`\hat Y_2`; without it :math:`y_2=y_1^2` and the CUT loss is the L2 loss) - that is
    L2Boost-CUT; ``loss="imp"`` monitors the L2 loss on ``y1`` - L2Boost-IMP. With ``tol`` set, boosting
    stops (as in the official code) at the first step that changes the monitored training loss by
    less than ``tol``; ``n_estimators`` caps the number of steps. ``solver="loop"`` runs the steps one by
    one; ``"closed_form"`` (P-spline learner only) computes the same iterates and losses from one
    eigen-decomposition, which is much faster.

    Parameters: ``n_estimators``, ``learning_rate`` (:math:`\nu`, 0.01 in the paper's code),
    ``base_learner`` (``"pspline"``: 1-D smoothing spline with ``df`` degrees of freedom, or
    ``"tree"``: a regression tree of depth ``max_depth``), ``tol`` (``None``: run all steps).
    """

    def __init__(self, n_estimators: int = 100000, learning_rate: float = 0.01, base_learner: str = "pspline",
                 df: float = 20.0, n_basis: int = 40, max_depth: int = 2, loss: str = "cut",
                 tol: float | None = 1e-5, solver: str = "closed_form", random_state: int | None = 0):
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.base_learner = base_learner
        self.df = df
        self.n_basis = n_basis
        self.max_depth = max_depth
        self.loss = loss
        self.tol = tol
        self.solver = solver
        self.random_state = random_state

    def _check_params(self):
        _positive_int(self.n_estimators, "n_estimators")
        if not 0 < self.learning_rate <= 1:
            raise ValueError(f"learning_rate must be in (0, 1], got {self.learning_rate}")
        if self.base_learner not in ("pspline", "tree"):
            raise ValueError(f"base_learner must be 'pspline' or 'tree', got {self.base_learner!r}")
        if self.loss not in ("cut", "imp"):
            raise ValueError(f"loss must be 'cut' or 'imp', got {self.loss!r}")
        if self.solver not in ("closed_form", "loop"):
            raise ValueError(f"solver must be 'closed_form' or 'loop', got {self.solver!r}")
        if self.tol is not None and not self.tol > 0:
            raise ValueError(f"tol must be > 0 or None, got {self.tol}")

    @staticmethod
    def _check_X(X) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        if X.ndim == 1:
            X = X[:, None]
        if X.ndim != 2 or X.shape[0] == 0:
            raise ValueError(f"X must be a non-empty 1-D or 2-D array, got shape {X.shape}")
        if not np.isfinite(X).all():
            raise ValueError("X contains NaN or infinite values")
        return X

    def _monitor(self, y1, y2, f) -> float:                   # cut_loss / l2_loss without re-validation
        if self.loss == "cut":
            return float(np.mean(0.5 * y2 - y1 * f + 0.5 * f * f))
        return float(np.mean(0.5 * (y1 - f) ** 2))

    def fit(self, X, y, y2=None) -> "L2BoostRegressor":
        self._check_params()
        X = self._check_X(X)
        y1 = _as_1d(y, "y")
        if len(y1) != len(X):
            raise ValueError(f"X and y must have the same length, got {len(X)} and {len(y1)}")
        y2 = y1**2 if y2 is None else _as_1d(y2, "y2")
        if y2.shape != y1.shape:
            raise ValueError("y2 must have the same shape as y")
        if self.base_learner == "pspline":
            if X.shape[1] != 1:
                raise ValueError("base_learner='pspline' needs a single feature; use 'tree' for more")
            PSplineSmoother(self.df, self.n_basis)             # checks df and n_basis before the cache
            self.smoother_ = _shared_smoother(np.ascontiguousarray(X[:, 0]).tobytes(), float(self.df),
                                              int(self.n_basis))
        if self.base_learner == "pspline" and self.solver == "closed_form":
            f, losses = self._boost_closed_form(y1, y2)
        else:
            f, losses = self._boost_loop(X, y1, y2)
        self.loss_path_ = np.array(losses)
        self.n_estimators_ = len(losses) - 1
        self.n_features_in_ = X.shape[1]
        self.fitted_train_ = f
        return self

    def _boost_loop(self, X, y1, y2):
        """Algorithm 1 step by step: fit the base learner to the negative gradient, take a step of size nu."""
        nu = self.learning_rate
        if self.base_learner == "pspline":
            self.coef_ = np.zeros(self.n_basis)
        else:
            self.trees_ = []
        f = np.zeros(len(y1))
        losses = [self._monitor(y1, y2, f)]
        for _ in range(self.n_estimators):
            r = y1 - f                                         # negative gradient (Eqs. 11 and 14)
            if self.base_learner == "pspline":
                c = self.smoother_.coef(r)
                f_new = f + nu * (self.smoother_.B_ @ c)
            else:
                tree = DecisionTreeRegressor(max_depth=self.max_depth, random_state=self.random_state)
                tree.fit(X, r)
                f_new = f + nu * tree.predict(X)
            new_loss = self._monitor(y1, y2, f_new)
            if self.tol is not None and abs(losses[-1] - new_loss) < self.tol:
                break                                          # stop before this step (official code)
            if self.base_learner == "pspline":
                self.coef_ = self.coef_ + nu * c
            else:
                self.trees_.append(tree)
            f = f_new
            losses.append(new_loss)
        return f, losses

    def _boost_closed_form(self, y1, y2, chunk: int = 2000):
        r"""The same iterates for the P-spline learner without the loop (see :func:`l2boost_pspline_path`):
        with :math:`a_{mj} = 1-(1-\nu s_j)^m` and :math:`w = V^\top B^\top y_1`, the fit is
        :math:`f_m = BV\,\mathrm{diag}(a_m/s)\,w` and the monitored loss is
        :math:`\ell_m = \ell_0 - \frac1n\sum_j a_{mj}w_j^2/s_j + \frac1{2n}\sum_j a_{mj}^2 w_j^2/s_j`,
        because :math:`(BV)^\top BV = \mathrm{diag}(s)`. The stopping step is found in chunks of ``chunk``."""
        sm, nu, n = self.smoother_, self.learning_rate, len(y1)
        s, V = sm.eig_
        w = V.T @ (sm.B_.T @ y1)
        base = self._monitor(y1, y2, np.zeros(n))
        stop = self.n_estimators
        losses = [base]
        for first in range(1, self.n_estimators + 1, chunk):
            m = np.arange(first, min(first + chunk, self.n_estimators + 1))
            a = 1.0 - (1.0 - nu * s)[None, :] ** m[:, None].astype(float)
            ell = base - (a @ (w**2 / s)) / n + 0.5 * ((a**2) @ (w**2 / s)) / n
            if self.tol is not None:
                change = np.abs(np.diff(np.concatenate([[losses[-1]], ell])))
                hit = np.nonzero(change < self.tol)[0]
                if hit.size:
                    losses.extend(ell[: hit[0]])
                    stop = first + hit[0] - 1
                    break
            losses.extend(ell)
        a_stop = 1.0 - (1.0 - nu * s) ** float(stop)
        self.coef_ = V @ (a_stop / s * w)
        return sm.B_ @ self.coef_, losses

    def predict(self, X) -> np.ndarray:
        if not hasattr(self, "n_estimators_"):
            raise ValueError("this L2BoostRegressor is not fitted yet; call fit first")
        X = self._check_X(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, expected {self.n_features_in_}")
        if self.base_learner == "pspline":
            return self.smoother_.basis(X[:, 0]) @ self.coef_
        out = np.zeros(len(X))
        for tree in self.trees_:
            out += self.learning_rate * tree.predict(X)
        return out


class L2BoostClassifier(L2BoostRegressor):
    r"""L2Boost for the survival status :math:`g(Y) = 2I(Y>s)-1` (the paper's classification variant):
    fit on the response :math:`\hat Y_1 = 2\Pr(Y>s\mid \mathcal O)-1`; the decision function is the
    boosted fit clipped to :math:`[-1, 1]`, the class is its sign (``+1``: survives past ``s``)."""

    def decision_function(self, X) -> np.ndarray:
        return np.clip(super().predict(X), -1.0, 1.0)

    def predict(self, X) -> np.ndarray:
        return np.where(self.decision_function(X) > 0, 1, -1)


def l2boost_pspline_path(smoother: PSplineSmoother, y, iterations, learning_rate: float = 0.01, x_eval=None):
    r"""Closed-form L2Boost path with a P-spline base learner (for many iterations at once).

    In coefficient space :math:`c_{m+1} = c_m + \nu M B^\top(y - Bc_m)`, :math:`M=(G+\lambda P)^{-1}`,
    :math:`G=B^\top B`. With the generalised eigenpairs :math:`Gv_j = s_j(G+\lambda P)v_j`,
    :math:`V^\top(G+\lambda P)V = I`: :math:`c_m = V\,\mathrm{diag}\{(1-(1-\nu s_j)^m)/s_j\}\,V^\top B^\top y`,
    so on the design points :math:`f_m = (I-(I-\nu\mathcal S)^m)\,y`. Returns ``(len(iterations), n_eval)``.
    """
    y = _as_1d(y, "y")
    its = np.atleast_1d(np.asarray(iterations))
    if (its < 0).any():
        raise ValueError("iterations must be >= 0")
    s, V = smoother.eig_
    proj = V.T @ (smoother.B_.T @ y)
    factor = (1 - (1 - learning_rate * s)[None, :] ** its[:, None].astype(float)) / s[None, :]
    coefs = (factor * proj[None, :]) @ V.T
    B = smoother.B_ if x_eval is None else smoother.basis(x_eval)
    return coefs @ B.T
