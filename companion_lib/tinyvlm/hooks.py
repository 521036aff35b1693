r"""Interventions on the tiny VLM (or any Llama-family Hugging Face decoder), as context managers that
always clean up.

* :func:`head_mask` -- zero (or scale) chosen heads' outputs :math:`z^{(l,h)}` with a forward pre-hook on
  ``self_attn.o_proj``, as the paper's code does;
* :func:`module_ablation` -- zero a whole attention block (MHA) or MLP output of one layer;
* :func:`attention_edit` -- pass every post-softmax attention map through a function (the basis of
  :func:`reweight_text`, :func:`reweight_image` and :func:`adaptive_deactivation`);
* :func:`residual_edit` -- edit the residual stream at the input of block 0 (``layer=-1``) or the
  output of block ``layer``;
* :func:`record_attention` -- collect every layer's attention weights;
* :func:`record_residual` -- collect the residual stream (the input of block 0 and every block's output),
  what the logit lens of chapter 17 reads and what chapter 16's exercises probe.

All of them work through public hooks of :mod:`torch.nn` and the model's registered attention function
(:data:`~companion_lib.tinyvlm.model.ATTN_IMPLEMENTATION`), so the same code runs on a real LLaVA whose
decoder is configured with that attention implementation.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable

import torch

from .model import TEXT_START, IMAGE_SLICE

__all__ = [
    "check_heads", "head_mask", "module_ablation", "attention_edit", "reweight_text", "reweight_image",
    "adaptive_deactivation", "residual_edit", "record_attention", "record_residual",
]


_LAYER_PATHS = (("layers",), ("model", "layers"), ("model", "language_model", "layers"))


def _layers(model):
    """The decoder blocks: ``model.layers`` (:class:`TinyVLM`, a bare ``LlamaModel``), ``model.model.layers``
    (``LlamaForCausalLM``) or ``model.model.language_model.layers`` (``LlavaForConditionalGeneration``)."""
    for path in _LAYER_PATHS:
        obj = model
        for name in path:
            obj = getattr(obj, name, None)
        if isinstance(obj, torch.nn.ModuleList):
            return obj
    raise TypeError(f"cannot find the decoder blocks of {type(model).__name__} (expected a TinyVLM, a Llama "
                    f"decoder or a LlavaForConditionalGeneration)")


def _shape(model) -> tuple[int, int]:
    layers = _layers(model)
    cfg = layers[0].self_attn.config
    return len(layers), cfg.num_attention_heads


def check_heads(model, heads: Iterable) -> list:
    """Validate ``(layer, head)`` pairs against the model; return them as a list of int tuples."""
    n_layer, n_head = _shape(model)
    out = []
    for item in heads:
        try:
            l, h = (int(v) for v in item)
        except (TypeError, ValueError):
            raise ValueError(f"heads must be (layer, head) pairs, got {item!r}") from None
        if not 0 <= l < n_layer:
            raise ValueError(f"layer index {l} out of range [0, {n_layer})")
        if not 0 <= h < n_head:
            raise ValueError(f"head index {h} out of range [0, {n_head})")
        out.append((l, h))
    return out


def _check_alpha(alpha: float, lo: int = 0, hi: int = 1) -> float:
    alpha = float(alpha)
    if not lo <= alpha <= hi:
        raise ValueError(f"alpha must lie in [{lo}, {hi}], got {alpha}")
    return alpha


@contextmanager
def head_mask(model, heads: Iterable, scale: float = 0.0):
    r"""Multiply the outputs :math:`z^{(l,h)}` of the chosen heads by ``scale`` (0: zero-ablation)."""
    layers = _layers(model)
    handles = []
    for l, hs in _head_index(check_heads(model, heads)).items():
        attn = layers[l].self_attn
        dh = attn.head_dim

        def pre_hook(module, args, hs=hs, dh=dh):
            x = args[0].clone()
            for h in hs:
                x[..., h * dh:(h + 1) * dh] *= scale
            return (x,) + tuple(args[1:])

        handles.append(attn.o_proj.register_forward_pre_hook(pre_hook))
    try:
        yield
    finally:
        for hd in handles:
            hd.remove()


@contextmanager
def module_ablation(model, layer: int, kind: str):
    """Zero the output of layer ``layer``'s whole attention block (``kind="mha"``) or MLP (``"mlp"``)."""
    n_layer, _ = _shape(model)
    if not 0 <= int(layer) < n_layer:
        raise ValueError(f"layer index {layer} out of range [0, {n_layer})")
    block = _layers(model)[int(layer)]
    if kind == "mha":
        def hook(module, args, output):
            return (torch.zeros_like(output[0]),) + tuple(output[1:])
        handle = block.self_attn.register_forward_hook(hook)
    elif kind == "mlp":
        handle = block.mlp.register_forward_hook(lambda module, args, output: torch.zeros_like(output))
    else:
        raise ValueError(f"kind must be 'mha' or 'mlp', got {kind!r}")
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def attention_edit(model, edit: Callable):
    """Apply ``edit(A, layer_idx) -> A`` to the post-softmax attention weights of every layer.

    Rows of ``A`` are absolute query positions; while decoding with a key-value cache the attention function
    places the new rows in a full map for the edit, unless the edit has a true attribute ``rows``: then it is
    called as ``edit(A_rows, layer_idx, row0)`` on the new rows alone, ``row0`` the position of the first."""
    if not callable(edit):
        raise TypeError("edit must be callable")
    mods = [layer.self_attn for layer in _layers(model)]
    for m in mods:
        m._tinyvlm_edits = list(getattr(m, "_tinyvlm_edits", ())) + [edit]
    try:
        yield
    finally:
        for m in mods:
            edits = [e for e in getattr(m, "_tinyvlm_edits", ()) if e is not edit]
            if edits:
                m._tinyvlm_edits = edits
            elif hasattr(m, "_tinyvlm_edits"):
                del m._tinyvlm_edits


