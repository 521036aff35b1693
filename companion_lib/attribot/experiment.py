r"""The chapter's experiment: every method and combination on the same prompts, with cost and CPU time.

Ground truth is exact LOO of the target. Speed-ups are exact LOO's cost (or CPU time) divided by the
method's, summed over the prompts.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from .methods import (Attribution, Scorer, attention_attribution, context_cite, faithfulness,
                      hierarchical_loo, loo, pruned_loo)

__all__ = ["method_specs", "run_methods", "summarize"]


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
