r"""The data: the paper's simulation design (the official ``datGen``), monitoring times that turn each
survival time into an interval :math:`(L, R]`, and the input checks the other files share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..common.validation import check_positive_int

__all__ = ["IntervalCensoredData", "mean_function", "simulate_interval_censored", "ERRORS"]


ERRORS = ("lognormal", "loglogistic")


# ------------------------------------------------------------------------------------------------
# validation helpers
# ------------------------------------------------------------------------------------------------
def _as_1d(a, name: str, allow_inf: bool = False) -> np.ndarray:
    arr = np.asarray(a, dtype=float)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError(f"{name} contains NaN")
    if not allow_inf and np.isinf(arr).any():
        raise ValueError(f"{name} contains infinite values")
    return arr


def _intervals(left, right) -> tuple[np.ndarray, np.ndarray]:
    L = _as_1d(left, "left", allow_inf=True)
    R = _as_1d(right, "right", allow_inf=True)
    if L.shape != R.shape:
        raise ValueError(f"left and right must have the same shape, got {L.shape} and {R.shape}")
    if (L < 0).any() or np.isinf(L).any():
        raise ValueError("left must be finite and >= 0")
    if not (L < R).all():
        raise ValueError("every interval must satisfy left < right")
    return L, R


_positive_int = check_positive_int  # shared with the other chapters (companion_lib.common.validation)


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------
def mean_function(x, b=(1.0, 0.8, 0.8)) -> np.ndarray:
    r""":math:`\mu(x) = b_0|x-0.5| + b_1 x^3 + b_2 \sin(\pi x)`, the paper's regression function
    (``datGen`` in the official code): the truth :math:`E[\log Y\mid X=x]` of the simulations."""
    x = _as_1d(x, "x")
    b0, b1, b2 = (float(v) for v in b)
    return b0 * np.abs(x - 0.5) + b1 * x**3 + b2 * np.sin(np.pi * x)


@dataclass
class IntervalCensoredData:
    """Simulated interval-censored sample: covariate ``x``, the hidden ``log_y``, the observed
    interval ``(left, right]`` that contains ``exp(log_y)``, and the truth ``mu = E[log Y | x]``."""

    x: np.ndarray
    log_y: np.ndarray
    left: np.ndarray
    right: np.ndarray
    mu: np.ndarray
    sigma: float
    error: str

    def __len__(self) -> int:
        return len(self.x)

    def subset(self, idx) -> "IntervalCensoredData":
        """The rows ``idx`` (an index array or boolean mask)."""
        return IntervalCensoredData(self.x[idx], self.log_y[idx], self.left[idx], self.right[idx],
                                    self.mu[idx], self.sigma, self.error)

    def split(self, test_fraction: float, rng: np.random.Generator):
        """Random (train, test) split; the official code holds out 20% as test."""
        if not 0 < test_fraction < 1:
            raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
        n_test = int(round(test_fraction * len(self)))
        perm = rng.permutation(len(self))
        return self.subset(np.sort(perm[n_test:])), self.subset(np.sort(perm[:n_test]))

    def censoring_summary(self) -> dict:
        """Fractions of left-censored (L = 0), right-censored (R = inf) and interval-censored rows."""
        left = float(np.mean(self.left == 0))
        right = float(np.mean(np.isinf(self.right)))
        return {"left-censored": left, "right-censored": right, "interval": 1.0 - left - right}


def simulate_interval_censored(n: int, rng: np.random.Generator, n_monitor: int = 3, tau: float = 6.0,
                               b=(1.0, 0.8, 0.8), sigma: float = 0.25,
                               error: str = "lognormal") -> IntervalCensoredData:
    r"""The paper's synthetic design (official ``datGen``).

    :math:`X\sim U(0,1)`, :math:`\log Y = \mu(X) + \varepsilon` with :math:`\varepsilon\sim N(0,\sigma^2)`
    (``"lognormal"``) or Logistic(0, :math:`\sigma`) (``"loglogistic"``); ``n_monitor`` sorted monitoring
    times :math:`U(0,\tau)` per subject; the observed interval is the one between consecutive monitoring
    times (with 0 and :math:`\infty` added) that contains :math:`Y`. ``n_monitor = 1`` is the
    current-status design.
    """
    n = _positive_int(n, "n")
    n_monitor = _positive_int(n_monitor, "n_monitor")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    if error not in ERRORS:
        raise ValueError(f"error must be one of {ERRORS}, got {error!r}")
    x = rng.uniform(0.0, 1.0, n)
    mu = mean_function(x, b)
    eps = rng.normal(0.0, sigma, n) if error == "lognormal" else rng.logistic(0.0, sigma, n)
    log_y = mu + eps
    visits = np.sort(rng.uniform(0.0, tau, (n, n_monitor)), axis=1)
    edges = np.concatenate([np.zeros((n, 1)), visits, np.full((n, 1), np.inf)], axis=1)
    k = (np.exp(log_y)[:, None] > edges).sum(axis=1)          # Y in (edges[k-1], edges[k]]
    rows = np.arange(n)
    return IntervalCensoredData(x, log_y, edges[rows, k - 1], edges[rows, k], mu, float(sigma), error)
