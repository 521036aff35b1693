r"""The reproduce page's experiment on one trained world, in one call (:func:`run_experiment`).

Splits: a *calibration* split (for the detection threshold only) and a disjoint *test* split, each made
of natural scenes (no occlusion) and trigger-only scenes, where the co-occurrence prior produces
hallucinations. Every number on the page comes from the test split.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..common import disk_cache
from ..common.device import resolve_device
from ..common.validation import check_positive_int
from ..tinyvlm import Split, World, build_model, chair, make_split, trained_world
from .lens import (_captions_and_confidence, auroc, calibrate_threshold, detection_rates, internal_confidence,
                   localisation_accuracy, object_scores)
from .project_away import _reduction_run_own_captions, select_low_confidence, select_oracle, targeted_removal

__all__ = ["Experiment", "cached_experiment", "eval_split", "run_experiment"]


@dataclass
class Experiment:
    """Everything the reproduce page shows for one seed."""

    seed: int
    n_lens_layers: int
    chair: dict
    conf: np.ndarray = field(repr=False)          # (n, L + 1, 16, 10) lens confidences of the test split
    captions: list = field(repr=False)
    scenes: list = field(repr=False)
    real: np.ndarray = field(repr=False)          # internal confidence (max over layers) of real objects
    hal: np.ndarray = field(repr=False)
    auroc_max: float = 0.0
    auroc_output: float = 0.0                     # AUROC of the model's output probability (the paper's competitor)
    out_real: np.ndarray = field(default=None, repr=False)   # output probability of real generated objects
    out_hal: np.ndarray = field(default=None, repr=False)
    auroc_layer: list = field(default_factory=list)   # AUROC with one lens layer only
    mean_layer_real: list = field(default_factory=list)
    mean_layer_hal: list = field(default_factory=list)
    theta: dict = field(default_factory=dict)     # by confidence kind ("max", "layer0")
    detection: dict = field(default_factory=dict)
    loc_accuracy: float = 0.0
    loc_layer: list = field(default_factory=list)
    removal: dict = field(default_factory=dict)   # (image_layer, alpha) -> targeted_removal dict
    reduction: dict = field(default_factory=dict)  # (selection, alpha) -> reduction_run dict


def eval_split(seed: int, k: int, n_natural: int, n_trigger: int) -> Split:
    """A natural (no occlusion) plus trigger-only split, drawn from the generator ``[seed, 17, k]``."""
    a = make_split(check_positive_int(n_natural, "n_natural"), np.random.default_rng([seed, 17, k]), "natural",
                   occlusion=False)
    b = make_split(check_positive_int(n_trigger, "n_trigger"), np.random.default_rng([seed, 17, k, 1]),
                   "trigger_only")
    return Split(a.scenes + b.scenes, np.concatenate([a.images, b.images]))


def cached_experiment(seed: int, device=None, **kwargs) -> Experiment:
    """:func:`run_experiment` on ``trained_world(seed)``, through the book's disk cache (namespace
    ``vlm_editing``), so the chapter's pages share one run per seed. ``device`` is :func:`run_experiment`'s;
    a run on the CPU is cached under the same key whatever ``device`` says, a run elsewhere under a key that
    names the device (its numbers differ from the CPU's in the last digits, so they never serve a run
    that ``BOOK_DEVICE=cpu`` sends to the CPU)."""
    dev = resolve_device(device)
    key = dict(kwargs) if dev.type == "cpu" else {**kwargs, "device": str(dev)}
    return disk_cache("vlm_editing").cache(_experiment)(int(seed), key)


def _experiment(seed: int, kwargs: dict) -> Experiment:
    kwargs = dict(kwargs)
    return run_experiment(trained_world(seed), device=kwargs.pop("device", "cpu"), **kwargs)


def run_experiment(world: World, n_cal: tuple = (300, 150), n_test: tuple = (600, 300), n_removal: int = 300,
                   q: float = 0.02, alphas: tuple = (1.0, 1.5, 2.0), image_layers: tuple = (-1, 0, 1, 2, 3),
                   device=None) -> Experiment:
    """Lens, detection, localisation, targeted removal and hallucination reduction on one world.

    ``device`` (default :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the
    model captions, is read by the lens and is edited; the splits are drawn on the CPU as before, and every
    result comes back to the CPU (on the CPU the numbers are the same whatever ``device``)."""
    dev = resolve_device(device)
    seed = int(world.seed)
    model = build_model(world.final_state, world.config).to(dev)
    cal, test = eval_split(seed, 0, *n_cal), eval_split(seed, 2, *n_test)
    # = greedy_captions, lens_confidence, output_probability
    caps, conf, out_prob = _captions_and_confidence(model, test.images, output_probs=True)
    n_lens = conf.shape[1]
    cm = internal_confidence(conf)
    real, hal = object_scores(cm, caps, test.truth)
    out_real, out_hal = object_scores(out_prob, caps, test.truth)
    ex = Experiment(seed=seed, n_lens_layers=n_lens, chair=chair(caps, test.truth), conf=conf, captions=caps,
                    scenes=test.scenes, real=real, hal=hal, auroc_max=auroc(real, hal),
                    auroc_output=auroc(out_real, out_hal), out_real=out_real, out_hal=out_hal)
    for l in range(n_lens):
        r, h = object_scores(internal_confidence(conf, l), caps, test.truth)
        ex.auroc_layer.append(auroc(r, h))
        ex.mean_layer_real.append(float(r.mean()))
        ex.mean_layer_hal.append(float(h.mean()))
    # threshold on the calibration split only
    cal_caps, cal_conf = _captions_and_confidence(model, cal.images)
    for kind, layers in (("max", None), ("layer0", 0)):
        r_cal, _ = object_scores(internal_confidence(cal_conf, layers), cal_caps, cal.truth)
        ex.theta[kind] = calibrate_threshold(r_cal, q)
        r, h = object_scores(internal_confidence(conf, layers), caps, test.truth)
        ex.detection[kind] = detection_rates(r, h, ex.theta[kind])
    ex.loc_accuracy = localisation_accuracy(conf, test.scenes)
    ex.loc_layer = [localisation_accuracy(conf, test.scenes, l) for l in range(n_lens)]
    n_rem = min(int(n_removal), len(test.scenes))
    for lI in image_layers:
        for a in (alphas if lI == image_layers[0] else alphas[-1:]):  # the full alpha sweep at the first layer
            ex.removal[(lI, a)] = targeted_removal(model, test.images[:n_rem], caps[:n_rem], test.truth[:n_rem],
                                                   image_layer=lI, alpha=a)
    c0 = internal_confidence(conf, 0)
    selections = {"self (max)": select_low_confidence(cm, caps, ex.theta["max"]),
                  "self (layer 0)": select_low_confidence(c0, caps, ex.theta["layer0"]),
                  "oracle": select_oracle(caps, test.truth)}
    for name, sel in selections.items():
        for a in alphas[:2]:
            # caps are this model's own unedited captions: only images with a selection are re-captioned
            ex.reduction[(name, a)] = _reduction_run_own_captions(model, test.images, caps, test.truth, sel, alpha=a)
    return ex
