"""A plain PyTorch training loop: minibatches, Adam, optional gradient clipping, a per-step callback."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch
from torch import nn

__all__ = ["minibatches", "train_loop"]


def minibatches(n: int, batch_size: int, epochs: int = 1,
                generator: torch.Generator | None = None, shuffle: bool = True) -> Iterator[torch.Tensor]:
    """Index tensors covering ``range(n)`` once per epoch, in batches of ``batch_size`` (the last may be smaller)."""
    for name, value in (("n", n), ("batch_size", batch_size), ("epochs", epochs)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        yield from order.split(batch_size)


def train_loop(model: nn.Module, loss_fn: Callable[[nn.Module, object], torch.Tensor],
               batches: Iterable[object], lr: float = 1e-3, grad_clip: float | None = None,
               optimizer: torch.optim.Optimizer | None = None,
               callback: Callable[[int, float], None] | None = None) -> list[float]:
    """Minimise ``loss_fn(model, batch)`` over ``batches`` with Adam (or the ``optimizer`` given).

    Parameters
    ----------
    loss_fn:
        Returns a scalar tensor for one batch.
    batches:
        Any iterable; each item is handed to ``loss_fn`` as is (e.g. from :func:`minibatches`).
    grad_clip:
        Clip the global gradient norm to this value (None: no clipping).
    callback:
        Called as ``callback(step, loss)`` after each optimiser step (for logging or evaluation).

    Returns
    -------
    list of float
        The loss of every step.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    if grad_clip is not None and not grad_clip > 0:
        raise ValueError(f"grad_clip must be > 0 or None, got {grad_clip}")
    params = [p for p in model.parameters() if p.requires_grad]
    opt = optimizer if optimizer is not None else torch.optim.Adam(params, lr=lr, foreach=True)
    losses: list[float] = []
    for step, batch in enumerate(batches):
        loss = loss_fn(model, batch)
        if not isinstance(loss, torch.Tensor) or loss.ndim != 0:
            raise ValueError("loss_fn must return a scalar tensor")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        losses.append(float(loss.detach()))
        if callback is not None:
            callback(step, losses[-1])
    return losses
