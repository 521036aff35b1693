r"""The chapter's experiment: every method and combination on the same prompts, with cost and CPU time.

Ground truth is exact LOO of the target. Speed-ups are exact LOO's cost (or CPU time) divided by the
method's, summed over the prompts.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from scipy import stats

from ..common.replicates import mean_interval
from .methods import (Attribution, Scorer, attention_attribution, average_precision, context_cite, faithfulness,
                      hierarchical_loo, loo, pruned_loo)

__all__ = ["method_specs", "run_methods", "summarize", "per_prompt_ap", "paired_interval", "map_difference",
           "per_seed_table"]


def method_specs(target: Scorer, mid: Scorer, small: Scorer, keep_groups: int = 2, keep_sources: int = 4,
                 n_ablations: int = 16, seed: int = 0) -> dict:
    """Name -> (scorers it uses, callable(prompt) -> Attribution) for every method of the Pareto plot."""
    rng = np.random.default_rng([seed, 12])
    return {
        "exact LOO": ([target], lambda p: loo(target, p)),
        "LOO + KV": ([target], lambda p: loo(target, p, kv_cache=True)),
        "hierarchical": ([target], lambda p: hierarchical_loo(target, p, keep_groups)),
        "hierarchical + KV": ([target], lambda p: hierarchical_loo(target, p, keep_groups, kv_cache=True)),
        "proxy-mid": ([mid], lambda p: loo(mid, p)),
        "proxy-mid + KV": ([mid], lambda p: loo(mid, p, kv_cache=True)),
        "proxy-small + KV": ([small], lambda p: loo(small, p, kv_cache=True)),
        "proxy-mid + hier + KV": ([mid], lambda p: hierarchical_loo(mid, p, keep_groups, kv_cache=True)),
        "proxy-small + hier + KV": ([small], lambda p: hierarchical_loo(small, p, keep_groups, kv_cache=True)),
        "prune(mid) + target, KV": ([mid, target], lambda p: pruned_loo(mid, target, p, keep_sources, kv_cache=True)),
        "ContextCite": ([target], lambda p: context_cite(target, p, n_ablations, rng)),
        "attention": ([target], lambda p: attention_attribution(target, p)),
    }


def run_methods(specs: dict, prompts: list) -> dict:
    """Run every method on every prompt: scores, cost (tokens x parameters) and CPU seconds per method."""
    out = {}
    for name, (scorers, fn) in specs.items():
        atts, cost, cpu = [], 0.0, 0.0
        for p in prompts:
            for s in scorers:
                s.reset()
            t0 = time.process_time()
            atts.append(fn(p))
            cpu += time.process_time() - t0
            cost += sum(s.cost for s in scorers)
        out[name] = {"attributions": atts, "cost": cost, "cpu": cpu}
    return out


def summarize(results: dict, truth: str = "exact LOO", threshold: float = 1.0, k: int = 4) -> pd.DataFrame:
    """One row per method: mAP, recall@k, Pearson, Spearman, cost and CPU speed-ups against ``truth``."""
    truths = [a.scores for a in results[truth]["attributions"]]
    rows = []
    for name, r in results.items():
        f = faithfulness(r["attributions"], truths, threshold, k)
        rows.append({"method": name, "mAP": f["mAP"], f"recall@{k}": f[f"recall@{k}"], "pearson": f["pearson"],
                     "spearman": f["spearman"], "cost speed-up": results[truth]["cost"] / r["cost"],
                     "CPU speed-up": results[truth]["cpu"] / r["cpu"], "CPU s": r["cpu"]})
    return pd.DataFrame(rows).set_index("method")


def per_prompt_ap(results: dict, method: str, truth: str = "exact LOO", threshold: float = 1.0) -> np.ndarray:
    """Average precision of ``method`` on each prompt (``nan`` where no source has truth LOO > ``threshold``)."""
    if method not in results or truth not in results:
        raise KeyError(f"method {method!r} or truth {truth!r} is not among the results")
    out = []
    for att, t in zip(results[method]["attributions"], results[truth]["attributions"]):
        rel = t.scores > threshold
        out.append(average_precision(att.rank_scores, rel) if rel.any() else np.nan)
    return np.array(out)


def paired_interval(diff, level: float = 0.95) -> dict:
    r"""Mean of paired differences and its two-sided Student-t interval at ``level`` (``nan`` entries dropped):
    :func:`~companion_lib.common.replicates.mean_interval` of the other entries, with their standard error and
    number.

    :math:`\bar d \pm t_{n-1,(1+\text{level})/2}\, s_d/\sqrt n`: the lower end is what a check stricter
    than "the mean clears the margin" compares with the margin.
    """
    d = np.asarray(diff, float)
    d = d[~np.isnan(d)]
    lo, hi = mean_interval(d, level)
    return {"mean": float(d.mean()), "lo": lo, "hi": hi, "se": float(d.std(ddof=1) / np.sqrt(d.size)),
            "n": int(d.size)}


def map_difference(results: dict, method: str, baseline: str, truth: str = "exact LOO", threshold: float = 1.0,
                   level: float = 0.95) -> dict:
    """Paired interval of AP(``method``) - AP(``baseline``) over the prompts (see :func:`paired_interval`)."""
    return paired_interval(per_prompt_ap(results, method, truth, threshold)
                           - per_prompt_ap(results, baseline, truth, threshold), level)


def per_seed_table(results: dict, blocks: dict, method: str, baselines: list, proxy: str,
                   truth: str = "exact LOO", threshold: float = 1.0) -> pd.DataFrame:
    """One row per block of prompts (``{seed: indices}``): the proxy's Pearson r with the truth and the mAP
    lead of ``method`` over each baseline, to show how much the run's statistics move between seeds."""
    truths = [a.scores for a in results[truth]["attributions"]]
    ap = {n: per_prompt_ap(results, n, truth, threshold) for n in [method, *baselines]}
    rows = {}
    for seed, idx in blocks.items():
        idx = list(idx)
        x = np.concatenate([results[proxy]["attributions"][i].filled for i in idx])
        row = {f"r({proxy})": float(stats.pearsonr(x, np.concatenate([truths[i] for i in idx]))[0])}
        for b in baselines:
            row[f"mAP lead over {b}"] = float(np.nanmean(ap[method][idx] - ap[b][idx]))
        rows[seed] = row
    return pd.DataFrame(rows).T.rename_axis("prompt seed")
