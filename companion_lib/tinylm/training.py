"""Training loops: a plain one (minibatches, Adam, gradient clipping, a per-step callback) and
:func:`train_lm`, next-token training of a causal LM with checkpoints, seeded through a ``torch.Generator``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn
from tqdm import tqdm

from ..common.device import module_device
from ..common.validation import check_positive_int

__all__ = ["minibatches", "train_loop", "lm_loss", "train_lm", "TrainResult"]


def minibatches(n: int, batch_size: int, epochs: int = 1,
                generator: torch.Generator | None = None, shuffle: bool = True) -> Iterator[torch.Tensor]:
    """Index tensors covering ``range(n)`` once per epoch, in batches of ``batch_size`` (the last may be smaller)."""
    for name, value in (("n", n), ("batch_size", batch_size), ("epochs", epochs)):
        check_positive_int(value, name)
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


def lm_loss(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean next-token cross-entropy over the real tokens of a batch (padding gets the label -100)."""
    if input_ids.ndim != 2 or input_ids.shape[1] < 2:
        raise ValueError(f"input_ids must have shape (batch, length >= 2), got {tuple(input_ids.shape)}")
    labels = input_ids.clone()
    kwargs = {}
    if attention_mask is not None:
        from .model import position_ids_from_mask
        labels[attention_mask == 0] = -100
        kwargs = dict(attention_mask=attention_mask, position_ids=position_ids_from_mask(attention_mask))
    logits = model(input_ids=input_ids, **kwargs).logits[:, :-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                             labels[:, 1:].reshape(-1), ignore_index=-100)


@dataclass
class TrainResult:
    """What :func:`train_lm` returns: the loss of every step and the checkpoints asked for."""

    losses: list[float]
    checkpoints: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)  # step -> state_dict (CPU)


def _progress_default() -> bool:
    return sys.stderr.isatty()


def train_lm(model: nn.Module, data: torch.Tensor | Callable[[int, torch.Generator], torch.Tensor],
             steps: int, batch_size: int = 32, lr: float = 3e-3, weight_decay: float = 0.01,
             generator: torch.Generator | None = None, checkpoint_steps: Iterable[int] = (),
             grad_clip: float | None = 1.0, progress: bool | None = None) -> TrainResult:
    """Train a causal LM on next-token prediction with AdamW; keep copies of the weights at chosen steps.

    Parameters
    ----------
    data:
        Either an (N, length) tensor of token ids (each step draws ``batch_size`` rows with ``generator``),
        or a function ``data(step, generator) -> (batch, length)`` (a curriculum whose mix changes over
        training, as when new facts enter the corpus at some step).
    checkpoint_steps:
        Steps ``k`` at which a CPU copy of ``model.state_dict()`` is stored, taken after ``k`` updates
        (``0`` is the initialisation). Wrap the caller in ``companion_lib.common.disk_cache`` to keep them
        on disk between notebooks.
    generator:
        The only source of randomness (batch order), so a run is reproducible without the global RNG. Batches
        are drawn on the CPU and moved to the model's device (:func:`~companion_lib.common.module_device`), so
        a model moved to a GPU trains on the same batches as on the CPU.
    progress:
        Show a tqdm bar (None: only when stderr is a terminal, so notebooks and tests print nothing).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for name, value in (("steps", steps), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr}")
    if isinstance(data, torch.Tensor):
        if data.ndim != 2 or data.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"data must be an (N, length) tensor of token ids, got {tuple(data.shape)}, {data.dtype}")
        corpus = data.long()

        def draw(step, g):
            return corpus[torch.randint(0, corpus.shape[0], (batch_size,), generator=g)]
    elif callable(data):
        draw = data
    else:
        raise TypeError(f"data must be a token tensor or a callable, got {type(data).__name__}")
    wanted = sorted(set(int(s) for s in checkpoint_steps))
    if wanted and not 0 <= wanted[0] <= wanted[-1] <= steps:
        raise ValueError(f"checkpoint_steps must lie in [0, {steps}], got {wanted}")
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    dev = module_device(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=True)
    result = TrainResult(losses=[])

    def keep(step):
        if step in wanted:
            result.checkpoints[step] = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}

    keep(0)
    show = _progress_default() if progress is None else bool(progress)
    was_training = model.training
    model.train()
    for step in tqdm(range(1, steps + 1), disable=not show, desc="train", leave=False):
        loss = lm_loss(model, draw(step - 1, g).to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        result.losses.append(float(loss.detach()))
        keep(step)
    model.train(was_training)
    return result
