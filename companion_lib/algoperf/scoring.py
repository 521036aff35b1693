r"""AlgoPerf scoring: time-to-target, performance ratios, performance profiles, benchmark score.

Implements the competition-era (v0.5) scoring rules of the AlgoPerf benchmark, analysed in
Kasimbeg et al., *Accelerating neural network training: An analysis of the AlgoPerf competition*
(ICLR 2025).  Symbols:

* :math:`t_{s,w}` -- time for submission :math:`s` to reach the validation target of workload
  :math:`w`: per study the fastest of its trials, then the median over studies; :math:`\infty` if
  the target was never reached, NaN if there is no valid run.
* Performance ratio (Dolan and More, 2002):
  :math:`r_{s,w} = t_{s,w} / \min_{s'} t_{s',w}`.
* Performance profile: :math:`\rho_s(\tau) = \frac1n \#\{w : r_{s,w} \le \tau\}` over the
  :math:`n` fixed (base) workloads.
* Benchmark score: :math:`B_s = \frac{1}{r_{\max}-1}\int_1^{r_{\max}} \rho_s(\tau)\,d\tau`, with
  :math:`r_{\max}=4`, integrated with the trapezoid rule on 100 equally spaced :math:`\tau`.
* Held-out workload rules: a variant only counts for submissions that trained its base workload;
  every time more than :math:`r_{\max}` times the fastest one is set to :math:`\infty`; a base
  workload whose held-out variant was missed (or crashed) is set to :math:`\infty`.
* Speed-up: geometric mean over base workloads of :math:`t_{s,w}/t_{\text{baseline},w}`, with
  :math:`\infty` replaced by the workload's runtime budget plus one second.

The rules follow the public scoring code of ``mlcommons/algorithmic-efficiency`` (Apache-2.0) at
the competition commit; this module is an independent re-implementation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import resources

import numpy as np
import pandas as pd

__all__ = [
    "BASE_WORKLOADS", "HELD_OUT_WORKLOADS", "MAX_RUNTIME_SECONDS", "PUBLISHED_SCORES",
    "RULESETS", "apply_held_out_rules", "benchmark_score", "load_time_to_targets",
    "performance_profile", "performance_ratios", "profile_taus", "speedup_vs_baseline",
    "study_time_to_target", "time_to_target",
]

#: The two tuning rulesets of the competition.
RULESETS = ("external", "self")

#: The eight fixed (base) workloads of AlgoPerf v0.5.
BASE_WORKLOADS = (
    "criteo1tb", "fastmri", "imagenet_resnet", "imagenet_vit",
    "librispeech_conformer", "librispeech_deepspeech", "ogbg", "wmt",
)

#: The six held-out variants sampled after the submission deadline, mapped to their base workload.
HELD_OUT_WORKLOADS = {
    "criteo1tb_embed_init": "criteo1tb",
    "fastmri_tanh": "fastmri",
    "imagenet_resnet_large_bn_init": "imagenet_resnet",
    "librispeech_conformer_layernorm": "librispeech_conformer",
    "ogbg_model_size": "ogbg",
    "wmt_glu_tanh": "wmt",
}

#: Runtime budgets (seconds on 8xV100) of the external-tuning ruleset; self-tuning had 3x.
MAX_RUNTIME_SECONDS = {
    "criteo1tb": 7703, "fastmri": 8859, "imagenet_resnet": 63_008, "imagenet_vit": 77_520,
    "librispeech_conformer": 61_068, "librispeech_deepspeech": 55_506, "ogbg": 18_477, "wmt": 48_151,
}

#: The published v0.5 leaderboard (the paper's Figure 1 and the official results README).
#: These are the *paper's* numbers, used only as the reference the book's scores are compared to.
PUBLISHED_SCORES = {
    "external": {
        "shampoo_submission": 0.7784, "schedule_free_adamw": 0.7077, "generalized_adam": 0.6383,
        "cyclic_lr": 0.6301, "nadamp": 0.5909, "baseline": 0.5707, "amos": 0.4918,
        "caspr_adaptive": 0.4722, "lawa_queue": 0.3699, "lawa_ema": 0.3384,
        "schedule_free_prodigy": 0.0000,
    },
    "self": {
        "schedule_free_adamw": 0.8542, "baseline": 0.8194, "nadamw_sequential": 0.3308,
        "sinv6_75": 0.1420, "sinv6": 0.0903, "adamg": 0.0000,
    },
}


def _check_ruleset(ruleset: str) -> str:
    if ruleset not in RULESETS:
        raise ValueError(f"ruleset must be one of {RULESETS}, got {ruleset!r}")
    return ruleset


def load_time_to_targets(ruleset: str = "external") -> pd.DataFrame:
    """The competition's median time-to-target table (seconds), one row per submission.

    Columns are the 8 base workloads and the 6 held-out variants; ``inf`` means the target was
    never reached within the budget, NaN that no valid run exists. Derived from the v0.5 logs in
    ``mlcommons/submissions_algorithms`` (Apache-2.0), before any held-out or 4x rule is applied.
    """
    _check_ruleset(ruleset)
    name = f"algoperf_v05_time_to_targets_{ruleset}.csv"
    with resources.files("companion_lib.algoperf").joinpath("data", name).open("r") as f:
        df = pd.read_csv(f, index_col="submission")
    return df.astype(float)


def _check_times(times: pd.DataFrame, name: str = "times") -> pd.DataFrame:
    if not isinstance(times, pd.DataFrame):
        raise TypeError(f"{name} must be a pandas DataFrame (submissions x workloads), "
                        f"got {type(times).__name__}")
    if times.shape[0] == 0 or times.shape[1] == 0:
        raise ValueError(f"{name} must have at least one submission and one workload")
    values = times.to_numpy(dtype=float)
    if np.any(values[~np.isnan(values)] < 0):
        raise ValueError(f"{name} must be non-negative (or inf/NaN)")
    return times.astype(float)


def apply_held_out_rules(times: pd.DataFrame, held_out: Mapping[str, str] | None = None,
                         base_workloads: Sequence[str] | None = None,
                         tau_max: float | None = 4.0) -> pd.DataFrame:
    """Apply the competition's held-out and cut-off rules; return the base-workload times.

    Steps, in the order of the official scoring code:

    1. a variant's time becomes inf where the base workload's time is inf or NaN;
    2. every time larger than ``tau_max`` times its column's minimum becomes inf
       (skipped when ``tau_max`` is None);
    3. a base workload's time becomes inf where its variant's time is inf or NaN;
    4. keep the base columns only.

    Parameters
    ----------
    times: submissions x workloads time-to-target table.
    held_out: variant -> base workload map; ``None`` or ``{}`` skips steps 1 and 3.
    base_workloads: the scored columns; default: every column that is not a variant.
    tau_max: the cut-off :math:`r_{\\max}`, or None for no cut.
    """
    df = _check_times(times).copy()
    held_out = dict(held_out or {})
    if base_workloads is None:
        base_workloads = [c for c in df.columns if c not in held_out]
    base_workloads = list(base_workloads)
    missing = [w for w in base_workloads + list(held_out) + list(held_out.values()) if w not in df.columns]
    if missing:
        raise ValueError(f"times is missing workload columns {missing}")
    if tau_max is not None and not tau_max > 1:
        raise ValueError(f"tau_max must be > 1 or None, got {tau_max}")
    df = df[sorted(set(base_workloads) | set(held_out))]
    for variant, base in held_out.items():
        bad = ~np.isfinite(df[base].to_numpy())
        df.loc[bad, variant] = np.inf
    if tau_max is not None:
        best = df.min(axis=0)  # NaN-skipping, like pandas in the official code
        df = df.mask(df.gt(tau_max * best, axis=1), np.inf)
    for variant, base in held_out.items():
        bad = ~np.isfinite(df[variant].to_numpy())
        df.loc[bad, base] = np.inf
    return df[base_workloads]


def performance_ratios(times: pd.DataFrame) -> pd.DataFrame:
    """Performance ratios :math:`r_{s,w} = t_{s,w}/\\min_{s'} t_{s',w}` (Dolan-More).

    inf stays inf; NaN stays NaN; a column where nobody reached the target becomes NaN (inf/inf),
    which never counts as solved.
    """
    df = _check_times(times)
    best = df.min(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return df.div(best, axis=1)


def profile_taus(tau_max: float = 4.0, num_points: int = 100) -> np.ndarray:
    """The grid of :math:`\\tau` values on which profiles are evaluated: linspace(1, tau_max)."""
    if not tau_max > 1:
        raise ValueError(f"tau_max must be > 1, got {tau_max}")
    if isinstance(num_points, bool) or not isinstance(num_points, (int, np.integer)) or num_points < 2:
        raise ValueError(f"num_points must be an int >= 2, got {num_points!r}")
    return np.linspace(1.0, float(tau_max), int(num_points))


def performance_profile(ratios: pd.DataFrame, taus: Sequence[float] | np.ndarray,
                        num_workloads: int | None = None) -> pd.DataFrame:
    """Performance profile :math:`\\rho_s(\\tau) = \\frac1n\\#\\{w: r_{s,w}\\le\\tau\\}`.

    Returns a submissions x taus DataFrame (columns are the tau values). ``num_workloads`` is
    :math:`n` (default: the number of columns of ``ratios``).
    """
    if not isinstance(ratios, pd.DataFrame):
        raise TypeError(f"ratios must be a pandas DataFrame, got {type(ratios).__name__}")
    taus = np.asarray(taus, dtype=float)
    if taus.ndim != 1 or taus.size == 0:
        raise ValueError("taus must be a non-empty 1-D sequence")
    n = ratios.shape[1] if num_workloads is None else num_workloads
    if n < 1:
        raise ValueError(f"num_workloads must be >= 1, got {n}")
    r = ratios.to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        solved = r[:, :, None] <= taus[None, None, :]  # NaN compares False
    rho = solved.sum(axis=1) / n
    return pd.DataFrame(rho, index=ratios.index, columns=taus)


def benchmark_score(times: pd.DataFrame, held_out: Mapping[str, str] | None = None,
                    base_workloads: Sequence[str] | None = None, tau_max: float = 4.0,
                    num_points: int = 100, cut: bool = True) -> pd.Series:
    """Benchmark score :math:`B_s`: normalised area under the performance profile up to tau_max.

    ``times`` is the raw time-to-target table; the held-out rules and the cut at ``tau_max`` are
    applied first (:func:`apply_held_out_rules`; ``cut=False`` skips the explicit cut, which then
    only acts through the integration range). Scores lie in [0, 1]; 1 means fastest everywhere.
    """
    taus = profile_taus(tau_max, num_points)
    base_times = apply_held_out_rules(times, held_out, base_workloads, tau_max if cut else None)
    rho = performance_profile(performance_ratios(base_times), taus)
    area = np.trapezoid(rho.to_numpy(), x=taus, axis=1)
    return pd.Series(area / (taus[-1] - taus[0]), index=rho.index, name="score")


def speedup_vs_baseline(times: pd.DataFrame, submission: str, baseline: str = "baseline",
                        budgets: Mapping[str, float] | None = None,
                        budget_factor: float = 1.0) -> tuple[float, pd.Series]:
    """Geometric-mean runtime ratio of ``submission`` to ``baseline`` over the budgeted workloads.

    inf (target missed) is replaced by ``budget_factor * budget + 1`` seconds before the ratio, as
    in the competition's speed-up script (``budget_factor=3`` for self-tuning). Returns the
    geometric mean (``1 - gmean`` is "x % faster") and the per-workload ratios.
    """
    df = _check_times(times)
    budgets = dict(MAX_RUNTIME_SECONDS if budgets is None else budgets)
    for name in (submission, baseline):
        if name not in df.index:
            raise ValueError(f"unknown submission {name!r}; known: {list(df.index)}")
    if not budget_factor > 0:
        raise ValueError(f"budget_factor must be > 0, got {budget_factor}")
    missing = [w for w in budgets if w not in df.columns]
    if missing:
        raise ValueError(f"times is missing budgeted workloads {missing}")
    cols = list(budgets)
    cap = pd.Series({w: budget_factor * budgets[w] + 1 for w in cols})
    sub = df.loc[submission, cols].where(np.isfinite(df.loc[submission, cols]), cap)
    base = df.loc[baseline, cols].where(np.isfinite(df.loc[baseline, cols]), cap)
    ratios = (sub / base).rename("ratio")
    if ratios.isna().any():
        raise ValueError("speed-up undefined: a NaN time in the budgeted workloads")
    return float(np.exp(np.mean(np.log(ratios.to_numpy(dtype=float))))), ratios


def time_to_target(times: Sequence[float] | np.ndarray, metrics: Sequence[float] | np.ndarray,
                   target: float, minimize: bool = True) -> float:
    """Time of the first evaluation whose metric reaches ``target`` (<= if ``minimize``), else inf."""
    t = np.asarray(times, dtype=float)
    m = np.asarray(metrics, dtype=float)
    if t.ndim != 1 or t.shape != m.shape:
        raise ValueError(f"times and metrics must be 1-D of equal length, got {t.shape} and {m.shape}")
    if not np.isfinite(target):
        raise ValueError(f"target must be finite, got {target}")
    with np.errstate(invalid="ignore"):
        hit = m <= target if minimize else m >= target
    idx = np.flatnonzero(hit)
    return float(t[idx[0]]) if idx.size else float("inf")


def study_time_to_target(study_times: Sequence[float] | np.ndarray) -> float:
    """:math:`t_{s,w}`: the median over studies of each study's best-trial time.

    ``study_times`` is a studies x trials array (a 1-D array = one trial per study, the
    self-tuning case) of per-trial times to target.
    """
    a = np.asarray(study_times, dtype=float)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.size == 0:
        raise ValueError(f"study_times must be a non-empty studies x trials array, got shape {a.shape}")
    if np.any(a < 0):
        raise ValueError("study_times must be non-negative")
    return float(np.median(np.min(a, axis=1)))
