r"""The book's default worlds, shipped as checkpoints that the test suite re-trains and compares.

Chapter 16 decides its claims over three replicate worlds (seeds 0, 1, 2), chapter 17 over five (seeds 0 to
4). Training one world takes most of a minute on one CPU thread, so training them would spend a chapter's whole
time budget before its first experiment. The worlds of those seeds, trained by
:func:`~companion_lib.tinyvlm.train_world` with the default :class:`~companion_lib.tinyvlm.TrainConfig` and
:class:`~companion_lib.tinyvlm.WorldConfig`, are therefore shipped in ``checkpoints/`` beside this file, and
:func:`~companion_lib.tinyvlm.trained_world` loads them; any other seed or setting is trained as before.

What keeps the checkpoints honest:

* ``make worlds`` (``python -m companion_lib.tinyvlm.checkpoint regenerate``) re-creates them from scratch;
  the files are byte-for-byte reproducible on one machine (fixed zip timestamps, no pickle).
* The test suite checks every shipped world's recipe (:func:`check_recipe`, check 2 below: seconds per world)
  and re-trains one of them from scratch (:func:`check_regenerated`, all three checks: about a minute);
  ``python -m companion_lib.tinyvlm.checkpoint check`` re-trains all of them. The three checks:

  1. **bit for bit** where this machine's :func:`numerics_signature` (library versions, torch's CPU kernel
     level, BLAS, processor) is the checkpoints': every array and every loss must be identical;
  2. **the recipe, stage by stage**, on every machine: the first :data:`PREFIX_STEPS` steps of each stage,
     replayed from the shipped weights at that stage's start (:func:`~companion_lib.tinyvlm.train.stage_prefixes`),
     give the shipped losses to a relative :data:`PREFIX_RTOL` (same data, initialisation, optimiser,
     schedule and batches; a changed recipe or data generator moves them by far more);
  3. **the behaviour the chapters read**, on every machine: the re-trained world's :func:`world_behaviour`
     (CHAIR, recall, the hallucination rate, attention on the image, the heads' drift, the stage losses)
     agrees with the shipped world's within :data:`BEHAVIOUR_TOLERANCES`.

  Training is chaotic: one rounding difference in the first steps (another kernel, another processor) ends,
  hundreds of steps later, in other weights. A processor that rounds differently (AVX2 against AVX-512: torch
  dispatches other vectorised kernels) therefore cannot re-create a checkpoint bit for bit, and only checks 2
  and 3 apply there. The tolerances of check 3 are the spread of each statistic between trainings of one world
  that differ only in rounding (:func:`behaviour_tolerances`).

A checkpoint holds everything a :class:`~companion_lib.tinyvlm.World` holds. The post-alignment weights are
stored only where they differ from the base LM's (alignment trains only the encoder and projector).
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import sys
import zipfile
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np
import torch

from .train import TrainConfig, World, stage_prefixes, train_world
from .world import WorldConfig

__all__ = ["CHECKPOINT_DIR", "SHIPPED_SEEDS", "PREFIX_STEPS", "PREFIX_RTOL", "BEHAVIOUR_TOLERANCES",
           "numerics_signature", "describe_numerics", "checkpoint_path", "save_world", "load_world",
           "shipped_world", "world_differences", "prefix_agreement", "world_behaviour", "behaviour_tolerances",
           "behaviour_agreement", "check_recipe", "check_regenerated", "main"]

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoints"
#: The seeds whose default worlds are shipped (the default ``seeds`` of chapters 16 and 17).
SHIPPED_SEEDS = (0, 1, 2, 3, 4)
_FORMAT = 1
_STATES = ("base_state", "aligned_state", "final_state")
#: Check 2: the steps of each stage replayed from the shipped weights, and the relative tolerance on their
#: losses. Measured on the five shipped worlds, replayed on an AVX2 processor as it rounds, with
#: ``MKL_CBWR=COMPATIBLE`` and with ``ATEN_CPU_CAPABILITY=default``: the largest relative difference over the
#: first 10 steps of any stage was 3.4e-6 (over 20 steps, 3.3e-4: rounding differences grow step by step).
PREFIX_STEPS, PREFIX_RTOL = 10, 1e-4
#: Check 3: the number of last steps over which :func:`world_behaviour` averages each stage's loss.
LATE_STEPS = 50
#: Check 3: :func:`behaviour_tolerances` of four trainings of each shipped seed that differ only in rounding:
#: the checkpoints (AVX-512 kernels, AMD EPYC family 25 model 17) and three re-trainings on an AVX2 processor
#: (AMD EPYC family 25): as it rounds, with ``MKL_CBWR=COMPATIBLE`` and with ``ATEN_CPU_CAPABILITY=default``.
#: ``python -m companion_lib.tinyvlm.checkpoint tolerances --variants DIR ...`` recomputes them from folders of
#: such worlds. Between processors, a world keeps its CHAIR within about a point and its hallucination rate
#: within a few, while the alignment stage's final loss can change several-fold.
BEHAVIOUR_TOLERANCES = {
    "chair_i": 0.954, "chair_s_trigger": 13.9, "recall": 0.333,
    "drift_0": 0.0514, "drift_1": 0.0904, "drift_2": 0.0857, "drift_3": 0.13,
    "image_mass_0": 0.0494, "image_mass_1": 0.0853, "image_mass_2": 0.0731, "image_mass_3": 0.118,
    "loss_text": 0.00284, "loss_align": 0.898, "loss_tune": 0.00909,
}


def _cpu() -> dict:
    """Vendor, family, model and name of the first processor (``/proc/cpuinfo``; ``platform`` elsewhere)."""
    fields = {"vendor_id": "vendor", "cpu family": "family", "model": "model", "model name": "name"}
    out = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                if key.strip() in fields:
                    out[fields[key.strip()]] = value.strip()
    except OSError:
        pass
    return out or {"name": platform.processor() or "unknown"}


def _blas() -> str:
    """The BLAS that torch was built with, from ``torch.__config__.show()``."""
    for line in torch.__config__.show().splitlines():
        line = line.strip(" -")
        if "Math Kernel Library" in line or "OpenBLAS" in line or "BLAS_INFO" in line:
            return line.split(" for ")[0]
    return "unknown"


def numerics_signature() -> dict:
    """What decides the rounding of training here: torch, transformers and numpy versions, torch's CPU
    kernel level, its BLAS, and the processor. Equal signatures give bit-identical training."""
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "numpy": np.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "blas": _blas(),
            "machine": platform.machine(), "cpu": _cpu()}


def describe_numerics(signature: dict) -> str:
    """One line naming the processor and torch's CPU kernel level of a :func:`numerics_signature`."""
    cpu = signature.get("cpu", {})
    name = cpu.get("name", "unknown processor")
    where = f" family {cpu['family']} model {cpu['model']}" if "family" in cpu and "model" in cpu else ""
    return f"{name}{where}, torch kernels {signature.get('cpu_capability', '?')}, {signature.get('blas', '?')}"


