r"""ProjectAway: remove an object from the image tokens by projecting its text embedding out of their
hidden states, and the paper's two uses of it (targeted removal, hallucination reduction).

For a text embedding :math:`\mathbf t` and an image token's hidden state :math:`\mathbf k` at the edited
layer, with :math:`p=\langle\mathbf k,\mathbf t\rangle/\langle\mathbf t,\mathbf t\rangle`,

.. math::

    \mathbf k\leftarrow\mathbf k-\alpha\,p\,\mathbf t\quad\text{if }p>0\text{ (otherwise unchanged)}.

Several objects are removed one after the other. Only the 16 image positions are edited.
``image_layer=-1`` edits the input of block 0 (the projector's output), ``image_layer=l >= 0`` the output
of block ``l``, as :func:`companion_lib.tinyvlm.residual_edit` defines them.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from ..common.device import module_device
from ..common.validation import check_int
from ..tinyvlm import IMAGE_SLICE, OBJECTS, TOKEN_ID, chair, greedy_captions, record_residual, residual_edit
from .lens import object_token

__all__ = ["text_embedding", "project_away", "project_away_edit", "remove_objects", "targeted_removal",
           "select_low_confidence", "select_oracle", "reduction_run"]


def _check_alpha(alpha) -> float:
    alpha = float(alpha)
    if not np.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
    return alpha


def _check_image_layer(model, image_layer) -> int:
    image_layer = check_int(image_layer, "image_layer")
    n = model.n_layers
    if not -1 <= image_layer < n:
        raise ValueError(f"image_layer {image_layer} out of range [-1, {n})")
    return image_layer


@torch.no_grad()
def text_embedding(model, word: str, text_layer: int = 0) -> torch.Tensor:
    r"""The object's text embedding :math:`\mathbf t`: the word's input embedding for ``text_layer=0``, else
    the residual stream after block ``text_layer - 1`` at the word's position when ``<bos> word`` is fed
    alone (no image). The vector is on the model's device."""
    tok = object_token(word)
    text_layer = check_int(text_layer, "text_layer")
    if not 0 <= text_layer <= model.n_layers:
        raise ValueError(f"text_layer {text_layer} out of range [0, {model.n_layers}]")
    emb = model.lm.get_input_embeddings()
    if text_layer == 0:
        return emb.weight[tok].detach().clone()
    ids = torch.tensor([[TOKEN_ID["<bos>"], tok]], device=module_device(model))
    with record_residual(model) as rec:
        model.lm(input_ids=ids, use_cache=False)
    return rec[text_layer][0, -1].clone()


