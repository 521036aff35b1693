"""Where tensors run: the GPU when one is present, else the CPU, chosen in one place.

A chapter's notebook asks ``dev = device()`` once and moves its models and batches there
(``model.to(dev)``, ``torch.as_tensor(x, device=dev)``). On the book's machines (no GPU) this is the CPU,
and every result is what the book shows; in Colab with a GPU the same code runs on it. ``BOOK_DEVICE``
overrides the choice (``cpu``, ``cuda``, ``cuda:1``, ``mps``), e.g. to check that a chapter still runs on
the CPU on a machine that has a GPU.

Results on a GPU are not bit-identical to the CPU's (other kernels, other summation orders): a chapter's
verdicts are decided by intervals over replicates, which a rounding difference does not move, but the
printed digits may differ in the last places.
"""

from __future__ import annotations

import os

import torch

__all__ = ["device", "describe_device", "module_device", "resolve_device", "to_device"]


def device(prefer: str | None = None) -> torch.device:
    """The device to run on: ``prefer`` (a name or a ``torch.device``) if given, else ``$BOOK_DEVICE``, else ``cuda`` when available, else
    ``cpu``. Raises ``ValueError`` for a device this machine does not have (named, with the choices)."""
    choice = prefer if prefer is not None else os.environ.get("BOOK_DEVICE", "").strip() or None
    if isinstance(choice, torch.device):
        choice = str(choice)
    if choice is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(choice, str):
        raise TypeError(f"prefer must be a device name such as 'cpu' or 'cuda', got {type(choice).__name__}")
    try:
        dev = torch.device(choice)
    except RuntimeError as exc:
        raise ValueError(f"unknown device {choice!r} (choose cpu, cuda, cuda:N or mps): {exc}") from None
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise ValueError(f"device {choice!r} is not available on this machine (CUDA devices: "
                         f"{torch.cuda.device_count()}); use 'cpu'")
    if dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"device {choice!r} is not available on this machine; use 'cpu'")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device {choice!r} is not supported (choose cpu, cuda, cuda:N or mps)")
    return dev


def resolve_device(dev: str | torch.device | None = None) -> torch.device:
    """A library function's ``device`` argument as a ``torch.device``: ``None`` means :func:`device` (the GPU
    when present, else the CPU); anything else is taken as given (a name or a ``torch.device``, ``meta``
    included, which the tests use to check that inputs follow a model)."""
    return device() if dev is None else torch.device(dev)


def describe_device(dev: torch.device | None = None) -> str:
    """One line naming the device, e.g. ``"cpu (2 threads)"`` or ``"cuda:0 (NVIDIA T4, 15.8 GiB)"``."""
    dev = device() if dev is None else torch.device(dev)
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev.index or 0)
        return f"cuda:{dev.index or 0} ({props.name}, {props.total_memory / 2**30:.1f} GiB)"
    if dev.type == "cpu":
        return f"cpu ({torch.get_num_threads()} threads)"
    return str(dev)


def module_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s first parameter (or buffer); the CPU for a module with neither.

    Library functions that receive a model use it to put their inputs where the model is, so a caller moves
    the model once (``model.to(device())``) and every batch follows."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


def to_device(x, dev: torch.device | str | None):
    """``x`` (a tensor, or a dict/list/tuple of tensors, nested) on ``dev``; ``None`` leaves it where it is.

    On the device ``x`` is already on, tensors are returned as they are (no copy), so a CPU run through this
    helper computes exactly what it computed without it."""
    if dev is None:
        return x
    dev = torch.device(dev)
    if isinstance(x, torch.Tensor):
        return x.to(dev)
    if isinstance(x, dict):
        return {k: to_device(v, dev) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        moved = [to_device(v, dev) for v in x]
        return type(x)(moved) if not hasattr(x, "_fields") else type(x)(*moved)
    return x