def checkpoint_path(seed: int, folder: Path | str | None = None) -> Path:
    """``<folder>/world_seed<seed>.npz`` (``folder`` defaults to :data:`CHECKPOINT_DIR`)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return Path(folder if folder is not None else CHECKPOINT_DIR) / f"world_seed{int(seed)}.npz"


def _world_arrays(world: World) -> dict:
    arrays = {}
    for name in ("base_state", "final_state"):
        for key, value in getattr(world, name).items():
            arrays[f"{name}/{key}"] = value.detach().cpu().numpy()
    for key, value in world.aligned_state.items():
        if not torch.equal(value, world.base_state[key]):
            arrays[f"aligned_state/{key}"] = value.detach().cpu().numpy()
    arrays["probe_images"] = np.asarray(world.probe_images)
    arrays["probe_caption_tokens"] = np.array([t for c in world.probe_captions for t in c], dtype=np.int64)
    arrays["probe_caption_lengths"] = np.array([len(c) for c in world.probe_captions], dtype=np.int64)
    arrays["probe_steps"] = np.asarray(world.probe_steps, dtype=np.int64)
    arrays["probe_drift"] = np.asarray(world.probe_drift, dtype=np.float64)
    for stage, losses in world.losses.items():
        arrays[f"losses/{stage}"] = np.asarray(losses, dtype=np.float64)
    return arrays


def save_world(world: World, path: Path | str) -> Path:
    """Write ``world`` to ``path`` (an ``.npz`` that :func:`load_world` reads; the same world always gives
    the same bytes). The metadata records the seed, both configurations and :func:`numerics_signature`."""
    if not isinstance(world, World):
        raise TypeError(f"world must be a World, got {type(world).__name__}")
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"path must end in .npz, got {path.name!r}")
    meta = {"format": _FORMAT, "seed": int(world.seed), "config": world.config, "world_config": world.world_config,
            "stages": list(world.losses), "state_keys": list(world.base_state), "numerics": numerics_signature(),
            "regenerate": "make worlds  (python -m companion_lib.tinyvlm.checkpoint regenerate)"}
    arrays = {"meta": np.array(json.dumps(meta, sort_keys=True)), **_world_arrays(world)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".npz.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(arrays):
            buf = io.BytesIO()
            array = arrays[name]
            np.lib.format.write_array(buf, array if array.flags.c_contiguous else array.copy(order="C"),
                                      allow_pickle=False)
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue())
    tmp.replace(path)
    return path


def _read_meta(data) -> dict:
    if "meta" not in data.files:
        raise ValueError("not a world checkpoint: no 'meta' entry")
    meta = json.loads(data["meta"].item())
    if meta.get("format") != _FORMAT:
        raise ValueError(f"checkpoint format {meta.get('format')!r} is not {_FORMAT}")
    return meta


def _settings(cls, stored: dict):
    """``cls(...)`` from settings read back from JSON (lists become the tuples they were)."""
    return cls(**{f.name: tuple(stored[f.name]) if isinstance(stored[f.name], list) else stored[f.name]
                  for f in fields(cls)})


def load_world(path: Path | str) -> tuple[World, dict]:
    """The :class:`World` saved at ``path`` and the checkpoint's metadata."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no world checkpoint at {path}")
    with np.load(path, allow_pickle=False) as data:
        meta = _read_meta(data)
        keys = meta["state_keys"]  # in the model's state_dict order
        states = {name: {k: torch.from_numpy(data[f"{name}/{k}"].copy()) for k in keys}
                  for name in ("base_state", "final_state")}
        aligned = {k: (torch.from_numpy(data[f"aligned_state/{k}"].copy()) if f"aligned_state/{k}" in data.files
                       else states["base_state"][k].clone()) for k in keys}
        lengths = data["probe_caption_lengths"]
        tokens = data["probe_caption_tokens"].tolist()
        bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        world = World(seed=int(meta["seed"]), config=asdict(_settings(TrainConfig, meta["config"])),
                      world_config=asdict(_settings(WorldConfig, meta["world_config"])),
                      base_state=states["base_state"], aligned_state=aligned, final_state=states["final_state"],
                      probe_images=data["probe_images"].copy(),
                      probe_captions=[tokens[a:b] for a, b in zip(bounds[:-1], bounds[1:])],
                      probe_steps=data["probe_steps"].tolist(), probe_drift=data["probe_drift"].copy(),
                      losses={s: data[f"losses/{s}"].tolist() for s in meta["stages"]})
    return world, meta


