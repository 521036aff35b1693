r"""The logit lens on image tokens: per-layer, per-patch word probabilities, an object's internal
confidence, hallucination detection with a calibrated threshold, and localisation maps.

Layer index ``l`` of a lens tensor means the residual stream at the *input* of block ``l`` for ``l < L``
and the output of the last block for ``l = L``; so ``l = 0`` is the projector's output (the image tokens
as they enter the language model) and there are ``L + 1`` lens layers. The lens is

.. math::

    P_l(\cdot\mid t_m)=\operatorname{softmax}\big(W_U\,\mathrm{RMSNorm}(h_l(t_m))\big),

with the model's final norm (``use_final_norm=False`` drops it, as the paper's code does for LLaVA).
"""

from __future__ import annotations

import numpy as np
import torch

from ..common.device import module_device
from ..common.validation import check_int
from ..tinyvlm import IMAGE_SLICE, OBJECTS, TOKEN_ID, N_PATCHES, VOCAB, as_patches, greedy_captions, record_residual

__all__ = [
    "object_token", "record_residual", "image_hidden_states", "lens_probs", "lens_confidence",
    "internal_confidence", "object_scores", "auroc", "calibrate_threshold", "detection_rates",
    "localisation_maps", "localisation_accuracy", "output_probability",
]

OBJECT_IDS = torch.tensor([TOKEN_ID[w] for w in OBJECTS])


def object_token(word: str) -> int:
    """The token id of an object word; ``ValueError`` naming ``word`` if it is not an object of the world."""
    if word not in OBJECTS:
        raise ValueError(f"word {word!r} is not an object in the vocabulary; the objects are {', '.join(OBJECTS)}")
    return TOKEN_ID[word]


@torch.no_grad()
def image_hidden_states(model, images) -> torch.Tensor:
    """Hidden states of the 16 image positions at every lens layer: ``(L + 1, n, 16, d)``.

    Image positions come before any caption word, so (causal attention) they do not depend on the
    caption: one forward pass with the prompt ``describe`` suffices. It runs where the model is, and the
    hidden states stay there (what :func:`lens_probs` reads).
    """
    dev = module_device(model)
    patches = as_patches(images).to(dev)
    ids = torch.full((patches.shape[0], 1), TOKEN_ID["describe"], dtype=torch.long, device=dev)
    with record_residual(model) as rec:
        model(ids, patches=patches)
    return torch.stack([h[:, IMAGE_SLICE] for h in rec])


@torch.no_grad()
def lens_probs(model, hidden: torch.Tensor, use_final_norm: bool = True) -> torch.Tensor:
    """The logit lens: softmax over the vocabulary of ``W_U norm(h)`` for hidden states ``(..., d)``, computed
    where the model is (``hidden`` is moved there, and so are the probabilities)."""
    hidden = hidden.to(module_device(model))
    if use_final_norm:
        hidden = model.lm.model.norm(hidden)
    return torch.softmax(model.lm.lm_head(hidden), dim=-1)


@torch.no_grad()
def lens_confidence(model, images, use_final_norm: bool = True) -> np.ndarray:
    r"""Lens probabilities of the ten object words at every layer and image patch:
    ``(n, L + 1, 16, 10)``, entry ``[i, l, m, k]`` = :math:`P_l(\text{OBJECTS}[k]\mid t_m)` for image ``i``
    (computed where the model is; the array is on the CPU)."""
    return _confidence_of_hidden(model, image_hidden_states(model, images), use_final_norm)


def _confidence_of_hidden(model, H: torch.Tensor, use_final_norm: bool) -> np.ndarray:
    """:func:`lens_confidence` from the hidden states ``H`` of :func:`image_hidden_states`."""
    P = lens_probs(model, H, use_final_norm)
    return P[..., OBJECT_IDS.to(P.device)].permute(1, 0, 2, 3).cpu().numpy()


_STOP = frozenset({TOKEN_ID["."], TOKEN_ID["<eos>"], TOKEN_ID["<pad>"]})   # where decode_caption stops


