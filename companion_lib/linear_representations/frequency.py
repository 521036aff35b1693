r"""Pretraining frequency: exact co-occurrence counts over the batches a model saw, thresholds, regression.

* :func:`cooccurrence_counts` -- Merullo et al.'s *Batch Search* in miniature: a subject and an object
  co-occur once for every training sequence that holds both (Sec. 3.2), counted cumulatively up to each
  checkpoint, together with each term's own count of sequences.
* :func:`causality_threshold` -- the smallest co-occurrence count :math:`c` such that the mean causality
  of all points with count :math:`\ge c` exceeds a level (0.9 in Fig. 2).
* :func:`loro_predictions`, :func:`regression_scores` -- the frequency regression of Sec. 5: a random
  forest predicts log frequency from LM/LRE features, one relation held out at a time.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["cooccurrence_counts", "causality_threshold", "thresholds_by_checkpoint", "loro_predictions", "mean_baseline_predictions",
           "regression_scores"]


def cooccurrence_counts(stream: torch.Tensor | np.ndarray, subjects, objects, vocab_size: int,
                        checkpoints) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative counts, up to each checkpoint, of sequences that hold both ``subjects[p]`` and ``objects[p]``.

    Parameters
    ----------
    stream:
        (steps, batch, length) token ids; batch ``t`` is the one the model trained on at step ``t``.
    subjects, objects:
        (P,) token ids of the pairs to count.
    checkpoints:
        Steps ``k``: counts cover the batches ``0 .. k-1`` (the ones seen before checkpoint ``k``).

    Returns
    -------
    (pairs, terms): arrays of shape (n_checkpoints, P) and (n_checkpoints, vocab_size), the latter the
    number of sequences that hold each token.
    """
    stream = np.asarray(stream)
    if stream.ndim != 3:
        raise ValueError(f"stream must have shape (steps, batch, length), got {stream.shape}")
    subjects, objects = np.asarray(subjects), np.asarray(objects)
    if subjects.shape != objects.shape or subjects.ndim != 1 or subjects.size == 0:
        raise ValueError("subjects and objects must be non-empty 1-d arrays of equal length")
    if stream.min() < 0 or stream.max() >= vocab_size or max(subjects.max(), objects.max()) >= vocab_size:
        raise ValueError(f"token ids must lie in [0, vocab_size={vocab_size})")
    checkpoints = np.asarray(list(checkpoints), dtype=int)
    steps, batch, _ = stream.shape
    if checkpoints.size == 0 or checkpoints.min() < 0 or checkpoints.max() > steps:
        raise ValueError(f"checkpoints must be steps in [0, {steps}]")
    present = np.zeros((steps * batch, vocab_size), dtype=bool)
    np.put_along_axis(present, stream.reshape(steps * batch, -1), True, axis=1)
    present = present.reshape(steps, batch, vocab_size)
    pair_per_step = (present[:, :, subjects] & present[:, :, objects]).sum(1)      # (steps, P)
    term_per_step = present.sum(1)                                                 # (steps, V)
    zero = lambda a: np.concatenate([np.zeros((1, a.shape[1]), dtype=np.int64), np.cumsum(a, 0)])
    return zero(pair_per_step)[checkpoints], zero(term_per_step)[checkpoints]


def causality_threshold(counts, causality, level: float = 0.9) -> float:
    """Smallest observed count ``c`` with ``mean(causality[counts >= c]) > level``; NaN if there is none."""
    counts, causality = np.asarray(counts, float).ravel(), np.asarray(causality, float).ravel()
    if counts.shape != causality.shape or counts.size == 0:
        raise ValueError("counts and causality must be non-empty and of the same size")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    order = np.argsort(counts, kind="stable")
    c, y = counts[order], causality[order]
    suffix_mean = np.cumsum(y[::-1])[::-1] / np.arange(len(y), 0, -1)
    for i in range(len(c)):
        if (i == 0 or c[i] != c[i - 1]) and suffix_mean[i] > level:
            return float(c[i])
    return float("nan")


def loro_predictions(features: np.ndarray, y: np.ndarray, groups: np.ndarray, n_estimators: int = 50,
                     min_samples_leaf: int = 3, seed: int = 0) -> np.ndarray:
    """Leave-one-group-out predictions of a random forest (each relation held out once)."""
    from sklearn.ensemble import RandomForestRegressor

    features, y, groups = np.asarray(features, float), np.asarray(y, float), np.asarray(groups)
    if features.ndim == 1:
        features = features[:, None]
    if not (len(features) == len(y) == len(groups)) or len(y) == 0:
        raise ValueError("features, y and groups must have the same non-zero length")
    if len(np.unique(groups)) < 2:
        raise ValueError("need at least two groups to hold one out")
    pred = np.empty_like(y)
    for g in np.unique(groups):
        test = groups == g
        forest = RandomForestRegressor(n_estimators=n_estimators, min_samples_leaf=min_samples_leaf,
                                       random_state=seed, n_jobs=1)
        forest.fit(features[~test], y[~test])
        pred[test] = forest.predict(features[test])
    return pred


def mean_baseline_predictions(y: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Predict, for each held-out group, the mean target of the other groups."""
    y, groups = np.asarray(y, float), np.asarray(groups)
    pred = np.empty_like(y)
    for g in np.unique(groups):
        pred[groups == g] = y[groups != g].mean()
    return pred


def regression_scores(y_log: np.ndarray, pred_log: np.ndarray) -> dict[str, float]:
    """MAE in natural-log space and the share of predictions within a factor 2 and 10 of the truth."""
    err = np.abs(np.asarray(pred_log, float) - np.asarray(y_log, float))
    return {"mae_ln": float(err.mean()), "within_2x": float((err <= np.log(2)).mean()),
            "within_10x": float((err <= np.log(10)).mean())}


def thresholds_by_checkpoint(steps, counts, causality, level: float = 0.9):
    """The threshold of :func:`causality_threshold` computed separately at each checkpoint.

    Returns a DataFrame with one row per step: ``threshold``, the smallest count at that step, and
    ``identified``: True when some point lies below the threshold (when every point is above the level,
    the "threshold" is only the smallest count seen and says nothing about where learning starts).
    """
    import pandas as pd

    steps, counts, causality = (np.asarray(a).ravel() for a in (steps, counts, causality))
    if not (steps.shape == counts.shape == causality.shape):
        raise ValueError("steps, counts and causality must have the same size")
    rows = []
    for step in np.unique(steps):
        at = steps == step
        thr = causality_threshold(counts[at], causality[at], level)
        low = float(counts[at].min())
        rows.append({"step": int(step), "threshold": thr, "smallest count": low,
                     "identified": bool(np.isfinite(thr) and thr > low)})
    return pd.DataFrame(rows)