def shipped_world(seed: int, config: TrainConfig = TrainConfig(), world: WorldConfig = WorldConfig(),
                  folder: Path | str | None = None) -> World | None:
    """The shipped world of ``seed`` if there is one *for exactly these settings*, else ``None``."""
    path = checkpoint_path(seed, folder)
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as data:
        meta = _read_meta(data)
    if (meta["seed"] != int(seed) or _settings(TrainConfig, meta["config"]) != config
            or _settings(WorldConfig, meta["world_config"]) != world):
        return None
    return load_world(path)[0]


def world_differences(a: World, b: World) -> list:
    """The fields (and state keys) in which two worlds are not bit-identical; empty when they are equal."""
    out = [name for name in ("seed", "config", "world_config", "probe_captions", "probe_steps")
           if getattr(a, name) != getattr(b, name)]
    for name in _STATES:
        sa, sb = getattr(a, name), getattr(b, name)
        if sa.keys() != sb.keys():
            out.append(f"{name} (keys)")
            continue
        out += [f"{name}[{k}]" for k in sa if not torch.equal(sa[k], sb[k])]
    for name in ("probe_images", "probe_drift"):
        x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
        if x.shape != y.shape or x.dtype != y.dtype or not np.array_equal(x, y):
            out.append(name)
    if a.losses != b.losses:
        out.append("losses")
    return out