def project_away(h: torch.Tensor, t: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    r"""Remove ``alpha`` times the positive projection of each vector ``h[..., :]`` on ``t``.

    ``t`` is ``(d,)`` (the same for every row) or broadcastable to ``h``; it is moved to ``h``'s device."""
    alpha = _check_alpha(alpha)
    t = torch.as_tensor(t, dtype=h.dtype, device=h.device)
    tt = (t * t).sum(-1, keepdim=True)
    if bool((tt <= 0).any()):
        raise ValueError("t must be non-zero")
    p = (h * t).sum(-1, keepdim=True) / tt
    return h - alpha * torch.clamp(p, min=0.0) * t


def _embedding_table(model, objects_per_image, text_layer) -> tuple[torch.Tensor, torch.Tensor]:
    n = len(objects_per_image)
    K = max([len(o) for o in objects_per_image] + [1])
    d = model.lm.config.hidden_size
    dev = module_device(model)
    cache = {}
    T = torch.zeros(n, K, d, device=dev)
    mask = torch.zeros(n, K, dtype=torch.bool, device=dev)
    for i, objs in enumerate(objects_per_image):
        for j, w in enumerate(sorted(set(objs), key=OBJECTS.index)):
            if w not in cache:
                cache[w] = text_embedding(model, w, text_layer)
            T[i, j] = cache[w]
            mask[i, j] = True
    return T, mask


@contextmanager
def project_away_edit(model, objects_per_image, image_layer: int = -1, alpha: float = 1.0, text_layer: int = 0):
    """A residual hook that applies ProjectAway to the image tokens of each image of a batch, removing the
    objects ``objects_per_image[i]`` (a list of words, possibly empty) from image ``i``, one after the other.
    The edit's text embeddings are built where the model is.

    Every forward pass inside the context must carry exactly ``len(objects_per_image)`` images in order."""
    alpha = _check_alpha(alpha)
    image_layer = _check_image_layer(model, image_layer)
    objects_per_image = [list(o) for o in objects_per_image]
    for objs in objects_per_image:
        for w in objs:
            object_token(w)
    T, mask = _embedding_table(model, objects_per_image, text_layer)
    tt = (T * T).sum(-1, keepdim=True).clamp_min(1e-12)  # (n, K, 1)

    def edit(h):
        if h.shape[0] != T.shape[0]:
            raise ValueError(f"the batch has {h.shape[0]} images, objects_per_image {T.shape[0]}")
        h = h.clone()
        img = h[:, IMAGE_SLICE]
        for j in range(T.shape[1]):
            t = T[:, j][:, None, :]  # (n, 1, d)
            p = (img * t).sum(-1, keepdim=True) / tt[:, j][:, None, :]
            step = alpha * torch.clamp(p, min=0.0) * t
            img = img - step * mask[:, j][:, None, None]
        h[:, IMAGE_SLICE] = img
        return h

    with residual_edit(model, image_layer, edit):
        yield


def remove_objects(model, images, objects_per_image, image_layer: int = -1, alpha: float = 1.0,
                   text_layer: int = 0) -> list:
    """Greedy captions of ``images`` with ``objects_per_image`` projected away (see :func:`project_away_edit`)."""
    if len(objects_per_image) != len(images):
        raise ValueError(f"objects_per_image ({len(objects_per_image)}) and images ({len(images)}) must match")
    with project_away_edit(model, objects_per_image, image_layer, alpha, text_layer):
        return greedy_captions(model, images, batch_size=max(len(images), 1))


def targeted_removal(model, images, captions, truths, image_layer: int = -1, alpha: float = 1.0,
                     text_layer: int = 0) -> dict:
    """Remove the first real object the model mentions in each image and caption the edited image again.

    Reports the share of targets that disappear (``removed``), the share of the other mentioned real objects
    kept (``kept``), the number of *new* hallucinated objects per edited image (``introduced``: objects the
    new caption names that are neither in the image nor in the old caption), the net effect
    ``net = removed - introduced`` (each new hallucination cancels one removal), and the number of images
    with a target (``n``)."""
    idx, targets = [], []
    for i, (cap, truth) in enumerate(zip(captions, truths)):
        real = [w for w in cap if w in truth]
        if real:
            idx.append(i)
            targets.append(real[0])
    if not idx:
        raise ValueError("no caption mentions a real object")
    imgs = np.asarray(images)[idx]
    new = remove_objects(model, imgs, [[t] for t in targets], image_layer, alpha, text_layer)
    removed = float(np.mean([t not in c for t, c in zip(targets, new)]))
    kept_hits = kept_total = introduced = 0
    for j, i in enumerate(idx):
        others = [w for w in captions[i] if w in truths[i] and w != targets[j]]
        kept_total += len(others)
        kept_hits += sum(w in new[j] for w in others)
        introduced += len({w for w in new[j] if w not in truths[i] and w not in captions[i]})
    introduced /= len(idx)
    return {"removed": removed, "kept": kept_hits / max(kept_total, 1), "introduced": introduced,
            "net": removed - introduced, "n": len(idx)}


def select_low_confidence(conf_max: np.ndarray, captions, theta: float) -> list:
    """Self-selection (no labels): the generated objects of each caption whose internal confidence is
    below ``theta``."""
    conf_max = np.asarray(conf_max)
    return [[w for w in cap if conf_max[i, OBJECTS.index(w)] < theta] for i, cap in enumerate(captions)]


def select_oracle(captions, truths) -> list:
    """Oracle selection (what the paper's demo does): the generated objects that are not in the image."""
    return [[w for w in cap if w not in truth] for cap, truth in zip(captions, truths)]


def reduction_run(model, images, captions, truths, selected, image_layer: int = -1, alpha: float = 1.0,
                  text_layer: int = 0) -> dict:
    """CHAIR before and after erasing ``selected[i]`` from image ``i``; ``rel_chair_i`` is the relative
    reduction of CHAIR_i (positive: fewer hallucinations)."""
    return _reduction_report(captions, remove_objects(model, images, selected, image_layer, alpha, text_layer),
                             truths, selected)


def _reduction_report(captions, new, truths, selected) -> dict:
    """CHAIR of the captions before and after (``new``) the edit, and the relative CHAIR_i reduction."""
    before, after = chair(captions, truths), chair(new, truths)
    rel = (before["chair_i"] - after["chair_i"]) / before["chair_i"] if before["chair_i"] > 0 else 0.0
    return {"before": before, "after": after, "rel_chair_i": float(rel),
            "recall_drop": before["recall"] - after["recall"], "n_erased": int(sum(len(s) for s in selected))}


def _reduction_run_own_captions(model, images, captions, truths, selected, image_layer: int = -1,
                                alpha: float = 1.0, text_layer: int = 0) -> dict:
    """:func:`reduction_run` when ``captions`` are the model's own unedited greedy captions of ``images``
    (as in :func:`~companion_lib.vlm_editing.run_experiment`): an image with nothing selected is not
    edited, so its caption after the edit is its caption before, and only the images with a selection are
    captioned again (each image's forward pass does not depend on the other images of its batch). The
    report is :func:`reduction_run`'s; a test checks that both agree."""
    if len(selected) != len(images) or len(captions) != len(images):
        raise ValueError(f"images ({len(images)}), captions ({len(captions)}) and selected ({len(selected)}) "
                         "must match")
    rows = [i for i, s in enumerate(selected) if len(s)]
    new = [list(c) for c in captions]
    if rows:
        edited = remove_objects(model, np.asarray(images)[rows], [selected[i] for i in rows], image_layer, alpha,
                                text_layer)
        for i, c in zip(rows, edited):
            new[i] = c
    return _reduction_report(captions, new, truths, selected)
