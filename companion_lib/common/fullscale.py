r"""What a chapter's "At full scale" section states before anything runs: memory and an estimate of the time.

A reproduce page that takes a real checkpoint (``model=`` a hub id) says what that costs. Memory is the
parameters in the chosen precision times a headroom for activations and caches; time is the floating-point
work (:math:`2N` per token of a forward pass and :math:`6N` per token of training, for :math:`N` parameters;
Kaplan et al. 2020) divided by a GPU's dense half-precision peak times an assumed utilisation. Both are
**estimates**, labelled so on every page until a run on the real weights measures them.

The GPUs are those Colab offers (:data:`COLAB_GPUS`; peaks from the vendors' data sheets, dense tensor-core
FP16/BF16).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

__all__ = ["GPU", "COLAB_GPUS", "FullScaleEstimate", "full_scale_estimate"]


@dataclass(frozen=True)
class GPU:
    """A GPU as the estimate sees it: usable memory (GiB) and dense half-precision peak (FLOP/s)."""

    name: str
    memory_gib: float
    peak_flops: float


#: Colab's GPUs: T4 (16 GB, 65 TFLOP/s FP16), L4 (24 GB, 121 TFLOP/s), A100 (40 GB, 312 TFLOP/s); usable
#: memory is what ``torch.cuda.mem_get_info`` typically reports free on a fresh runtime.
COLAB_GPUS = (GPU("Colab T4", 14.7, 65e12), GPU("Colab L4", 22.0, 121e12), GPU("Colab A100", 39.4, 312e12))

_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class FullScaleEstimate:
    """Memory (GiB) and time (s) per GPU of :data:`COLAB_GPUS` for one full-scale run (estimates)."""

    n_params: float
    dtype: str
    memory_gib: float
    flops: float
    utilisation: float

    def seconds(self, gpu: GPU) -> float:
        """Estimated seconds on ``gpu``: the work over its peak times the assumed utilisation."""
        return self.flops / (gpu.peak_flops * self.utilisation)

    def table(self) -> pd.DataFrame:
        """One row per Colab GPU: whether the run fits its memory and the estimated time (minutes)."""
        rows = [{"GPU": g.name, "memory needed (GiB, estimate)": round(self.memory_gib, 1),
                 "fits": self.memory_gib <= g.memory_gib,
                 "time (min, estimate)": round(self.seconds(g) / 60, 1) if self.memory_gib <= g.memory_gib else None}
                for g in COLAB_GPUS]
        return pd.DataFrame(rows).set_index("GPU")

    def smallest_gpu(self) -> GPU | None:
        """The first Colab GPU whose memory holds the run, or None."""
        return next((g for g in COLAB_GPUS if self.memory_gib <= g.memory_gib), None)


def full_scale_estimate(n_params: float, *, dtype: str = "float16", forward_tokens: float = 0.0,
                        train_tokens: float = 0.0, trainable_params: float | None = None,
                        extra_memory_gib: float = 0.0, headroom: float = 1.2,
                        utilisation: float = 0.3) -> FullScaleEstimate:
    r"""Estimate memory and time of a full-scale run of a model with ``n_params`` parameters.

    Parameters
    ----------
    n_params:
        Parameters of the model (the model card's count).
    dtype:
        ``"float16"``, ``"bfloat16"`` or ``"float32"``: the precision the weights are held in.
    forward_tokens:
        Tokens pushed through forward passes only (scoring, generation, activation capture): :math:`2N` FLOPs each.
    train_tokens:
        Tokens of training steps (forward and backward): :math:`6N` FLOPs each.
    trainable_params:
        Parameters that get gradients and AdamW state (default: all when ``train_tokens > 0``, none otherwise):
        each adds a float32 gradient and two float32 moments (12 bytes).
    extra_memory_gib:
        Memory beyond weights and optimiser (a batch's activations, stored features), as the page computes it.
    headroom:
        Factor on the weights for activations, caches and the CUDA context (>= 1).
    utilisation:
        Assumed fraction of the GPU's peak that the run sustains (0, 1]; 0.3 is typical of small-batch
        PyTorch work, and the reason the result is an estimate.
    """
    for name, value in (("n_params", n_params), ("forward_tokens", forward_tokens), ("train_tokens", train_tokens),
                        ("extra_memory_gib", extra_memory_gib)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    if n_params <= 0:
        raise ValueError(f"n_params must be positive, got {n_params!r}")
    if dtype not in _BYTES:
        raise ValueError(f"dtype must be one of {sorted(_BYTES)}, got {dtype!r}")
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or headroom < 1:
        raise ValueError(f"headroom must be a number >= 1, got {headroom!r}")
    if isinstance(utilisation, bool) or not isinstance(utilisation, (int, float)) or not 0 < utilisation <= 1:
        raise ValueError(f"utilisation must be in (0, 1], got {utilisation!r}")
    if trainable_params is None:
        trainable_params = n_params if train_tokens > 0 else 0.0
    if isinstance(trainable_params, bool) or not isinstance(trainable_params, (int, float)) \
            or not 0 <= trainable_params <= n_params:
        raise ValueError(f"trainable_params must be in [0, n_params], got {trainable_params!r}")
    memory = (n_params * _BYTES[dtype] * headroom + trainable_params * 12) / 2**30 + extra_memory_gib
    flops = 2.0 * n_params * forward_tokens + 6.0 * n_params * train_tokens
    return FullScaleEstimate(float(n_params), dtype, float(memory), float(flops), float(utilisation))