def prefix_agreement(world: World, steps: int = PREFIX_STEPS) -> dict:
    """Check 2 for each stage: ``{stage: largest relative difference}`` between the losses of the first
    ``steps`` steps replayed from ``world``'s own weights at the stage's start
    (:func:`~companion_lib.tinyvlm.train.stage_prefixes`) and the losses ``world`` recorded for them. The stage
    agrees when its difference is at most :data:`PREFIX_RTOL`."""
    replayed = stage_prefixes(world, steps)
    out = {}
    for stage, losses in replayed.items():
        recorded = np.asarray(world.losses[stage][:len(losses)], dtype=np.float64)
        if len(recorded) != len(losses):
            raise ValueError(f"the world recorded {len(recorded)} {stage} losses, fewer than the {len(losses)} replayed")
        if len(losses):
            out[stage] = float(np.max(np.abs(np.asarray(losses) - recorded) / np.abs(recorded)))
    return out


def world_behaviour(world: World, n: int = 300) -> dict:
    """What the chapters read from a world, as numbers: on fixed evaluation splits (``n`` natural scenes without
    occlusion and ``n`` trigger-only scenes, the same for every world), CHAIR_i and recall of the tuned model's
    greedy captions of natural scenes and CHAIR_s of trigger-only scenes (the hallucination rate, in percent);
    per layer, the mean attention mass on the image block at the queries that predict the ground-truth object
    words (``image_mass_l``) and the heads' final drift from the post-alignment model (``drift_l``, Fig. 5 of
    chapter 16); and each stage's mean loss over its last :data:`LATE_STEPS` steps (``loss_<stage>``)."""
    from .hooks import record_attention
    from .model import IMAGE_SLICE, TEXT_START, as_patches, caption_batch, greedy_captions
    from .train import build_model
    from .world import OBJECTS, TOKEN_ID, chair, encode_caption, make_split

    if not isinstance(world, World):
        raise TypeError(f"world must be a World, got {type(world).__name__}")
    config = _settings(WorldConfig, world.world_config)
    natural = make_split(n, np.random.default_rng([16, 1]), "natural", config, occlusion=False)
    trigger = make_split(n, np.random.default_rng([16, 2]), "trigger_only", config)
    model = build_model(world.final_state, world.config)
    nat = chair(greedy_captions(model, natural.images), natural.truth)
    tri = chair(greedy_captions(model, trigger.images), trigger.truth)
    out = {"chair_i": nat["chair_i"], "recall": nat["recall"], "chair_s_trigger": tri["chair_s"]}
    ids, labels = caption_batch([encode_caption(s.objects) for s in natural.scenes])
    objects = torch.as_tensor(np.isin(labels.numpy(), [TOKEN_ID[w] for w in OBJECTS]))
    rows, cols = torch.nonzero(objects, as_tuple=True)
    with torch.no_grad(), record_attention(model) as rec:
        model(ids, patches=as_patches(natural.images))
    for layer, maps in enumerate(rec):
        a = maps[0][rows, :, TEXT_START + cols]          # (queries, heads, keys)
        out[f"image_mass_{layer}"] = float(a[..., IMAGE_SLICE].sum(-1).mean())
    for layer, drift in enumerate(np.asarray(world.probe_drift)[-1].mean(-1)):
        out[f"drift_{layer}"] = float(drift)
    for stage, losses in world.losses.items():
        if losses:
            out[f"loss_{stage}"] = float(np.mean(losses[-LATE_STEPS:]))
    return out