def _head_index(heads: list) -> dict:
    by_layer: dict = {}
    for l, h in heads:
        by_layer.setdefault(l, []).append(h)
    return by_layer


def _head_attention_edit(model, heads: Iterable, fn: Callable):
    """The shared prologue of the head-level attention edits: validate ``heads``, group them by layer,
    and return an :func:`attention_edit` context that applies ``fn(A_sub, row0) -> A_sub`` to the attention
    weights ``A[:, heads_of_layer]`` of the chosen heads only (a copy of ``A``; other heads untouched).

    ``fn`` edits each query row on its own, by its absolute position: row ``i`` of ``A_sub`` is query position
    ``row0 + i``. The edit is marked ``rows``, so with a key-value cache the attention function hands it the
    new rows alone (``row0`` > 0) instead of a full map (:func:`~companion_lib.tinyvlm.model._tinyvlm_attention`)."""
    by_layer = _head_index(check_heads(model, heads))

    def edit(A, layer_idx, row0=0):
        hs = by_layer.get(layer_idx)
        if not hs:
            return A
        A = A.clone()
        A[:, hs] = fn(A[:, hs], row0)
        return A

    edit.rows = True
    return attention_edit(model, edit)


@contextmanager
def reweight_text(model, heads: Iterable, alpha: float, text_start: int = TEXT_START):
    r"""Fig. 6a: :math:`A_{q,j}\leftarrow\alpha A_{q,j}` for post-image text keys :math:`j\ge s+n_v` in the
    chosen heads, for every query row from ``text_start`` on; no renormalisation. ``alpha`` in [0, 1]."""
    alpha = _check_alpha(alpha)

    def fn(A, row0):
        A[:, :, max(text_start - row0, 0):, text_start:] *= alpha
        return A

    with _head_attention_edit(model, heads, fn):
        yield


