r"""The book's experiment: the SAE sweep, the stitching analysis and the meta-SAEs on every world of a list of
seeds (:func:`run_experiments`), and the per-world numbers the claims read (:func:`summarize`)."""

from __future__ import annotations

import numpy as np
import torch

from .world import _unit, make_world, sample_activations
from .training import train_meta_saes, train_saes
from .evaluation import (alive_latents, atom_hit_fraction, classify_latents, max_cosine, mean_l0, nmse,
                         recovered_fraction)
from .stitching import _mse, insertion_deltas, stitching_path

__all__ = ["run_experiments", "run_experiment", "summarize"]


def _spearman(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def run_experiments(seeds, replicates: int = 1, widths=(16, 32, 64, 128), k: int = 2, steps: int = 3000,
                    n_train: int = 40000, n_test: int = 4000, topk_width: int = 64, stitch=(16, 64),
                    meta_width: int = 20, meta_k: int = 3, meta_steps: int = 3000, n_gt_entities: int = 400) -> list[dict]:
    r"""The chapter's reproduction on ``replicates`` worlds per seed (world $r$ of seed $s$ is drawn from
    ``np.random.default_rng([s, r])``): for every world, BatchTopK SAEs of every width (and one TopK),
    the stitching analysis of ``stitch = (A, B)`` on alive B latents, and meta-SAEs on the widest SAE's
    alive decoder rows ($b_{dec}=0$) and on ``n_gt_entities`` ground-truth entity vectors ($b_{dec}=0$
    and a learned, mean-initialised $b_{dec}$). All worlds' SAEs of one kind and width are trained in one
    batched loop (:func:`train_saes`). Returns one dict of plain numbers and arrays per world (cacheable)."""
    keys = [(int(s), r) for s in seeds for r in range(int(replicates))]
    if not keys:
        raise ValueError("seeds must be non-empty and replicates >= 1")
    train_seeds = [1000 * s + r for s, r in keys]
    outs = []
    for s, r in keys:
        rng = np.random.default_rng([s, r])
        world = make_world(rng)
        X, Xt = sample_activations(world, n_train, rng), sample_activations(world, n_test, rng)
        outs.append({"seed": s, "replicate": r, "world": world, "X": X, "Xt": Xt, "sweep": [], "saes": {}})
    for w in widths:
        saes, _ = train_saes([o["X"] for o in outs], w, k, "batchtopk", steps=steps, seeds=train_seeds)
        for o, m in zip(outs, saes):
            o["saes"][w] = m
    topk_saes, _ = train_saes([o["X"] for o in outs], topk_width, k, "topk", steps=steps, seeds=train_seeds)
    meta_inputs = []
    for o, topk_sae in zip(outs, topk_saes):
        world, Xt = o["world"], o["Xt"]
        for name, m in [*((w, o["saes"][w]) for w in widths), ("topk", topk_sae)]:
            alive = alive_latents(m, Xt)
            rows = m.W_dec.detach().numpy()[alive]
            o["sweep"].append(dict(width=m.width, kind=m.kind, nmse=nmse(m, Xt), l0=mean_l0(m, Xt),
                                   alive=int(alive.sum()), atoms=recovered_fraction(world.atoms, rows),
                                   entities=recovered_fraction(world.entities, rows),
                                   rare=recovered_fraction(world.rare, rows)))
        # stitching: A small, B large, alive B latents only
        A, B = o["saes"][stitch[0]], o["saes"][stitch[1]]
        alive_B = alive_latents(B, Xt)
        delta = insertion_deltas(A, B, Xt)
        st = dict(delta=delta[alive_B], maxcos=max_cosine(B, A)[alive_B],
                  label=classify_latents(B.W_dec.detach().numpy()[alive_B], world),
                  alive_B=alive_B, nmse_A=nmse(A, Xt), nmse_B=nmse(B, Xt))
        B_alive = B.as_dictionary().subset(np.flatnonzero(alive_B))
        Xs = Xt[:2000]
        path, moves = stitching_path(A, B_alive, Xs, greedy=True, stop=True)
        st.update(path_greedy=path, swap_sizes=[len(b) for kind, a, b in moves if kind == "swap"],
                  mse_B=_mse(B_alive, Xs.astype(np.float64)))
        st["path_full"], _ = stitching_path(A, B_alive, Xs, greedy=True, stop=False)
        st["path_naive"], _ = stitching_path(A, B_alive, Xs, greedy=False)
        st["spearman"] = _spearman(st["maxcos"], st["delta"])
        o["stitch"] = st
        big = o["saes"][max(widths)]
        alive = alive_latents(big, Xt)
        meta_inputs.append(big.W_dec.detach().numpy()[alive])
    # meta-SAEs on the alive decoder rows of the widest SAE, one per world, in one batched loop
    metas, _ = train_meta_saes(meta_inputs, meta_width, meta_k, steps=meta_steps, seeds=train_seeds)
    gt_worlds = [make_world(np.random.default_rng([s, r, 1]), n_entities=n_gt_entities) for s, r in keys]
    gt = {fixed: train_meta_saes([g.entities for g in gt_worlds], meta_width, meta_k, steps=meta_steps,
                                 seeds=train_seeds, fix_b_dec_zero=fixed)[0] for fixed in (True, False)}
    for i, (o, meta, rows) in enumerate(zip(outs, metas, meta_inputs)):
        world = o["world"]
        with torch.no_grad():
            rec = meta(torch.as_tensor(rows), batch=False).numpy()
        labels = classify_latents(rows, world)
        ent = labels == "entity"
        sets = world.entity_atoms[np.argmax(_unit(rows[ent]) @ world.entities.T, 1)] if ent.any() else np.zeros((0, 3), int)
        small = o["saes"][min(widths)]
        o["meta"] = dict(fve=float(1 - ((rows - rec) ** 2).sum() / ((rows - rows.mean(0)) ** 2).sum()),
                         atoms=recovered_fraction(world.atoms, meta, 0.8),
                         hit=float(atom_hit_fraction(meta, rows[ent], sets, world.atoms).mean()) if ent.any() else float("nan"),
                         maxcos_small=float(max_cosine(meta, small).mean()), n_rows=int(len(rows)),
                         n_entity_rows=int(ent.sum()), model=meta, rows=rows, labels=labels,
                         gt_atoms_zero=recovered_fraction(gt_worlds[i].atoms, gt[True][i], 0.8),
                         gt_atoms_mean=recovered_fraction(gt_worlds[i].atoms, gt[False][i], 0.8))
        del o["X"], o["Xt"]
    return outs


def run_experiment(seed: int, **kw) -> dict:
    r"""One world of :func:`run_experiments` (seed ``seed``, replicate 0)."""
    return run_experiments([seed], replicates=1, **kw)[0]


def summarize(results: list[dict]) -> "pandas.DataFrame":
    """One row per world (seed, replicate) of :func:`run_experiments` results: the numbers the claims read."""
    import pandas as pd

    rows = []
    for r in results:
        sw = {(s["width"], s["kind"]): s for s in r["sweep"]}
        bt, tk = sw[(64, "batchtopk")], sw[(64, "topk")]
        st, me = r["stitch"], r["meta"]
        frac = lambda c: float((st["delta"][st["label"] == c] < 0).mean()) if (st["label"] == c).any() else float("nan")
        steps = np.diff(st["path_greedy"])
        rows.append(dict(
            seed=r["seed"], replicate=r.get("replicate", 0), nmse_batchtopk=bt["nmse"], nmse_topk=tk["nmse"], l0_batchtopk=bt["l0"], l0_topk=tk["l0"],
            atoms_small=sw[(16, "batchtopk")]["atoms"], atoms_64=bt["atoms"], entities_small=sw[(16, "batchtopk")]["entities"],
            entities_64=bt["entities"], rare_64=bt["rare"],
            both_max=max(min(s["atoms"], s["entities"]) for s in r["sweep"] if s["kind"] == "batchtopk"),
            improve_rare=frac("rare"), improve_entity=frac("entity"), improve_other=frac("other"),
            n_rare=int((st["label"] == "rare").sum()), n_entity=int((st["label"] == "entity").sum()),
            n_other=int((st["label"] == "other").sum()), n_atom=int((st["label"] == "atom").sum()),
            spearman=st["spearman"], monotone_greedy=float(np.mean(steps <= 1e-4)) if len(steps) else 1.0,
            monotone_naive=float(np.mean(np.diff(st["path_naive"]) <= 1e-4)),
            monotone_full=float(np.mean(np.diff(st["path_full"]) <= 1e-4)) if "path_full" in st else float("nan"),
            full_end=float(st["path_full"][-1]) if "path_full" in st else float("nan"),
            path_start=float(st["path_greedy"][0]), path_end=float(st["path_greedy"][-1]), mse_B=st["mse_B"],
            largest_group=max(st["swap_sizes"]) if st["swap_sizes"] else 0, n_moves=len(steps),
            meta_fve=me["fve"], meta_atoms=me["atoms"], meta_hit=me["hit"], meta_maxcos_small=me["maxcos_small"],
            meta_rows=me["n_rows"], meta_entity_rows=me["n_entity_rows"],
            gt_atoms_zero=me["gt_atoms_zero"], gt_atoms_mean=me["gt_atoms_mean"]))
    return pd.DataFrame(rows).set_index(["seed", "replicate"])