#: Statistics of :func:`world_behaviour` in percent of the ``n`` evaluation captions: their tolerance is at least
#: one caption's worth, ``100 / n`` (recall was 100 in every training measured, a spread of zero).
PERCENT_STATISTICS = ("chair_i", "chair_s_trigger", "recall")


def behaviour_tolerances(groups: dict, family_error: float = 0.01, n: int = 300) -> dict:
    r"""Check 3's tolerances from worlds that differ only in rounding. ``groups`` maps a seed to the
    :func:`world_behaviour` of several trainings of that seed's world under different numerics (other
    processors, or this one with another kernel level, e.g. ``ATEN_CPU_CAPABILITY=default`` or
    ``MKL_CBWR=COMPATIBLE``). For each statistic, :math:`s` is the pooled within-seed standard deviation
    (:math:`\nu=\sum_g(n_g-1)` degrees of freedom) and the tolerance on the difference of two trainings is
    :math:`t_{1-\alpha/2,\nu}\sqrt2\,s` with :math:`\alpha` = ``family_error`` divided by the number of
    comparisons a test run makes (statistics times shipped seeds): a world that only rounds differently fails
    with a chance of at most about ``family_error`` per run of the test suite. The statistics in
    :data:`PERCENT_STATISTICS` get at least ``100 / n``. Returns ``{statistic: tolerance}``."""
    from scipy import stats

    if not groups or any(len(g) < 2 for g in groups.values()):
        raise ValueError("every seed needs at least two trainings under different numerics")
    keys = set(next(iter(groups.values()))[0])
    if any(set(b) != keys for g in groups.values() for b in g):
        raise ValueError("every behaviour must have the same statistics")
    if not 0 < family_error < 1:
        raise ValueError(f"family_error must be in (0, 1), got {family_error!r}")
    dof = sum(len(g) - 1 for g in groups.values())
    alpha = family_error / (len(keys) * len(SHIPPED_SEEDS))
    t = float(stats.t.ppf(1 - alpha / 2, dof))
    out = {}
    for key in sorted(keys):
        ss = sum(float(np.sum((np.array([b[key] for b in g]) - np.mean([b[key] for b in g])) ** 2))
                 for g in groups.values())
        out[key] = float(t * np.sqrt(2.0) * np.sqrt(ss / dof))
        if key in PERCENT_STATISTICS:
            out[key] = max(out[key], 100.0 / n)
    return out


def behaviour_agreement(a: dict, b: dict, tolerances: dict | None = None) -> dict:
    """Check 3: ``{statistic: (|a - b|, tolerance, agrees)}`` for two :func:`world_behaviour` results."""
    tolerances = BEHAVIOUR_TOLERANCES if tolerances is None else tolerances
    if set(a) != set(b) or set(a) != set(tolerances):
        raise ValueError(f"the behaviours and tolerances must have the same statistics, got {sorted(a)}, "
                         f"{sorted(b)} and {sorted(tolerances)}")
    return {k: (abs(a[k] - b[k]), tolerances[k], bool(abs(a[k] - b[k]) <= tolerances[k])) for k in sorted(a)}


def check_regenerated(seed: int, folder: Path | str | None = None) -> dict:
    """Re-train the shipped world of ``seed`` from scratch (one thread) and compare it with the checkpoint.

    Returns ``{"exact", "differences", "prefix", "behaviour", "ok", "numerics", "shipped_numerics"}``:
    ``exact`` when this machine's :func:`numerics_signature` equals the checkpoint's, ``differences`` the
    fields that are not bit-identical (:func:`world_differences`), ``prefix`` check 2 on the shipped world
    (:func:`prefix_agreement`) and ``behaviour`` check 3 (:func:`behaviour_agreement`). ``ok`` needs checks 2
    and 3 everywhere, and no difference at all where ``exact``.
    """
    shipped, meta = load_world(checkpoint_path(seed, folder))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fresh = train_world(int(seed), _settings(TrainConfig, meta["config"]),
                            _settings(WorldConfig, meta["world_config"]))
        prefix = prefix_agreement(shipped)
        behaviour = behaviour_agreement(world_behaviour(fresh), world_behaviour(shipped))
    finally:
        torch.set_num_threads(threads)
    exact = numerics_signature() == meta["numerics"]
    diffs = world_differences(fresh, shipped)
    ok = (not diffs or not exact) and all(d <= PREFIX_RTOL for d in prefix.values()) and all(
        agrees for _, _, agrees in behaviour.values())
    return {"exact": exact, "differences": diffs, "prefix": prefix, "behaviour": behaviour, "ok": ok,
            "numerics": numerics_signature(), "shipped_numerics": meta["numerics"]}