@contextmanager
def reweight_image(model, heads: Iterable, alpha: float, image_slice: slice = IMAGE_SLICE,
                   text_start: int = TEXT_START):
    r"""Fig. 6b: :math:`A_{q,j}\leftarrow\alpha A_{q,j}` for image keys in the chosen heads (``alpha`` >= 1)."""
    alpha = float(alpha)
    if alpha < 1.0:
        raise ValueError(f"alpha must be >= 1 for image up-scaling, got {alpha}")

    def fn(A, row0):
        A[:, :, max(text_start - row0, 0):, image_slice] *= alpha
        return A

    with _head_attention_edit(model, heads, fn):
        yield


@contextmanager
def adaptive_deactivation(model, heads: Iterable, tau: float, text_start: int = TEXT_START):
    r"""AD-HH: in each chosen head and each query row :math:`t\ge s+n_v`, with
    :math:`m_h(t)=\sum_{j\ge s+n_v}A_{t,j}`, zero the text weights when :math:`m_h(t)\ge\tau` (no
    renormalisation). ``tau`` in [0, 1]; ``tau=0`` always deactivates (Fig. 6a with :math:`\alpha=0`)."""
    tau = float(tau)
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must lie in [0, 1], got {tau}")

    def fn(A, row0):
        rows = slice(max(text_start - row0, 0), None)
        block = A[:, :, rows, text_start:]
        mass = block.sum(-1, keepdim=True)
        A[:, :, rows, text_start:] = block * (mass < tau).to(A.dtype)
        return A

    with _head_attention_edit(model, heads, fn):
        yield


@contextmanager
def residual_edit(model, layer: int, edit: Callable):
    """Edit the residual stream: ``edit(h) -> h`` on the input of block 0 (``layer=-1``) or the output of
    block ``layer`` (``0 <= layer < n_layers``), for hidden states of shape ``(batch, seq, d)``."""
    n_layer, _ = _shape(model)
    layer = int(layer)
    if not -1 <= layer < n_layer:
        raise ValueError(f"layer index {layer} out of range [-1, {n_layer})")
    if not callable(edit):
        raise TypeError("edit must be callable")
    layers = _layers(model)
    if layer == -1:
        def pre_hook(module, args, kwargs):
            if args:
                return (edit(args[0]),) + tuple(args[1:]), kwargs
            kwargs = dict(kwargs)
            kwargs["hidden_states"] = edit(kwargs["hidden_states"])
            return args, kwargs
        handle = layers[0].register_forward_pre_hook(pre_hook, with_kwargs=True)
    else:
        def hook(module, args, output):
            if isinstance(output, tuple):
                return (edit(output[0]),) + tuple(output[1:])
            return edit(output)
        handle = layers[layer].register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def record_attention(model):
    """Record attention weights: yields a list whose entry ``l`` is a list of tensors
    ``(batch, heads, queries, keys)``, one per forward pass, for layer ``l``."""
    mods = [layer.self_attn for layer in _layers(model)]
    store = [[] for _ in mods]
    for m, s in zip(mods, store):
        m._tinyvlm_record = s
    try:
        yield store
    finally:
        for m in mods:
            if hasattr(m, "_tinyvlm_record"):
                del m._tinyvlm_record


@contextmanager
def record_residual(model):
    """Record the residual stream: yields a list that receives the input of block 0 and the output of
    every block (``L + 1`` tensors ``(batch, seq, d)`` per forward pass)."""
    store: list = []
    layers = _layers(model)

    def pre(module, args, kwargs):
        h = args[0] if args else kwargs["hidden_states"]
        store.append(h.detach())

    def post(module, args, output):
        store.append((output[0] if isinstance(output, tuple) else output).detach())

    handles = [layers[0].register_forward_pre_hook(pre, with_kwargs=True)]
    handles += [layer.register_forward_hook(post) for layer in layers]
    try:
        yield store
    finally:
        for h in handles:
            h.remove()
