r"""The book's experiment: the SAE sweep, the stitching analysis and the meta-SAEs on every world of a list of
seeds (:func:`run_experiments`), and the per-world numbers the claims read (:func:`summarize`)."""

from __future__ import annotations

import numpy as np
import torch

from ..common.device import resolve_device
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
                    meta_width: int = 20, meta_k: int = 3, meta_steps: int = 3000, n_gt_entities: int = 400,
                    device=None) -> list[dict]:
    r"""The chapter's reproduction on ``replicates`` worlds per seed (world $r$ of seed $s$ is drawn from
    ``np.random.default_rng([s, r])``): for every world, BatchTopK SAEs of every width (and one TopK of
    width ``topk_width``), the stitching analysis of ``stitch = (A, B)`` on alive B latents, and
    meta-SAEs: on the widest SAE's alive decoder rows ($b_{dec}=0$), on as many random unit vectors (the
    null), and on ``n_gt_entities`` ground-truth entity vectors ($b_{dec}$ fixed at zero, learned from the
    mean, learned from zero as in the official code). All worlds' SAEs of one kind and width are
    trained in one batched loop (:func:`train_saes`), and all meta-SAEs in one. Returns one dict of
    plain numbers and arrays per world (cacheable); ``"config"`` records the widths it used.
    ``device`` (default :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the
    batched SAE and meta-SAE training runs; the worlds and batch rows are drawn on the CPU as always, the
    trained models come back on the CPU, and the evaluation and stitching stay there, so a CPU run gives
    the same numbers whatever the device argument."""
    keys = [(int(s), r) for s in seeds for r in range(int(replicates))]
    if not keys:
        raise ValueError("seeds must be non-empty and replicates >= 1")
    widths = tuple(int(w) for w in widths)
    if stitch[0] not in widths or stitch[1] not in widths:
        raise ValueError(f"stitch {tuple(stitch)} must name two of the widths {widths}")
    config = dict(widths=widths, k=int(k), topk_width=int(topk_width), stitch=tuple(int(w) for w in stitch),
                  meta_width=int(meta_width))
    train_seeds = [1000 * s + r for s, r in keys]
    dev = resolve_device(device)
    outs = []
    for s, r in keys:
        rng = np.random.default_rng([s, r])
        world = make_world(rng)
        X, Xt = sample_activations(world, n_train, rng), sample_activations(world, n_test, rng)
        outs.append({"seed": s, "replicate": r, "config": config, "world": world, "X": X, "Xt": Xt, "sweep": [],
                     "saes": {}})
    for w in widths:
        saes, _ = train_saes([o["X"] for o in outs], w, k, "batchtopk", steps=steps, seeds=train_seeds, device=dev)
        for o, m in zip(outs, saes):
            o["saes"][w] = m
    topk_saes, _ = train_saes([o["X"] for o in outs], topk_width, k, "topk", steps=steps, seeds=train_seeds,
                             device=dev)
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
        # the greedy path to the end (every move made); the path that stops when no move lowers the MSE
        # makes the same choices, so it is this path's prefix up to its first step that does not decrease
        full, moves = stitching_path(A, B_alive, Xs, greedy=True, stop=False)
        up = np.flatnonzero(np.diff(full) >= 0)
        n_stop = int(up[0]) if len(up) else len(moves)
        st.update(path_full=full, path_greedy=full[:n_stop + 1],
                  swap_sizes=[len(b) for kind, a, b in moves[:n_stop] if kind == "swap"],
                  swap_sizes_full=[len(b) for kind, a, b in moves if kind == "swap"],
                  mse_B=_mse(B_alive, Xs.astype(np.float64)))
        st["path_naive"], _ = stitching_path(A, B_alive, Xs, greedy=False)
        st["spearman"] = _spearman(st["maxcos"], st["delta"])
        o["stitch"] = st
        big = o["saes"][max(widths)]
        alive = alive_latents(big, Xt)
        meta_inputs.append(big.W_dec.detach().numpy()[alive])
    # meta-SAEs, all in one batched loop: the widest SAE's alive decoder rows; as many random unit vectors
    # (the null: directions with no shared structure); ground-truth entities with three b_dec settings
    R = len(keys)
    nulls = [_unit(np.random.default_rng([s, r, 2]).standard_normal(rows.shape)).astype(np.float32)
             for (s, r), rows in zip(keys, meta_inputs)]
    gt_worlds = [make_world(np.random.default_rng([s, r, 1]), n_entities=n_gt_entities) for s, r in keys]
    gt_rows = [g.entities for g in gt_worlds]
    # (two loops: the decoder rows and their null have the same row counts, the ground truth has more)
    metas, _ = train_meta_saes(meta_inputs + nulls, meta_width, meta_k, steps=meta_steps, seeds=train_seeds * 2,
                               device=dev)
    metas, null_metas = metas[:R], metas[R:]
    gts, _ = train_meta_saes(gt_rows * 3, meta_width, meta_k, steps=meta_steps, seeds=train_seeds * 3,
                             fix_b_dec_zero=[True] * R + [False] * (2 * R), b_dec_init=["zero"] * R + ["mean"] * R + ["zero"] * R,
                             device=dev)
    gt_zero, gt_mean, gt_official = gts[:R], gts[R:2 * R], gts[2 * R:]
    for i, (o, meta, rows) in enumerate(zip(outs, metas, meta_inputs)):
        world = o["world"]
        labels = classify_latents(rows, world)
        ent = labels == "entity"
        sets = world.entity_atoms[np.argmax(_unit(rows[ent]) @ world.entities.T, 1)] if ent.any() else np.zeros((0, 3), int)
        small = o["saes"][min(widths)]
        o["meta"] = dict(fve=_fve(meta, rows), fve_null=_fve(null_metas[i], nulls[i]),
                         atoms=recovered_fraction(world.atoms, meta, 0.8),
                         hit=float(atom_hit_fraction(meta, rows[ent], sets, world.atoms).mean()) if ent.any() else 0.0,
                         maxcos_small=float(max_cosine(meta, small).mean()),
                         maxcos_null=float(max_cosine(null_metas[i], small).mean()), n_rows=int(len(rows)),
                         n_entity_rows=int(ent.sum()), model=meta, rows=rows, labels=labels,
                         gt_atoms_zero=recovered_fraction(gt_worlds[i].atoms, gt_zero[i], 0.8),
                         gt_atoms_mean=recovered_fraction(gt_worlds[i].atoms, gt_mean[i], 0.8),
                         gt_atoms_official=recovered_fraction(gt_worlds[i].atoms, gt_official[i], 0.8))
        del o["X"], o["Xt"]
    return outs


