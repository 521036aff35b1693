r"""An activation store and a splice-in evaluation, for training and judging sparse autoencoders.

* :class:`ActivationStore` -- the layer-:math:`\ell` states of every real token of a corpus, collected in
  chunks without gradients, then served in shuffled batches (seeded through a ``torch.Generator``).
* :func:`spliced_loss` -- the next-token loss with the layer-:math:`\ell` state replaced by a
  reconstruction :math:`\hat h = f(h)` (e.g. an SAE's decode of its encode), and the rise over the clean loss.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import nn

from .hooks import capture_activations, patch_activations
from .training import lm_loss

__all__ = ["ActivationStore", "spliced_loss"]


class ActivationStore:
    """The (n_tokens, d) states of ``layer`` at every real token of ``input_ids``.

    Parameters
    ----------
    input_ids, attention_mask:
        (N, length) token ids and an optional 0/1 mask (positions with 0 are not stored).
    chunk_size:
        Rows per forward pass while collecting.
    batch_size, generator:
        Iterating the store yields one shuffled epoch of (batch_size, d) batches drawn with ``generator``.
    """

    def __init__(self, model: nn.Module, layer: int, input_ids: torch.Tensor,
                 attention_mask: torch.Tensor | None = None, batch_size: int = 256, chunk_size: int = 64,
                 generator: torch.Generator | None = None) -> None:
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must have shape (N, length), got {tuple(input_ids.shape)}")
        if attention_mask is not None and attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask must have shape {tuple(input_ids.shape)}")
        for name, value in (("batch_size", batch_size), ("chunk_size", chunk_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.layer, self.batch_size = layer, batch_size
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)
        parts = []
        with torch.no_grad(), capture_activations(model, layer) as acts:
            for start in range(0, input_ids.shape[0], chunk_size):
                ids = input_ids[start:start + chunk_size]
                kwargs = {}
                if attention_mask is not None:
                    from .model import position_ids_from_mask
                    m = attention_mask[start:start + chunk_size]
                    kwargs = dict(attention_mask=m, position_ids=position_ids_from_mask(m))
                model(input_ids=ids, **kwargs)
                h = acts[layer]
                parts.append(h[m.bool()] if attention_mask is not None else h.reshape(-1, h.shape[-1]))
        self.activations = torch.cat(parts).float()

    def __len__(self) -> int:
        return self.activations.shape[0]

    @property
    def d(self) -> int:
        """Width of the stored states."""
        return self.activations.shape[1]

    def __iter__(self) -> Iterator[torch.Tensor]:
        order = torch.randperm(len(self), generator=self.generator)
        yield from (self.activations[idx] for idx in order.split(self.batch_size))


def spliced_loss(model: nn.Module, input_ids: torch.Tensor, layer: int,
                 reconstruct: Callable[[torch.Tensor], torch.Tensor],
                 attention_mask: torch.Tensor | None = None) -> dict[str, float]:
    r"""Clean and spliced next-token loss: ``{"clean", "spliced", "rise"}`` with rise = spliced - clean.

    ``reconstruct`` maps a (..., d) state to its reconstruction of the same shape; it is applied to every
    position of ``layer`` and the model runs on from there.
    """
    with torch.no_grad():
        clean = float(lm_loss(model, input_ids, attention_mask))
        with patch_activations(model, layer, lambda h: reconstruct(h.float()).to(h.dtype)):
            spliced = float(lm_loss(model, input_ids, attention_mask))
    return {"clean": clean, "spliced": spliced, "rise": spliced - clean}
