"""A disk cache for expensive steps, shared by the notebooks of a chapter.

The cache lives in ``$BOOK_CACHE_DIR`` (``make test`` points it at a fresh folder each run), else in
``<root>/_build/cache`` in a source checkout, else in a per-user folder. Its location includes a
fingerprint of the companion library's source, so a change anywhere in the library can never serve a
result computed by older code. Results computed on a GPU (the default device of
:func:`companion_lib.common.device` when one is present) go to a subfolder named after the device type, so a
run forced onto the CPU (``BOOK_DEVICE=cpu``) is never served a GPU's numbers, nor the other way round; on the
CPU the location has no such subfolder. joblib writes each result atomically, so two notebooks running at once
may both compute a missing entry but never read a half-written one.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path

import joblib

from .device import device
from .paths import build_dir

__all__ = ["cache_dir", "disk_cache", "library_fingerprint"]

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]
_NAMESPACE = re.compile(r"^[A-Za-z0-9_.-]+$")


def library_fingerprint(package: Path | str | None = None) -> str:
    """A short SHA-256 of every ``.py`` file of :mod:`companion_lib` and of the data it ships (the tiny-VLM
    world checkpoints, ``.npz``; data tables, ``.csv``), paths and contents. ``package`` is another copy of
    the package folder to fingerprint (default: this one). The book's build machinery (``bookkit``) lives
    outside the package, so it is not part of the key: editing it re-executes no notebook."""
    return _fingerprint(Path(package).resolve() if package is not None else _PACKAGE_ROOT)


@lru_cache(maxsize=4)
def _fingerprint(root: Path) -> str:
    digest = hashlib.sha256()
    files = [p for pattern in ("*.py", "*.npz", "*.csv") for p in root.rglob(pattern)]
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_dir() -> Path:
    """The cache's root folder: ``$BOOK_CACHE_DIR`` or ``<build>/cache``."""
    env = os.environ.get("BOOK_CACHE_DIR")
    return Path(env) if env else build_dir() / "cache"


def disk_cache(namespace: str, verbose: int = 0) -> joblib.Memory:
    """A :class:`joblib.Memory` for one chapter: ``disk_cache("self_distillation").cache(fn)``.

    Parameters
    ----------
    namespace:
        A folder name (letters, digits, ``_``, ``-``, ``.``), usually the chapter's module name.
    verbose:
        joblib's verbosity (0 is silent).

    The folder is ``<cache_dir>/<namespace>/<library fingerprint>``, plus ``/<device type>`` when the default
    device is not the CPU (see the module docstring).
    """
    if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
        raise ValueError(f"namespace must be a non-empty folder name of [A-Za-z0-9_.-], got {namespace!r}")
    location = cache_dir() / namespace / library_fingerprint()
    try:
        kind = device().type
    except (TypeError, ValueError):   # a BOOK_DEVICE this machine lacks: the chapter's own call will say so
        kind = "cpu"
    if kind != "cpu":
        location = location / kind
    return joblib.Memory(location=str(location), verbose=verbose)
