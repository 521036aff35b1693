r"""The book's default worlds, shipped as checkpoints that the test suite re-trains and compares.

Chapter 16 decides its claims over three replicate worlds (seeds 0, 1, 2), chapter 17 over five (seeds 0 to
4). Training one world takes most of a minute on one CPU thread, so training them would spend a chapter's whole
time budget before its first experiment. The worlds of those seeds, trained by
:func:`~companion_lib.tinyvlm.train_world` with the default :class:`~companion_lib.tinyvlm.TrainConfig` and
:class:`~companion_lib.tinyvlm.WorldConfig`, are therefore shipped in ``checkpoints/`` beside this file, and
:func:`~companion_lib.tinyvlm.trained_world` loads them; any other seed or setting is trained as before.

What keeps the checkpoints honest:

* ``make worlds`` (``python -m companion_lib.tinyvlm.checkpoint regenerate``) re-creates them from scratch;
  the files are byte-for-byte reproducible (fixed zip timestamps, no pickle).
* The test suite re-trains every shipped seed and compares (:func:`check_regenerated`). Training is chaotic:
  one rounding difference in the first steps (another BLAS kernel, another CPU) ends in different weights.
  So where this machine's numerics are those the checkpoints were made with (:func:`numerics_signature`:
  library versions, BLAS and CPU), every array must be *identical*; elsewhere the test can only ask that
  the first 20 losses agree to a relative ``1e-4`` (same data, initialisation and recipe) and that each
  stage's mean loss over its last 50 steps agrees within 15% (the same training quality).

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

from .train import TrainConfig, World, train_world
from .world import WorldConfig

__all__ = ["CHECKPOINT_DIR", "SHIPPED_SEEDS", "numerics_signature", "checkpoint_path", "save_world",
           "load_world", "shipped_world", "world_differences", "loss_agreement", "check_regenerated", "main"]

CHECKPOINT_DIR = Path(__file__).resolve().parent / "checkpoints"
#: The seeds whose default worlds are shipped (the default ``seeds`` of chapters 16 and 17).
SHIPPED_SEEDS = (0, 1, 2, 3, 4)
_FORMAT = 1
_STATES = ("base_state", "aligned_state", "final_state")
#: Tolerances when this machine rounds differently from the one that made the checkpoints.
EARLY_STEPS, EARLY_RTOL = 20, 1e-4
LATE_STEPS, LATE_RTOL = 50, 0.15


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


def loss_agreement(a: World, b: World) -> dict:
    """The checks that two trainings of the same recipe must pass even when their machines round differently:
    the first :data:`EARLY_STEPS` losses of the first stage (relative difference :data:`EARLY_RTOL`) and each
    stage's mean over its last :data:`LATE_STEPS` steps (relative difference :data:`LATE_RTOL`)."""
    if list(a.losses) != list(b.losses) or any(len(a.losses[s]) != len(b.losses[s]) for s in a.losses):
        raise ValueError("the two worlds ran different stages or step counts")
    first = next(iter(a.losses))
    x, y = np.asarray(a.losses[first][:EARLY_STEPS]), np.asarray(b.losses[first][:EARLY_STEPS])
    out = {"early": bool(np.all(np.abs(x - y) <= EARLY_RTOL * np.abs(y)))}
    for stage in a.losses:
        if a.losses[stage]:
            ma, mb = np.mean(a.losses[stage][-LATE_STEPS:]), np.mean(b.losses[stage][-LATE_STEPS:])
            out[stage] = bool(abs(ma - mb) <= LATE_RTOL * abs(mb))
    return out


def check_regenerated(seed: int, folder: Path | str | None = None) -> dict:
    """Re-train the shipped world of ``seed`` from scratch (one thread) and compare it with the checkpoint.

    Returns ``{"exact", "differences", "agreement", "ok", "numerics", "shipped_numerics"}``: ``exact`` when this
    machine's :func:`numerics_signature` equals the checkpoint's, and then ``ok`` needs no difference at all
    (:func:`world_differences`); otherwise ``ok`` needs every check of :func:`loss_agreement`.
    """
    shipped, meta = load_world(checkpoint_path(seed, folder))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fresh = train_world(int(seed), _settings(TrainConfig, meta["config"]),
                            _settings(WorldConfig, meta["world_config"]))
    finally:
        torch.set_num_threads(threads)
    exact = numerics_signature() == meta["numerics"]
    diffs = world_differences(fresh, shipped)
    agreement = loss_agreement(fresh, shipped)
    ok = not diffs if exact else all(agreement.values())
    return {"exact": exact, "differences": diffs, "agreement": agreement, "ok": ok,
            "numerics": numerics_signature(), "shipped_numerics": meta["numerics"]}


def main(argv: list | None = None) -> int:
    """``regenerate`` (train and write the shipped worlds) or ``check`` (train and compare)."""
    parser = argparse.ArgumentParser(prog="python -m companion_lib.tinyvlm.checkpoint", description=main.__doc__)
    parser.add_argument("command", choices=("regenerate", "check"))
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SHIPPED_SEEDS))
    parser.add_argument("--folder", default=str(CHECKPOINT_DIR))
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    status = 0
    for seed in args.seeds:
        if args.command == "regenerate":
            path = save_world(train_world(seed), checkpoint_path(seed, args.folder))
            print(f"seed {seed}: wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
        else:
            r = check_regenerated(seed, args.folder)
            mode = "bit-identical" if r["exact"] else "loss agreement (other numerics)"
            print(f"seed {seed}: {'OK' if r['ok'] else 'FAILED'} [{mode}] differences: {r['differences'][:5]} "
                  f"agreement: {r['agreement']}")
            status |= not r["ok"]
    return status


if __name__ == "__main__":
    sys.exit(main())