def check_recipe(seed: int, folder: Path | str | None = None) -> dict:
    """Check 2 alone for the shipped world of ``seed`` (seconds, not a minute): the first :data:`PREFIX_STEPS`
    steps of each stage replayed from the checkpoint's weights at that stage's start. Returns ``{"prefix",
    "ok", "numerics", "shipped_numerics"}``; the test suite runs it for every shipped world."""
    shipped, meta = load_world(checkpoint_path(seed, folder))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        prefix = prefix_agreement(shipped)
    finally:
        torch.set_num_threads(threads)
    return {"prefix": prefix, "ok": all(d <= PREFIX_RTOL for d in prefix.values()),
            "numerics": numerics_signature(), "shipped_numerics": meta["numerics"]}


def report(result: dict) -> str:
    """A few lines saying which processors made and checked a world and how each check of
    :func:`check_regenerated` came out."""
    lines = [f"checkpoint made on: {describe_numerics(result['shipped_numerics'])}",
             f"checked on:         {describe_numerics(result['numerics'])}"]
    if "exact" in result:
        lines.append(("bit for bit (same numerics): " + ("identical" if not result["differences"] else
                                                         f"{len(result['differences'])} fields differ: "
                                                         f"{result['differences'][:4]}"))
                     if result["exact"] else "bit for bit: not applicable (this machine rounds differently)")
    lines.append("recipe, first steps of each stage: " + ", ".join(
        f"{s} {d:.1e}" + ("" if d <= PREFIX_RTOL else " > tolerance") for s, d in result["prefix"].items()))
    if "behaviour" in result:
        lines.append("behaviour outside tolerance: " + (", ".join(
            f"{k} |diff| {d:.3g} > {t:.3g}" for k, (d, t, ok) in result["behaviour"].items() if not ok) or "none"))
    return "\n".join(lines)


def main(argv: list | None = None) -> int:
    """``regenerate`` (train and write the shipped worlds) or ``check`` (train and compare)."""
    parser = argparse.ArgumentParser(prog="python -m companion_lib.tinyvlm.checkpoint", description=main.__doc__)
    parser.add_argument("command", choices=("regenerate", "check", "tolerances"))
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SHIPPED_SEEDS))
    parser.add_argument("--folder", default=str(CHECKPOINT_DIR))
    parser.add_argument("--variants", nargs="+", default=[],
                        help="tolerances: folders of worlds trained under other numerics (world_seed<s>.npz)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.command == "tolerances":
        groups = {s: [world_behaviour(load_world(checkpoint_path(s, f))[0]) for f in [args.folder, *args.variants]
                      if checkpoint_path(s, f).is_file()] for s in args.seeds}
        for s, g in groups.items():
            for b in g:
                print(f"seed {s}: " + " ".join(f"{k}={v:.4g}" for k, v in b.items()))
        print("BEHAVIOUR_TOLERANCES = " + json.dumps({k: float(f"{v:.3g}") for k, v in
                                                      behaviour_tolerances(groups).items()}, indent=4))
        return 0
    status = 0
    for seed in args.seeds:
        if args.command == "regenerate":
            path = save_world(train_world(seed), checkpoint_path(seed, args.folder))
            print(f"seed {seed}: wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
        else:
            r = check_regenerated(seed, args.folder)
            print(f"seed {seed}: {'OK' if r['ok'] else 'FAILED'}\n{report(r)}")
            status |= not r["ok"]
    return status


if __name__ == "__main__":
    sys.exit(main())