class _RecordDecoding:
    """Record every call of the language model during greedy captioning: the length of its input and its
    last-position logits (copied to the CPU, where they are read back one by one), so that the output
    probability of each generated token can be read back."""

    def __init__(self, model) -> None:
        self.lm, self.calls, self.handle = model.lm, [], None

    def __enter__(self):
        def hook(module, args, kwargs, output):
            x = kwargs.get("inputs_embeds")
            self.calls.append((int(x.shape[1]), output.logits[:, -1].detach().float().cpu()))
        self.handle = self.lm.register_forward_hook(hook, with_kwargs=True)
        return self

    def __exit__(self, *exc) -> None:
        self.handle.remove()

    def object_probs(self, captions: list) -> np.ndarray:
        r"""``(n, 10)``: for each caption, the model's output probability of each object word at the step that
        first generated it (0 for an object the caption does not name)."""
        batches = []
        for length, logits in self.calls:
            if length > 1:                       # a prompt pass starts a new batch
                batches.append([])
            batches[-1].append(logits)
        out = np.zeros((len(captions), len(OBJECTS)))
        i = 0
        for steps in batches:
            probs = [torch.softmax(l, dim=-1) for l in steps]
            for b in range(steps[0].shape[0]):
                words = []
                for p in probs:
                    tok = int(p[b].argmax())
                    if tok in _STOP:
                        break
                    w = VOCAB[tok]
                    if w in OBJECTS:
                        if w not in words:
                            out[i, OBJECTS.index(w)] = float(p[b, tok])
                        words.append(w)
                if words != list(captions[i]):
                    raise RuntimeError(f"the recorded decoding of image {i} ({words}) is not its caption "
                                       f"({captions[i]})")
                i += 1
        if i != len(captions):
            raise RuntimeError("the recorded decoding passes do not cover the images")
        return out


@torch.no_grad()
def output_probability(model, images) -> tuple[list, np.ndarray]:
    r"""The paper's competitor of the internal confidence: the model's own output probability of each object
    word it generates. Returns ``(captions, probs)`` with ``probs[i, k]`` the softmax probability of
    ``OBJECTS[k]`` at the greedy step that first generated it in caption ``i`` (0 if not generated). The
    decoding runs where the model is; the array is on the CPU."""
    with _RecordDecoding(model) as rec:
        captions = greedy_captions(model, images)
    return captions, rec.object_probs(captions)


@torch.no_grad()
def _captions_and_confidence(model, images, use_final_norm: bool = True, output_probs: bool = False):
    """``(greedy_captions(model, images), lens_confidence(model, images))`` with one prompt pass per batch,
    plus :func:`output_probability`'s array when ``output_probs``.

    The first pass of the captioning runs the prompt ``describe`` after the image, the very pass of
    :func:`image_hidden_states`; its residual stream is recorded there instead of being computed a second
    time (each image's pass does not depend on the other images of its batch; a test checks that both
    results equal the separate calls')."""
    n_lens = model.n_layers + 1
    with record_residual(model) as rec, _RecordDecoding(model) as dec:
        captions = greedy_captions(model, images)
    # the prompt passes (bos, 16 image tokens, describe); the cached decoding passes feed one token
    prompt = [h for h in rec if h.shape[1] == IMAGE_SLICE.stop + 1]
    passes = [prompt[k:k + n_lens] for k in range(0, len(prompt), n_lens)]
    if not passes or len(prompt) % n_lens or sum(p[0].shape[0] for p in passes) != len(captions):
        raise RuntimeError("the recorded prompt passes do not cover the images")
    H = torch.stack([torch.cat([p[l] for p in passes])[:, IMAGE_SLICE] for l in range(n_lens)])
    conf = _confidence_of_hidden(model, H, use_final_norm)
    if output_probs:
        return captions, conf, dec.object_probs(captions)
    return captions, conf


def _check_conf(conf) -> np.ndarray:
    conf = np.asarray(conf)
    if conf.ndim != 4 or conf.shape[2] != N_PATCHES or conf.shape[3] != len(OBJECTS):
        raise ValueError(f"conf must have shape (n, layers, {N_PATCHES}, {len(OBJECTS)}), got {conf.shape}")
    return conf


def _layer_sel(conf: np.ndarray, layers) -> np.ndarray:
    n_lens = conf.shape[1]
    if layers is None:
        return conf
    layers = [check_int(l, "layers") for l in np.atleast_1d(layers)]
    for l in layers:
        if not 0 <= l < n_lens:
            raise ValueError(f"layers entry {l} out of range [0, {n_lens})")
    return conf[:, layers]


