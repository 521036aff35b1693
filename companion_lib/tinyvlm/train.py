r"""LLaVA's three training stages, in miniature, deterministic and cached on disk.

1. **Base LM** ("Vicuna"): the decoder alone learns captions from *text sketches* of scenes (the object
   word at its cell, ``<blank>`` elsewhere), with the world's co-occurrence and occlusion statistics. It
   learns both in-context copying and the prior.
2. **Alignment** (LLaVA stage 1): only the patch encoder and projector are trained, the LM frozen, on
   image-caption pairs. The projector is thereby pushed to emit word-like vectors at each patch (what
   makes the logit lens of image tokens work).
3. **Visual instruction tuning** (LLaVA stage 2): everything is trained (the LM at ``lm_lr_mult`` times the
   learning rate).

The loss is the cross-entropy of the caption tokens only (the response, as in LLaVA). During stage 3 a
fixed probe batch is passed through the model every ``probe_every`` steps, and the drift of every head's
attention from the post-alignment model (the row-wise Jensen-Shannon divergence of :func:`js_drift`, the
hallucination-heads paper's Fig. 5) is kept, so that it can be read for any head once the heads are known.

:func:`trained_world` returns the world of a seed: for the book's default seeds and settings the checkpoint
shipped in :mod:`companion_lib.tinyvlm.checkpoint` (the test suite re-trains each one and checks that it is
what :func:`train_world` returns), else :func:`train_world` through :func:`companion_lib.common.disk_cache`, so
a chapter trains a world once per build.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from ..common import disk_cache
from .hooks import record_attention
from .model import TEXT_START, TinyVLM, _padded_captions, as_patches, caption_batch, tiny_llama_config
from .world import WorldConfig, encode_caption, make_split, sketch_tokens

__all__ = ["STAGES", "TrainConfig", "World", "train_world", "stage_prefixes", "trained_world", "build_model",
           "caption_loss", "js_divergence", "js_drift"]


@dataclass(frozen=True)
class TrainConfig:
    """Sizes and learning rates of the three stages (the defaults are the book's scale)."""

    n_text: int = 20000
    n_image: int = 6000
    text_steps: int = 300
    align_steps: int = 150
    tune_steps: int = 250
    batch_size: int = 64
    lr_text: float = 3e-3
    lr_align: float = 3e-3
    lr_tune: float = 1e-3
    lm_lr_mult: float = 1.0
    n_layer: int = 4
    n_head: int = 8
    hidden_size: int = 64
    probe_every: int = 25
    n_probe: int = 32

    def __post_init__(self) -> None:
        for name in ("n_text", "n_image", "batch_size", "n_layer", "n_head", "hidden_size", "probe_every", "n_probe"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        for name in ("text_steps", "align_steps", "tune_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be a non-negative int, got {v!r}")


@dataclass
class World:
    """What training returns: weights after each stage, the probe batch, the heads' attention drift and losses."""

    seed: int
    config: dict
    world_config: dict
    base_state: dict        # after stage 1 (the base LM; encoder/projector untrained)
    aligned_state: dict     # after stage 2 (base LM + stage-1 projector: the paper's "pretrained" model)
    final_state: dict       # after stage 3
    probe_images: np.ndarray
    probe_captions: list
    probe_steps: list
    probe_drift: np.ndarray  # (len(probe_steps), layers, heads): js_drift of the probe batch's attention maps
    losses: dict


def caption_loss(model: TinyVLM, ids: torch.Tensor, labels: torch.Tensor, patches=None, sketch_ids=None):
    """Mean cross-entropy of the caption tokens (labels from :func:`caption_batch`)."""
    logits = model(ids, patches=patches, sketch_ids=sketch_ids).logits[:, TEXT_START:TEXT_START + ids.shape[1]]
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)


def _schedule(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(total - warmup, 1)
    return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def _state(model: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _run_stage(model, groups, steps, batch_size, sample, gen, losses, on_step=None, stop_after=None):
    """AdamW over ``groups`` for ``steps`` steps (linear warm-up over 5%, then cosine); ``stop_after`` ends the
    stage early with the same schedule (the prefixes that :func:`stage_prefixes` replays)."""
    if steps == 0:
        return
    opt = torch.optim.AdamW(groups, weight_decay=0.0)
    base = [g["lr"] for g in opt.param_groups]
    warm = max(1, steps // 20)
    params = [p for g in groups for p in g["params"]]
    for step in range(steps if stop_after is None else min(steps, stop_after)):
        f = _schedule(step, steps, warm)
        for g, lr in zip(opt.param_groups, base):
            g["lr"] = lr * f
        idx = torch.randint(0, sample.n, (batch_size,), generator=gen)
        loss = sample(idx)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(step + 1)


class _Sampler:
    """The loss of a batch of examples ``idx``; the captions are padded once (to the longest of all), and
    each batch is cut to its own longest caption, so it equals :func:`caption_batch` of its captions."""

    def __init__(self, model, captions, patches=None, sketches=None):
        self.model, self.captions, self.patches, self.sketches = model, captions, patches, sketches
        self.n = len(captions)
        ids, labels, lengths = _padded_captions(captions)
        self._ids, self._labels = torch.from_numpy(ids), torch.from_numpy(labels)
        self._lengths = torch.from_numpy(lengths)

    def batch(self, idx) -> tuple[torch.Tensor, torch.Tensor]:
        """``caption_batch`` of the captions ``idx``, from the padded table."""
        T = int(self._lengths[idx].max())
        return self._ids[idx, :T].contiguous(), self._labels[idx, :T].contiguous()

    def __call__(self, idx):
        ids, labels = self.batch(idx)
        if self.patches is not None:
            return caption_loss(self.model, ids, labels, patches=self.patches[idx])
        return caption_loss(self.model, ids, labels, sketch_ids=self.sketches[idx])


@torch.no_grad()
def _probe(model, patches, ids) -> np.ndarray:
    model.eval()
    with record_attention(model) as rec:
        model(ids, patches=patches)
    model.train()
    return np.stack([r[0].numpy() for r in rec]).astype(np.float16)


def js_divergence(p: np.ndarray, q: np.ndarray, axis: int = -1) -> np.ndarray:
    r"""Jensen-Shannon divergence (natural log) between distributions along ``axis``."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {p.shape} and {q.shape}")
    m = 0.5 * (p + q)

    def kl(a, b):
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(a > 0, a * (np.log(a) - np.log(b)), 0.0)
        return t.sum(axis)

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def js_drift(probe_attention: list, caption_lengths) -> np.ndarray:
    r"""The hallucination-heads paper's Fig. 5: row-wise JS divergence of every head's attention from the
    first probe (the post-alignment model), averaged over the text query rows of each probe caption and over
    captions. ``probe_attention[k]`` has shape ``(layers, n, heads, S, S)``; returns
    ``(len(probe_attention), L, H)``. :func:`train_world` keeps this for its probe batch (``World.probe_drift``)."""
    lengths = np.asarray(caption_lengths)
    ref = np.asarray(probe_attention[0], dtype=np.float64)
    out = []
    for att in probe_attention:
        att = np.asarray(att, dtype=np.float64)
        js = js_divergence(att, ref)  # (L, n, H, S)
        vals = np.zeros(js.shape[0:1] + js.shape[2:3])
        for i, n_text in enumerate(lengths):
            vals += js[:, i, :, TEXT_START:TEXT_START + int(n_text) - 1].mean(-1)
        out.append(vals / len(lengths))
    return np.stack(out)


def build_model(state: dict, config: TrainConfig | dict | None = None) -> TinyVLM:
    """A :class:`TinyVLM` with the given weights (``config`` sets the decoder's size), in evaluation mode
    and with gradients switched off (an analysis model; :func:`~companion_lib.hallucination_heads.targeted_finetune`
    switches on what it trains in its own copy)."""
    cfg = config if isinstance(config, TrainConfig) else TrainConfig(**(config or {}))
    model = TinyVLM(tiny_llama_config(hidden_size=cfg.hidden_size, n_layer=cfg.n_layer, n_head=cfg.n_head))
    model.load_state_dict(state)
    model.eval()
    model.requires_grad_(False)
    return model


STAGES = ("text", "align", "tune")


class _Recipe:
    """The data, the initial model and each stage's optimiser groups of :func:`train_world` for one seed.

    :func:`train_world` runs the three stages in order; :func:`stage_prefixes` replays the first steps of one
    stage from given start weights. Both draw their batches from one ``torch.Generator`` seeded with the
    world's seed, which each stage advances by one draw per step.
    """

    def __init__(self, seed: int, config: TrainConfig, world: WorldConfig) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        self.seed, self.config, self.world = int(seed), config, world
        rng = np.random.default_rng([int(seed), 16])
        text = make_split(config.n_text, rng, "natural", world)
        pairs = make_split(config.n_image, rng, "natural", world)
        self.pairs = pairs
        self.text_caps = [encode_caption(s.mentioned) for s in text.scenes]
        self.text_sketch = torch.tensor([sketch_tokens(s) for s in text.scenes], dtype=torch.long)
        self.pair_caps = [encode_caption(s.mentioned) for s in pairs.scenes]
        self.patches = as_patches(pairs.images)
        self.restart()

    def restart(self) -> None:
        """A freshly initialised model and batch generator (the state at the start of the text stage)."""
        c = self.config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.model = TinyVLM(tiny_llama_config(hidden_size=c.hidden_size, n_layer=c.n_layer, n_head=c.n_head))
        self.gen = torch.Generator().manual_seed(self.seed)
        self.model.train()

    def steps(self, stage: str) -> int:
        return {"text": self.config.text_steps, "align": self.config.align_steps,
                "tune": self.config.tune_steps}[stage]

    def prepare(self, stage: str) -> tuple[list, "_Sampler"]:
        """Set which parameters train in ``stage``; its optimiser groups and its batch sampler."""
        c, model = self.config, self.model
        vision = list(model.encoder.parameters()) + list(model.projector.parameters())
        lm = list(model.lm.parameters())
        for p in lm:
            p.requires_grad_(stage != "align")          # alignment: the LM is frozen
        if stage == "text":                             # the base LM reads text sketches
            return ([{"params": lm, "lr": c.lr_text}],
                    _Sampler(model, self.text_caps, sketches=self.text_sketch))
        groups = ([{"params": vision, "lr": c.lr_align}] if stage == "align" else
                  [{"params": vision, "lr": c.lr_tune}, {"params": lm, "lr": c.lr_tune * c.lm_lr_mult}])
        return groups, _Sampler(model, self.pair_caps, patches=self.patches)

    def run(self, stage: str, losses: list, on_step=None, stop_after=None) -> None:
        groups, sampler = self.prepare(stage)
        _run_stage(self.model, groups, self.steps(stage), self.config.batch_size, sampler, self.gen, losses,
                   on_step, stop_after)


def train_world(seed: int = 0, config: TrainConfig = TrainConfig(), world: WorldConfig = WorldConfig()) -> World:
    """Run the three stages from scratch (deterministic for a given seed on one thread)."""
    recipe = _Recipe(seed, config, world)
    model, pair_caps, patches = recipe.model, recipe.pair_caps, recipe.patches
    losses: dict = {stage: [] for stage in STAGES}

    recipe.run("text", losses["text"])       # stage 1: base LM on text sketches
    base_state = _state(model)
    recipe.run("align", losses["align"])     # stage 2: alignment, LM frozen
    aligned_state = _state(model)

    # stage 3: visual instruction tuning, with attention probes
    probe_ids, _ = caption_batch(pair_caps[:config.n_probe])
    probe_patches = patches[:config.n_probe]
    probe_steps, probe_att = [0], [_probe(model, probe_patches, probe_ids)]

    def on_step(step):
        if step % config.probe_every == 0 or step == config.tune_steps:
            probe_steps.append(step)
            probe_att.append(_probe(model, probe_patches, probe_ids))

    recipe.run("tune", losses["tune"], on_step)
    model.eval()
    return World(seed=int(seed), config=asdict(config), world_config=asdict(world), base_state=base_state,
                 aligned_state=aligned_state, final_state=_state(model),
                 probe_images=recipe.pairs.images[:config.n_probe], probe_captions=pair_caps[:config.n_probe],
                 probe_steps=probe_steps, probe_drift=js_drift(probe_att, [len(c) for c in pair_caps[:config.n_probe]]),
                 losses=losses)


def stage_prefixes(world: World, steps: int = 10) -> dict:
    """The losses of the first ``steps`` steps of each stage of :func:`train_world` for ``world``'s seed and
    settings, each stage started from ``world``'s own weights at that stage's start (the initialisation for
    ``"text"``, ``world.base_state`` for ``"align"``, ``world.aligned_state`` for ``"tune"``), with the same
    data, optimiser, schedule and batches: ``{stage: [loss, ...]}``.

    Training is chaotic over hundreds of steps, but a short prefix is not: on any processor it gives the
    losses that :func:`train_world` recorded for those steps up to rounding (measured between an AVX-512 and
    an AVX2 processor: a relative 3.4e-6 at most over 10 steps, growing to 3e-4 over 20), so it checks a stored
    world's data and recipe stage by stage where the whole run cannot be repeated bit for bit.
    """
    if not isinstance(world, World):
        raise TypeError(f"world must be a World, got {type(world).__name__}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    config = TrainConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in world.config.items()})
    settings = WorldConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in world.world_config.items()})
    recipe = _Recipe(world.seed, config, settings)
    starts = {"text": None, "align": world.base_state, "tune": world.aligned_state}
    out = {}
    for stage in STAGES:
        recipe.restart()
        if starts[stage] is not None:
            recipe.model.load_state_dict(starts[stage])
        for earlier in STAGES[:STAGES.index(stage)]:   # advance the batch generator past the earlier stages
            n = len(recipe.text_caps) if earlier == "text" else len(recipe.pair_caps)
            for _ in range(recipe.steps(earlier)):
                torch.randint(0, n, (config.batch_size,), generator=recipe.gen)
        out[stage] = []
        recipe.run(stage, out[stage], stop_after=steps)
    return out


def _train_cached(seed: int, config: dict, world: dict) -> World:
    return train_world(seed, TrainConfig(**config), WorldConfig(**world))


def trained_world(seed: int = 0, config: TrainConfig = TrainConfig(), world: WorldConfig = WorldConfig()) -> World:
    """The world of ``seed``: the shipped checkpoint when there is one for this seed and exactly these settings
    (:func:`~companion_lib.tinyvlm.checkpoint.shipped_world`; the test suite re-trains it and checks that it is
    what :func:`train_world` returns), else :func:`train_world` through the book's disk cache (namespace
    ``tinyvlm``), trained once per build."""
    from .checkpoint import shipped_world  # (imports this module; it checks the seed)

    shipped = shipped_world(seed, config, world)
    if shipped is not None:
        return shipped
    cached = disk_cache("tinyvlm").cache(_train_cached)
    return cached(int(seed), asdict(config), asdict(world))
