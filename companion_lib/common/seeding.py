"""One seeding helper for every notebook, so that a chapter runs the same twice."""

from __future__ import annotations

import os
import random

import numpy as np

__all__ = ["seed_everything"]


def seed_everything(seed: int) -> np.random.Generator:
    """Seed Python's, NumPy's and (when installed) PyTorch's global generators.

    Parameters
    ----------
    seed:
        A non-negative integer below 2**32.

    Returns
    -------
    numpy.random.Generator
        A fresh ``default_rng(seed)``, the preferred way for library code to draw numbers.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    seed = int(seed)
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed)
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency, but keep the helper usable without it
        pass
    else:
        torch.manual_seed(seed)
    return np.random.default_rng(seed)
