"""Where the book keeps what it builds: the project root, the build folder, the claims folder."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["project_root", "build_dir", "claims_dir"]

_USER_CACHE = Path.home() / ".cache" / "iclr2025-reproduced"


def project_root() -> Path | None:
    """Return the repository root when the package runs from a source checkout, else ``None``.

    An installed wheel (e.g. in Colab) has no checkout around it; callers then fall back to a
    per-user folder, so a notebook never depends on files next to the repository.
    """
    candidate = Path(__file__).resolve().parents[2]
    if (candidate / "_toc.yml").is_file() and (candidate / "pyproject.toml").is_file():
        return candidate
    return None


def build_dir() -> Path:
    """The folder for build artefacts: ``<root>/_build`` in a checkout, a user cache folder otherwise."""
    root = project_root()
    return root / "_build" if root is not None else _USER_CACHE


def claims_dir() -> Path:
    """Where claims tables are exported: ``$BOOK_CLAIMS_DIR`` or ``<build>/claims``."""
    env = os.environ.get("BOOK_CLAIMS_DIR")
    return Path(env) if env else build_dir() / "claims"