def internal_confidence(conf, layers=None) -> np.ndarray:
    r"""An object's internal confidence :math:`c_o=\max_l\max_m P_l(o\mid t_m)`: ``(n, 10)``.

    ``layers`` restricts the max to some lens layers (``None``: all, the paper's definition)."""
    return _layer_sel(_check_conf(conf), layers).max(axis=(1, 2))


def object_scores(conf_max: np.ndarray, captions, truths) -> tuple[np.ndarray, np.ndarray]:
    """The internal confidence of every generated object, split into (real, hallucinated) arrays.

    ``conf_max`` is :func:`internal_confidence` ``(n, 10)``; ``captions`` lists of object words;
    ``truths`` the ground-truth object sets."""
    conf_max = np.asarray(conf_max)
    if len(captions) != conf_max.shape[0] or len(truths) != conf_max.shape[0]:
        raise ValueError("conf_max, captions and truths must describe the same images")
    real, hal = [], []
    for i, (cap, truth) in enumerate(zip(captions, truths)):
        for w in dict.fromkeys(cap):   # each object once, in caption order (a set's order varies by process)
            (real if w in truth else hal).append(conf_max[i, OBJECTS.index(w)])
    return np.asarray(real, dtype=float), np.asarray(hal, dtype=float)


def auroc(pos, neg) -> float:
    """Area under the ROC curve of scores ``pos`` (positives) against ``neg``: the probability that a
    random positive outranks a random negative, ties counting one half (Mann-Whitney)."""
    pos, neg = np.asarray(pos, dtype=float).ravel(), np.asarray(neg, dtype=float).ravel()
    if pos.size == 0 or neg.size == 0:
        raise ValueError(f"auroc needs positives and negatives, got {pos.size} and {neg.size}")
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (pos.size * neg.size))


def calibrate_threshold(real_scores, q: float = 0.02) -> float:
    r"""The threshold :math:`\theta` below which a generated object is flagged as hallucinated: the
    ``q``-quantile of the confidences of *real* generated objects on a held-out calibration split, so that
    about a share ``q`` of real objects is flagged."""
    real_scores = np.asarray(real_scores, dtype=float).ravel()
    if real_scores.size == 0:
        raise ValueError("real_scores is empty: the calibration split has no real generated objects")
    q = float(q)
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in [0, 1], got {q}")
    return float(np.quantile(real_scores, q))


def detection_rates(real, hal, theta: float) -> dict:
    """Share of hallucinated objects flagged (``c < theta``) and share of real objects falsely flagged."""
    real, hal = np.asarray(real, dtype=float), np.asarray(hal, dtype=float)
    return {"hal_flagged": float((hal < theta).mean()) if hal.size else float("nan"),
            "real_flagged": float((real < theta).mean()) if real.size else float("nan")}


def localisation_maps(conf, word: str, layers=None) -> np.ndarray:
    r"""Per-patch confidence :math:`M_o[m]=\max_l P_l(o\mid t_m)` of one object, as ``(n, 4, 4)`` grids."""
    object_token(word)
    k = OBJECTS.index(word)
    sel = _layer_sel(_check_conf(conf), layers)
    side = int(round(np.sqrt(N_PATCHES)))
    return sel[..., k].max(axis=1).reshape(-1, side, side)


def localisation_accuracy(conf, scenes, layers=None) -> float:
    """Share of (image, drawn object) pairs whose arg-max patch of :func:`localisation_maps` is the
    object's cell (chance: 1/16)."""
    conf = _check_conf(conf)
    if len(scenes) != conf.shape[0]:
        raise ValueError(f"scenes ({len(scenes)}) and conf ({conf.shape[0]}) must describe the same images")
    sel = _layer_sel(conf, layers).max(axis=1)  # (n, 16, 10)
    hits = total = 0
    for i, s in enumerate(scenes):
        for cell, w in s.drawn.items():
            total += 1
            hits += int(np.argmax(sel[i, :, OBJECTS.index(w)]) == int(cell))
    if total == 0:
        raise ValueError("scenes contain no drawn objects")
    return hits / total
