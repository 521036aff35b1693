"""The book-scale benchmark: calibrate the conventional ISP, simulate train and test captures, train one
model per class in the residual set-up (and, optionally, the UNets from scratch), score everything per
exposure mode and on a blur sweep.

One call of :func:`run_benchmark` is one seed; the reproduce notebook caches it on disk
(``companion_lib.common.disk_cache``) and the exercises reuse the cache.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..common.device import resolve_device
from ..common.device import to_device
from ..common.validation import check_int, check_positive_int
from .conventional import ConventionalISP, apply_ccm, delta_e2000, image_metrics
from .models import build_model, count_parameters, predict_isp, to_tensors, train_isp
from .simulator import (COLORCHECKER_SRGB, GAMMA, TEST_SCENES, TRAIN_SCENES, SensorConfig, dark_frame,
                        expose, linear_to_camera, load_scenes, mosaic_quad_bayer, render_colorchecker,
                        simulate_dataset)

__all__ = ["calibrate", "calibration_report", "run_benchmark", "MODEL_ORDER"]

MODEL_ORDER = ("PlainCNN", "TwoStage", "UNet", "EV-UNet")


def calibrate(rng: np.random.Generator, sensor: SensorConfig = SensorConfig(), exposure: float = 1.0,
              **isp_options) -> tuple[ConventionalISP, dict]:
    """Capture the rendered ColorChecker with the simulated sensor and fit the conventional ISP on it.
    Returns the fitted ISP and the chart capture (``raw``, ``dark``, ``boxes``, ``linear`` scene)."""
    chart, boxes = render_colorchecker()
    raw = expose(mosaic_quad_bayer(linear_to_camera(chart, sensor)), exposure, rng, sensor)
    dark = dark_frame(*raw.shape, sensor=sensor)
    isp = ConventionalISP(sensor=sensor, **isp_options).fit(raw, dark, boxes, COLORCHECKER_SRGB ** (1 / GAMMA))
    return isp, {"raw": raw, "dark": dark, "boxes": boxes, "linear": chart}


def calibration_report(isp: ConventionalISP, sensor: SensorConfig = SensorConfig()) -> dict:
    """White-balance error against the true gains and mean CIEDE2000 of the 24 patches at three stages:
    camera RGB, after white balance, after white balance and the colour correction matrix."""
    target = COLORCHECKER_SRGB ** (1 / GAMMA)
    true = np.asarray(sensor.wb_gains, dtype=float)
    return {
        "gains": isp.gains, "true_gains": true,
        "max_gain_error": float(np.max(np.abs(isp.gains / true - 1))),
        "dE_camera": float(np.mean(delta_e2000(isp.camera_patches_, target))),
        "dE_white_balanced": float(np.mean(delta_e2000(isp.wb_patches_, target))),
        "dE_ccm": float(np.mean(delta_e2000(apply_ccm(isp.wb_patches_, isp.ccm), target))),
    }


def _scores(name: str, prediction: np.ndarray, data: dict) -> list[dict]:
    metrics = image_metrics(prediction, data["target"])
    rows = []
    for mode, mask in [("all", np.ones(len(data["exposure"]), bool))] + [
            (f"exposure {e:g}", data["exposure"] == e) for e in np.unique(data["exposure"])[::-1]]:
        rows.append({"model": name, "mode": mode, **{k: float(v[mask].mean()) for k, v in metrics.items()}})
    return rows


def run_benchmark(seed: int, n_train: int = 512, n_test: int = 64, size: int = 32, max_blur: float = 12.0,
                  exposures=(1.0, 0.25), steps: int = 300, batch: int = 16, lr: float = 3e-3, width: int = 16,
                  event_bins: int = 8, threshold: float = 0.15, models=MODEL_ORDER, scratch_models=(),
                  sweep_blurs=(0, 4, 8, 12), n_sweep: int = 64, n_examples: int = 4, device=None) -> dict:
    """One seed of the benchmark. ``models`` are trained in the residual set-up, ``scratch_models`` (UNet,
    EV-UNet) from scratch, named ``"<name> (scratch)"`` in the results. Returns ``table`` (one row per model
    and exposure mode: PSNR, SSIM, L1, plus params and ms/step), ``sweep`` (PSNR/SSIM per model at each
    fixed blur), ``calibration`` (:func:`calibration_report`), ``losses`` and ``examples`` (a few test inputs
    and outputs).

    ``device`` (default :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the
    models train and predict; the simulation, the conventional ISP and the scores stay on the CPU, and on
    the CPU the results are the same numbers whatever the argument.
    """
    dev = resolve_device(device)
    seed = check_int(seed, "seed", low=0)
    n_train, n_test = check_positive_int(n_train, "n_train"), check_positive_int(n_test, "n_test")
    rng = np.random.default_rng([seed, 15])
    torch.manual_seed(seed)
    sensor = SensorConfig()
    isp, _ = calibrate(rng, sensor)
    scenes = load_scenes()
    train_scenes = {k: scenes[k] for k in TRAIN_SCENES}
    test_scenes = {k: scenes[k] for k in TEST_SCENES}
    dark = dark_frame(size, size, sensor=sensor)
    options = dict(size=size, n_bins=event_bins, threshold=threshold, exposures=exposures)
    train = simulate_dataset(train_scenes, n_train, rng, max_blur=max_blur, **options)
    test = simulate_dataset(test_scenes, n_test, rng, max_blur=max_blur, **options)
    sweep_sets = {b: simulate_dataset(test_scenes, n_sweep, rng, blur=float(b), **options) for b in sweep_blurs}

    def inputs(data):
        return to_tensors(data, isp.process_batch(data["raw"], dark), dark, sensor.white_level)

    train_t, test_t = inputs(train), inputs(test)
    train_dev = to_device(train_t, dev)   # once, not per step (on the CPU: the same tensors)
    sweep_t = {b: inputs(d) for b, d in sweep_sets.items()}
    base = np.moveaxis(test_t["base"].numpy(), 1, -1)
    rows = [dict(r, params=0, ms_per_step=np.nan) for r in _scores("conventional", base, test)]
    sweep_rows = [{"model": "conventional", "blur": b, **{k: float(v.mean()) for k, v in image_metrics(
        np.moveaxis(t["base"].numpy(), 1, -1), sweep_sets[b]["target"]).items()}} for b, t in sweep_t.items()]
    losses, examples = {}, {"target": test["target"][:n_examples], "conventional": base[:n_examples],
                            "events": test["events"][:n_examples], "blur": test["blur"][:n_examples]}
    runs = [(name, name, True) for name in models] + [(f"{name} (scratch)", name, False) for name in scratch_models]
    for k, (label, name, residual) in enumerate(runs):
        torch.manual_seed(seed * 100 + k)
        # initialised on the CPU by the seed above, then moved (on the CPU, .to() is a no-op)
        model = build_model(name, width=width, event_bins=event_bins, residual=residual).to(dev)
        fit = train_isp(model, train_dev, steps=steps, batch=batch, lr=lr, seed=seed * 100 + k)
        losses[label] = fit["loss"]
        prediction = predict_isp(model, test_t)
        examples[label] = prediction[:n_examples]
        rows += [dict(r, params=count_parameters(model), ms_per_step=fit["ms_per_step"])
                 for r in _scores(label, prediction, test)]
        for b, t in sweep_t.items():
            m = image_metrics(predict_isp(model, t), sweep_sets[b]["target"])
            sweep_rows.append({"model": label, "blur": b, **{k2: float(v.mean()) for k2, v in m.items()}})
    table = pd.DataFrame(rows).assign(seed=seed)
    sweep = pd.DataFrame(sweep_rows).assign(seed=seed)
    return {"table": table, "sweep": sweep, "calibration": calibration_report(isp, sensor), "losses": losses,
            "examples": examples}
