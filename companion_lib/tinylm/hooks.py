r"""Where a causal LM keeps its blocks, and hooks to read, replace and differentiate its hidden states.

The residual stream of a model with :math:`L` blocks has :math:`L+1` *layers* here:
layer :math:`0` is the input of the first block (token plus position embeddings for GPT-2, token
embeddings for Llama) and layer :math:`\ell\ge1` is the output of block :math:`\ell-1`. Layer :math:`L`
is the output of the last block *before* the final norm (Hugging Face's ``hidden_states[-1]`` is after
it). Decoding a state means applying the final norm and the unembedding (:func:`decode_hidden`).

* :func:`layer_adapter` -- the blocks, final norm and unembedding of any Hugging Face causal LM
  (``transformer.h``/``ln_f`` for GPT-2, ``model.layers``/``model.norm`` for Llama, ...).
* :func:`capture_activations` -- a context manager that records layer states during forward passes.
* :func:`patch_activations` -- a context manager that replaces a layer's state (at one position per row,
  or everywhere) and lets the model run on from there; :func:`run_from_layer` uses it.
* :func:`hidden_jacobian` -- :math:`\partial h^{(\ell')}_{p'} / \partial h^{(\ell)}_{p}` for every row of a batch.

Every hook is removed when its ``with`` block ends, also when the block raises.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["LayerAdapter", "layer_adapter", "capture_activations", "patch_activations", "run_from_layer",
           "decode_hidden", "hidden_jacobian"]

_BLOCK_NAMES = ("h", "layers", "blocks", "layer")
_NORM_NAMES = ("ln_f", "norm", "final_layer_norm", "final_norm")


@dataclass(frozen=True)
class LayerAdapter:
    """The parts of a causal LM that the hooks need."""

    blocks: nn.ModuleList        # the transformer blocks, in order
    final_norm: nn.Module        # the norm applied to the last block's output
    unembed: nn.Module           # the output embedding (the LM head)

    @property
    def n_layers(self) -> int:
        """Number of blocks :math:`L` (so layers run from 0 to L)."""
        return len(self.blocks)


def layer_adapter(model: nn.Module) -> LayerAdapter:
    """Find the blocks, the final norm and the unembedding of a Hugging Face causal LM.

    Uses only public API: ``model.base_model`` (``GPT2Model``, ``LlamaModel``, ``GPTNeoXModel``, ...),
    the first of its attributes ``h``/``layers``/``blocks`` that is a ``ModuleList``, the first of
    ``ln_f``/``norm``/``final_layer_norm``, and ``model.get_output_embeddings()``.
    """
    if not isinstance(model, nn.Module) or not hasattr(model, "base_model"):
        raise TypeError(f"model must be a Hugging Face causal LM, got {type(model).__name__}")
    base = model.base_model
    blocks = next((getattr(base, n) for n in _BLOCK_NAMES if isinstance(getattr(base, n, None), nn.ModuleList)),
                  None)
    norm = next((getattr(base, n) for n in _NORM_NAMES if isinstance(getattr(base, n, None), nn.Module)), None)
    unembed = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if blocks is None or norm is None or unembed is None:
        raise TypeError(f"cannot find the blocks, final norm and LM head of {type(model).__name__}")
    return LayerAdapter(blocks, norm, unembed)


def _check_layer(adapter: LayerAdapter, layer: object, name: str = "layer") -> int:
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise TypeError(f"{name} must be an int, got {type(layer).__name__}")
    if not 0 <= layer <= adapter.n_layers:
        raise ValueError(f"{name} must be in [0, {adapter.n_layers}] for a model with {adapter.n_layers} "
                         f"blocks, got {layer}")
    return layer


def _hidden_of(out):
    return out[0] if isinstance(out, tuple) else out


def _register(adapter: LayerAdapter, layer: int, fn: Callable[[torch.Tensor], torch.Tensor | None]):
    """Register ``fn`` on the state of ``layer``; if it returns a tensor, that tensor replaces the state."""
    if layer == 0:
        def pre_hook(module, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            new = fn(h)
            if new is None:
                return None
            if args:
                return (new, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": new}
        return adapter.blocks[0].register_forward_pre_hook(pre_hook, with_kwargs=True)

    def hook(module, args, out):
        new = fn(_hidden_of(out))
        if new is None:
            return None
        return (new, *out[1:]) if isinstance(out, tuple) else new
    return adapter.blocks[layer - 1].register_forward_hook(hook)


@contextlib.contextmanager
def capture_activations(model: nn.Module, layers: int | Sequence[int], detach: bool = True
                        ) -> Iterator[dict[int, torch.Tensor]]:
    """Record the (batch, length, d) state of each layer in ``layers`` during forward passes.

    ``with capture_activations(model, [2, 4]) as acts: model(input_ids=ids)`` leaves ``acts[2]`` and
    ``acts[4]``; a later forward pass inside the block overwrites them. ``detach=False`` keeps the
    autograd graph (for gradients through a captured state).
    """
    adapter = layer_adapter(model)
    layers = [layers] if isinstance(layers, int) and not isinstance(layers, bool) else list(layers)
    if not layers:
        raise ValueError("layers must not be empty")
    acts: dict[int, torch.Tensor] = {}
    handles = []
    try:
        for layer in layers:
            _check_layer(adapter, layer)

            def record(h, layer=layer):
                acts[layer] = h.detach() if detach else h
            handles.append(_register(adapter, layer, record))
        yield acts
    finally:
        for handle in handles:
            handle.remove()


def _row_positions(positions, batch: int, length: int, device) -> torch.Tensor:
    pos = torch.as_tensor(positions, dtype=torch.long, device=device)
    if pos.ndim == 0:
        pos = pos.expand(batch)
    if pos.shape != (batch,):
        raise ValueError(f"position must be an int or one int per row ({batch}), got shape {tuple(pos.shape)}")
    if bool(((pos >= length) | (pos < -length)).any()):
        raise ValueError(f"position {pos.tolist()} is past the sequence of length {length}")
    return pos % length


@contextlib.contextmanager
def patch_activations(model: nn.Module, layer: int, value: torch.Tensor | Callable[[torch.Tensor], torch.Tensor],
                      position: int | Sequence[int] | torch.Tensor | None = None) -> Iterator[None]:
    """Replace the state of ``layer`` during forward passes, and let the model run on from it.

    Parameters
    ----------
    value:
        With ``position`` given: a (batch, d) or (d,) tensor written at that position of each row.
        With ``position=None``: a (batch, length, d) tensor replacing the whole state. Or a callable
        ``f(h) -> h'`` on the whole (batch, length, d) state (e.g. an SAE reconstruction).
    position:
        An int (negative counts from the end) or one int per row; ``None`` means every position.

    Gradients flow into ``value``, so ``torch.autograd`` can differentiate later states with respect to it.
    """
    adapter = layer_adapter(model)
    _check_layer(adapter, layer)

    def replace(h):
        if callable(value):
            new = value(h)
            if not isinstance(new, torch.Tensor) or new.shape != h.shape:
                raise ValueError(f"the patch function must return a tensor of shape {tuple(h.shape)}")
            return new
        v = value.to(h.dtype)
        if position is None:
            if v.shape != h.shape:
                raise ValueError(f"value must have the state's shape {tuple(h.shape)} when position is None, "
                                 f"got {tuple(v.shape)}")
            return v
        b, length, d = h.shape
        pos = _row_positions(position, b, length, h.device)
        if v.ndim == 1:
            v = v.expand(b, d)
        if v.shape != (b, d):
            raise ValueError(f"value must have shape ({b}, {d}) or ({d},), got {tuple(v.shape)}")
        rows = torch.arange(b, device=h.device)
        new = h.clone()
        new[rows, pos] = v
        return new

    handle = _register(adapter, layer, replace)
    try:
        yield
    finally:
        handle.remove()


def decode_hidden(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """Logits from a last-layer state: the unembedding of the final norm, ``unembed(norm(h))``."""
    adapter = layer_adapter(model)
    return adapter.unembed(adapter.final_norm(hidden))


def run_from_layer(model: nn.Module, input_ids: torch.Tensor, layer: int, hidden: torch.Tensor,
                   **forward_kwargs) -> torch.Tensor:
    """Logits of the model run on from ``hidden`` (batch, length, d) as the state of ``layer``.

    The forward pass is a full one with the whole state of ``layer`` patched (the earlier blocks run but
    their result is discarded), so it needs nothing about the blocks' internals (rotary embeddings,
    masks) and works for any causal LM. ``layer = L`` gives :func:`decode_hidden` of ``hidden``.
    """
    with patch_activations(model, layer, hidden, position=None):
        return model(input_ids=input_ids, **forward_kwargs).logits


def hidden_jacobian(model: nn.Module, input_ids: torch.Tensor, src_layer: int, dst_layer: int,
                    src_position: int = -1, dst_position: int = -1, **forward_kwargs
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Jacobian :math:`J_b=\partial h^{(\text{dst})}_{b,p'}/\partial h^{(\text{src})}_{b,p}` of every row ``b``.

    Returns ``(J, h_src, h_dst)`` with shapes (batch, d, d), (batch, d), (batch, d): ``J[b, i, j]`` is the
    derivative of output coordinate ``i`` with respect to input coordinate ``j``. Rows of a batch do not
    interact in a transformer, so one ``torch.autograd.functional.jacobian`` call of the summed output
    (``vectorize=True``, a single batched backward) gives every row's Jacobian at once.
    """
    adapter = layer_adapter(model)
    _check_layer(adapter, src_layer, "src_layer")
    _check_layer(adapter, dst_layer, "dst_layer")
    if dst_layer < src_layer:
        raise ValueError(f"dst_layer ({dst_layer}) must not come before src_layer ({src_layer})")
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must have shape (batch, length), got {tuple(input_ids.shape)}")
    b, length = input_ids.shape
    src = _row_positions(src_position, b, length, input_ids.device)
    dst = _row_positions(dst_position, b, length, input_ids.device)
    if bool((dst < src).any()):
        raise ValueError("dst_position must not come before src_position (a causal model)")
    rows = torch.arange(b, device=input_ids.device)
    with torch.no_grad(), capture_activations(model, [src_layer, dst_layer]) as acts:
        model(input_ids=input_ids, **forward_kwargs)
    h_src, h_dst = acts[src_layer][rows, src].clone(), acts[dst_layer][rows, dst].clone()

    def forward(x):
        with patch_activations(model, src_layer, x, position=src), \
                capture_activations(model, dst_layer, detach=False) as out:
            model(input_ids=input_ids, **forward_kwargs)
        return out[dst_layer][rows, dst].sum(0)

    with torch.enable_grad():
        jac = torch.autograd.functional.jacobian(forward, h_src, vectorize=True)   # (d_out, batch, d_in)
    return jac.permute(1, 0, 2).contiguous(), h_src, h_dst