def _fve(meta, rows) -> float:
    r"""Fraction of variance of ``rows`` explained by the meta-SAE's inference-form reconstruction."""
    with torch.no_grad():
        rec = meta(torch.as_tensor(rows), batch=False).numpy()
    return float(1 - ((rows - rec) ** 2).sum() / ((rows - rows.mean(0)) ** 2).sum())


def run_experiment(seed: int, **kw) -> dict:
    r"""One world of :func:`run_experiments` (seed ``seed``, replicate 0; ``device`` and the rest as there)."""
    return run_experiments([seed], replicates=1, **kw)[0]


def _share_improving(st, label: str, empty: float) -> float:
    on = st["label"] == label
    return float((st["delta"][on] < 0).mean()) if on.any() else empty


def summarize(results: list[dict]) -> "pandas.DataFrame":
    """One row per world (seed, replicate) of :func:`run_experiments` results: the numbers the claims read.
    The widths follow each result's ``config``: ``small`` and ``large`` are the stitched pair (A, B), the
    TopK comparison is at ``topk_width``, ``widest`` is the meta-SAE's base SAE. A world whose B has no
    alive rare latent counts no rare latent as improving, and one with no entity latent counts every
    entity latent as improving (both against the stitching claim)."""
    import pandas as pd

    rows = []
    for r in results:
        c = r.get("config", dict(widths=(16, 32, 64, 128), topk_width=64, stitch=(16, 64)))
        sw = {(s["width"], s["kind"]): s for s in r["sweep"]}
        bt, tk = sw[(c["topk_width"], "batchtopk")], sw[(c["topk_width"], "topk")]
        small, large = sw[(c["stitch"][0], "batchtopk")], sw[(c["stitch"][1], "batchtopk")]
        st, me = r["stitch"], r["meta"]
        rows.append(dict(
            seed=r["seed"], replicate=r.get("replicate", 0), nmse_batchtopk=bt["nmse"], nmse_topk=tk["nmse"],
            l0_batchtopk=bt["l0"], l0_topk=tk["l0"],
            atoms_small=small["atoms"], atoms_large=large["atoms"], entities_small=small["entities"],
            entities_large=large["entities"], rare_small=small["rare"], rare_large=large["rare"],
            both_max=max(min(s["atoms"], s["entities"]) for s in r["sweep"] if s["kind"] == "batchtopk"),
            improve_rare=_share_improving(st, "rare", 0.0), improve_entity=_share_improving(st, "entity", 1.0),
            improve_other=_share_improving(st, "other", float("nan")),
            n_rare=int((st["label"] == "rare").sum()), n_entity=int((st["label"] == "entity").sum()),
            n_other=int((st["label"] == "other").sum()), n_atom=int((st["label"] == "atom").sum()),
            spearman=st["spearman"],
            monotone_full=float(np.mean(np.diff(st["path_full"]) <= 1e-4)) if len(st["path_full"]) > 1 else 1.0,
            monotone_naive=float(np.mean(np.diff(st["path_naive"]) <= 1e-4)) if len(st["path_naive"]) > 1 else 1.0,
            full_end=float(st["path_full"][-1]), path_start=float(st["path_full"][0]),
            path_end=float(st["path_greedy"][-1]), mse_B=st["mse_B"],
            largest_group=max(st["swap_sizes_full"]) if st["swap_sizes_full"] else 0,
            n_moves=len(st["path_full"]) - 1, n_moves_stopped=len(st["path_greedy"]) - 1,
            meta_fve=me["fve"], meta_fve_null=me["fve_null"], meta_atoms=me["atoms"], meta_hit=me["hit"],
            meta_maxcos_small=me["maxcos_small"], meta_maxcos_null=me["maxcos_null"],
            meta_rows=me["n_rows"], meta_entity_rows=me["n_entity_rows"],
            gt_atoms_zero=me["gt_atoms_zero"], gt_atoms_mean=me["gt_atoms_mean"],
            gt_atoms_official=me["gt_atoms_official"]))
    return pd.DataFrame(rows).set_index(["seed", "replicate"])
