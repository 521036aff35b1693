r"""Real causal LMs for the language-model chapters: a checkpoint loaded with its tokenizer, checked first.

The chapters' tiny models are Hugging Face causal LMs, so every function of :mod:`companion_lib.tinylm`
(scoring, caches, hooks, the logit lens, Jacobians) also takes the architectures the papers used. This
module loads one of them, from a hub id (``"EleutherAI/pythia-160m"``) or a local folder written by
``save_pretrained``, and refuses, **before any weights are read**, what the hooks cannot handle:

* an architecture outside :data:`SUPPORTED_CAUSAL_LMS` (its config names it; the error lists the choices);
* a checkpoint whose config or tokenizer does not load (the error names the path and the cause);
* a model whose parameters alone need more memory than the device has free (:func:`parameter_bytes`
  counts them on PyTorch's ``meta`` device, which allocates nothing).

On the book's machines nothing is downloaded; the tests save tiny randomly initialised instances of each
supported class to a folder and load them back through :func:`load_causal_lm`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..common.device import device as _device

__all__ = ["SUPPORTED_CAUSAL_LMS", "DTYPES", "LoadedLM", "causal_lm_config", "parameter_bytes", "free_memory_bytes",
           "check_fits", "resolve_dtype", "load_causal_lm"]

#: Architectures (the ``architectures`` entry of a checkpoint's config) whose blocks, final norm and
#: unembedding :func:`companion_lib.tinylm.layer_adapter` finds, tested on tiny instances of each.
SUPPORTED_CAUSAL_LMS = ("GPT2LMHeadModel", "GPTNeoXForCausalLM", "OlmoForCausalLM", "Olmo2ForCausalLM",
                        "LlamaForCausalLM")

#: The precisions a checkpoint can be loaded in, by name.
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class LoadedLM:
    """A loaded checkpoint: the model (in eval mode, on ``device``), its tokenizer, and where it came from."""

    model: nn.Module
    tokenizer: object
    source: str
    architecture: str
    device: torch.device
    dtype: torch.dtype


def _source(model: object) -> str:
    if isinstance(model, Path):
        return str(model)
    if not isinstance(model, str) or not model.strip():
        raise TypeError(f"model must be a hub id (e.g. 'EleutherAI/pythia-160m') or a local folder, "
                        f"got {type(model).__name__}")
    return model


def _check_revision(revision: object) -> None:
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise TypeError(f"revision must be None or a branch, tag or commit name, got {revision!r}")


def causal_lm_config(model: str | Path, revision: str | None = None):
    """The checkpoint's config (at hub ``revision``: a branch, tag or commit, e.g. one of OLMo's intermediate
    checkpoints ``"step20000-tokens84B"``; default the main branch), with its architecture checked against
    :data:`SUPPORTED_CAUSAL_LMS`.

    Raises ``ValueError`` naming the checkpoint when its config does not load (no such folder, no network,
    not a Hugging Face checkpoint) or when its architecture is not supported (the error lists the choices).
    """
    from transformers import AutoConfig

    source = _source(model)
    _check_revision(revision)
    try:
        config = AutoConfig.from_pretrained(source, revision=revision)
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"cannot load the config of {source!r} (a hub id needs network access; a folder needs "
                         f"the config.json that save_pretrained writes): {exc}") from None
    archs = list(getattr(config, "architectures", None) or [])
    supported = [a for a in archs if a in SUPPORTED_CAUSAL_LMS]
    if not supported:
        raise ValueError(f"{source!r} is a {', '.join(archs) or type(config).__name__} checkpoint; the book's "
                         f"hooks support the causal LMs {', '.join(SUPPORTED_CAUSAL_LMS)}")
    return config


def parameter_bytes(config, dtype: torch.dtype = torch.float32) -> int:
    """Bytes that the parameters of a model built from ``config`` take in ``dtype``, counted on the
    ``meta`` device (no memory is allocated; tied embeddings are counted once)."""
    from transformers import AutoModelForCausalLM

    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    n = sum(p.numel() for p in skeleton.parameters())   # parameters() yields a tied tensor once
    return n * torch.empty((), dtype=dtype).element_size()


def free_memory_bytes(dev: torch.device) -> int:
    """Free memory of ``dev``: ``torch.cuda.mem_get_info`` on a GPU, the available RAM otherwise
    (``MemAvailable`` of ``/proc/meminfo``, or the free pages where there is none)."""
    dev = torch.device(dev)
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        return int(free)
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():   # Linux (Colab included): MemAvailable counts reclaimable caches as free
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def resolve_dtype(dtype: str | None, dev: torch.device) -> tuple[str, torch.dtype]:
    """The precision to hold a checkpoint in: ``dtype`` (a name of :data:`DTYPES`) checked, or by default
    ``float16`` on a GPU (the norm for these checkpoints) and ``float32`` on the CPU."""
    if dtype is None:
        dtype = "float16" if torch.device(dev).type == "cuda" else "float32"
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    return dtype, DTYPES[dtype]


def check_fits(need_bytes: float, dev: torch.device, what: str, advice: str, free_bytes: int | None = None) -> None:
    """Stop before any weights are read when a run cannot fit: ``ValueError`` saying that ``what`` needs about
    ``need_bytes`` but ``dev`` has less free (:func:`free_memory_bytes`, or ``free_bytes`` where a test sets it),
    followed by ``advice`` (the choices that would fit)."""
    free = free_memory_bytes(dev) if free_bytes is None else int(free_bytes)
    if need_bytes > free:
        raise ValueError(f"{what} needs about {need_bytes / 2**30:.2f} GiB but {dev} has {free / 2**30:.2f} GiB "
                         f"free: {advice}")


def load_tokenizer(model: str | Path, revision: str | None = None):
    """The tokenizer of a hub id or saved folder (at ``revision``), or a ``ValueError`` naming the checkpoint."""
    from transformers import AutoTokenizer

    source = _source(model)
    try:
        return AutoTokenizer.from_pretrained(source, revision=revision)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"cannot load the tokenizer of {source!r}: {exc}") from None


def load_causal_lm(model: str | Path, *, device: str | torch.device | None = None, dtype: str | None = None,
                   headroom: float = 1.2, free_bytes: int | None = None, revision: str | None = None,
                   tokenizer=None) -> LoadedLM:
    """Load a supported causal LM and its tokenizer, after checking that it can run here.

    Parameters
    ----------
    model:
        A hub id or a local folder written by ``save_pretrained`` (model and tokenizer).
    device:
        Where to run (default :func:`companion_lib.common.device`: the GPU when present).
    dtype:
        ``"float32"``, ``"float16"`` or ``"bfloat16"``; default ``float16`` on a GPU (the norm for these
        checkpoints) and ``float32`` on the CPU.
    headroom:
        The parameters times ``headroom`` must fit in the device's free memory (activations need the rest).
    free_bytes:
        The free memory to check against (default :func:`free_memory_bytes`; the tests pass a small value).
    revision:
        A hub branch, tag or commit (an intermediate training checkpoint, for chapter 11); default the main branch.
    tokenizer:
        The checkpoint's tokenizer when the caller has loaded it already (:func:`load_tokenizer`); default: load it.

    Every check runs before the weights are read, so a wrong choice fails in seconds, not after a download.
    """
    from transformers import AutoModelForCausalLM

    source = _source(model)
    dev = _device(None if device is None else str(device))
    dtype, torch_dtype = resolve_dtype(dtype, dev)
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or headroom < 1:
        raise ValueError(f"headroom must be a number >= 1, got {headroom!r}")
    config = causal_lm_config(source, revision=revision)
    check_fits(parameter_bytes(config, torch_dtype) * headroom, dev,
               f"{source!r} (its parameters in {dtype}, x{headroom} with activations)",
               "choose a smaller model, dtype='float16'/'bfloat16', or a GPU", free_bytes)
    if tokenizer is None:
        tokenizer = load_tokenizer(source, revision=revision)
    from safetensors import SafetensorError

    try:
        lm = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, revision=revision)
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:   # a corrupt weights file
        raise ValueError(f"cannot load the weights of {source!r}: {exc}") from None
    lm = lm.to(dev).eval()
    arch = next(a for a in config.architectures if a in SUPPORTED_CAUSAL_LMS)
    return LoadedLM(model=lm, tokenizer=tokenizer, source=source, architecture=arch, device=dev, dtype=torch_dtype)
