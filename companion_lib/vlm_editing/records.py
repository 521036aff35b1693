r"""Per-world records of the reproduce page's statistics, and how many worlds a run needs to decide a row.

Every claim row of chapter 17 that is declared to hold is decided by the *mean over the run's worlds* of one
or two statistics, each measured on every world (:func:`world_statistics`). Whether a run of :math:`n` worlds
can decide a row depends on how much the statistic varies from world to world against its distance from the
margin: with mean :math:`\mu`, standard deviation :math:`\sigma` over worlds and margin :math:`m`, an
:math:`n`-world mean misses the margin with probability about :math:`\Phi(-|\mu-m|\sqrt n/\sigma)` (a normal
model), and the page's rule asks for :math:`n\ge(2\sigma/|\mu-m|)^2` worlds, so that the mean clears the margin
by two of its standard errors (:func:`row_power`).

The records of every world run so far ship as ``data/world_records.csv``; ``python -m
companion_lib.vlm_editing.records --seeds ... --run LABEL --out FILE`` re-creates rows of it (with the reproduce
page's default sizes, :data:`PAGE_SETTINGS`) on any machine that rounds as the one that made them.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from .experiment import Experiment, cached_experiment

__all__ = ["PAGE_SETTINGS", "STATISTICS", "MEAN_ROWS", "world_statistics", "world_records", "write_records",
           "worlds_needed", "row_power", "main"]

#: The reproduce page's default sizes (its ``parameters`` cell), with which the records were made.
PAGE_SETTINGS = {"n_cal": (600, 300), "n_test": (1200, 600), "n_removal": 300, "q": 0.02}

#: The statistics of one world, in the order of the records' columns.
STATISTICS = ("auroc_max", "auroc_l0", "hal_flag", "real_flag", "loc", "rem1", "kept1", "rem2", "kept2",
              "rem_l0", "self_red", "self_drop", "orc_red", "orc_drop")

#: The rows decided by the mean over the run's worlds: (row, statistic, value of a record, margin, side).
MEAN_ROWS = (
    ("1 confidence separates real from hallucinated", "AUROC (max over layers)", lambda r: r["auroc_max"], 0.65, ">="),
    ("1 confidence separates real from hallucinated", "AUROC (layer 0)", lambda r: r["auroc_l0"], 0.70, ">="),
    ("2 a calibrated threshold detects", "flagged - 2 x false-flag rate",
     lambda r: r["hal_flag"] - 2 * r["real_flag"], 0.0, ">="),
    ("3 localisation (max over layers)", "arg-max accuracy", lambda r: r["loc"], 0.40, ">="),
    ("4 ProjectAway removes a target", "removed (alpha = 2)", lambda r: r["rem2"], 0.5, ">="),
    ("4 ProjectAway removes a target", "other objects kept (alpha = 2)", lambda r: r["kept2"], 0.8, ">="),
    ("5 the edit must come early", "removed(-1) - removed(0)", lambda r: r["rem2"] - r["rem_l0"], 0.4, ">="),
    ("6 self-selected does not hurt", "relative CHAIR_i reduction", lambda r: r["self_red"], 0.0, ">="),
    ("6 self-selected does not hurt", "recall drop (points)", lambda r: r["self_drop"], 5.0, "<="),
    ("8 oracle reduction", "relative CHAIR_i reduction (alpha = 1.5)", lambda r: r["orc_red"], 0.20, ">="),
    ("8 oracle reduction", "recall drop (points)", lambda r: r["orc_drop"], 5.0, "<="),
)


def world_statistics(ex: Experiment) -> dict:
    """The statistic of every claim row on one world (:data:`STATISTICS`), from :func:`run_experiment`'s result:
    AUROCs, detection rates at the calibrated threshold (max over layers), localisation accuracy, targeted
    removal at ``l_I = -1`` (alpha 1 and 2) and at ``l_I = 0`` (alpha 2), and the self-selected (alpha 1) and
    oracle (alpha 1.5) reductions with their recall drops."""
    if not isinstance(ex, Experiment):
        raise TypeError(f"ex must be an Experiment, got {type(ex).__name__}")
    self_sel, oracle = ex.reduction[("self (max)", 1.0)], ex.reduction[("oracle", 1.5)]
    values = {"auroc_max": ex.auroc_max, "auroc_l0": ex.auroc_layer[0],
              "hal_flag": ex.detection["max"]["hal_flagged"], "real_flag": ex.detection["max"]["real_flagged"],
              "loc": ex.loc_accuracy, "rem1": ex.removal[(-1, 1.0)]["removed"], "kept1": ex.removal[(-1, 1.0)]["kept"],
              "rem2": ex.removal[(-1, 2.0)]["removed"], "kept2": ex.removal[(-1, 2.0)]["kept"],
              "rem_l0": ex.removal[(0, 2.0)]["removed"], "self_red": self_sel["rel_chair_i"],
              "self_drop": self_sel["recall_drop"], "orc_red": oracle["rel_chair_i"], "orc_drop": oracle["recall_drop"]}
    return {k: float(values[k]) for k in STATISTICS}


def write_records(rows: list, path: Path | str) -> Path:
    """Write records (dicts with ``seed``, ``run`` and :data:`STATISTICS`) to a CSV, floats in full precision."""
    path = Path(path)
    columns = ["seed", "run", *STATISTICS]
    for row in rows:
        missing = [c for c in columns if c not in row]
        if missing:
            raise ValueError(f"record of seed {row.get('seed')!r} lacks {missing}")
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        for row in rows:
            w.writerow([int(row["seed"]), row["run"], *(repr(float(row[k])) for k in STATISTICS)])
    return path


def world_records(path: Path | str | None = None) -> pd.DataFrame:
    """The shipped records (``data/world_records.csv``) or those at ``path``, indexed by seed."""
    if path is None:
        with resources.files("companion_lib.vlm_editing").joinpath("data", "world_records.csv").open("r") as f:
            df = pd.read_csv(f)
    else:
        df = pd.read_csv(path)
    if df["seed"].duplicated().any():
        raise ValueError(f"seeds recorded twice: {sorted(df.loc[df['seed'].duplicated(), 'seed'])}")
    return df.set_index("seed")


def worlds_needed(mean: float, sd: float, margin: float) -> float:
    r"""Worlds a run needs for its mean to clear ``margin`` by two standard errors, :math:`(2\sigma/|\mu-m|)^2`
    rounded up; ``inf`` when the mean sits on the margin (or on its wrong side: no run decides it in favour)."""
    gap = abs(mean - margin)
    if sd < 0 or not math.isfinite(sd):
        raise ValueError(f"sd must be finite and >= 0, got {sd}")
    if gap == 0:
        return math.inf
    return float(max(1, math.ceil((2 * sd / gap) ** 2 * (1 - 1e-12))))   # (rounding of mean - margin aside)


def row_power(records: pd.DataFrame, n_worlds: tuple = (3, 5)) -> pd.DataFrame:
    """For every statistic of :data:`MEAN_ROWS`: its mean and standard deviation over the recorded worlds,
    whether the mean is on the claim's side of the margin, the chance that a run of each size in ``n_worlds``
    misses the margin (normal model) and the worlds the page's two-standard-error rule needs."""
    if len(records) < 2:
        raise ValueError(f"need at least two recorded worlds, got {len(records)}")
    out = []
    for row, stat, value, margin, side in MEAN_ROWS:
        v = np.array([value(r) for _, r in records.iterrows()], dtype=float)
        mean, sd = float(v.mean()), float(v.std(ddof=1))
        sign = 1.0 if side == ">=" else -1.0
        entry = {"row": row, "statistic": stat, "margin": f"{side} {margin:g}", "mean": mean, "sd": sd,
                 "on the claim's side": bool(sign * (mean - margin) > 0)}
        for n in n_worlds:
            miss = stats.norm.cdf(-sign * (mean - margin) * math.sqrt(n) / sd) if sd > 0 else sign * (mean - margin) < 0
            entry[f"chance a {n}-world run misses"] = float(miss)
        entry["worlds needed"] = worlds_needed(mean, sd, margin) if entry["on the claim's side"] else math.inf
        out.append(entry)
    return pd.DataFrame(out)


def main(argv: list | None = None) -> int:
    """Compute the records of some seeds with the page's default sizes and write them as a CSV."""
    parser = argparse.ArgumentParser(prog="python -m companion_lib.vlm_editing.records", description=main.__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--run", required=True, help="a label for the run the seeds belong to")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    rows = [{"seed": s, "run": args.run, **world_statistics(cached_experiment(s, **PAGE_SETTINGS))} for s in args.seeds]
    print(f"wrote {write_records(rows, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
