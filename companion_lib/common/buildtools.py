"""Build helpers used by the Makefile (not needed by readers).

``python -m companion_lib.common.buildtools invalidate-cache --cache _build/.jupyter_cache``
empties Jupyter Book's execution cache when the companion library's source changed since the cache
was filled. jupyter-cache keys notebooks on their code cells only, so without this a library change
would be served from stale outputs.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from .cache import library_fingerprint

__all__ = ["invalidate_cache"]

_STAMP = "companion_lib.fingerprint"


def invalidate_cache(cache: Path) -> bool:
    """Remove ``cache`` if it was filled under another library fingerprint; return True if removed.

    The current fingerprint is stored next to the cache (``<cache>.companion_lib.fingerprint``).
    """
    cache = Path(cache)
    stamp = cache.with_name(cache.name + "." + _STAMP)
    current = library_fingerprint()
    removed = False
    if cache.exists() and (not stamp.exists() or stamp.read_text().strip() != current):
        shutil.rmtree(cache)
        removed = True
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(current + "\n")
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m companion_lib.common.buildtools")
    sub = parser.add_subparsers(dest="command", required=True)
    inv = sub.add_parser("invalidate-cache", help="empty the execution cache after a library change")
    inv.add_argument("--cache", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "invalidate-cache":
        if invalidate_cache(args.cache):
            print(f"companion_lib changed: emptied the execution cache {args.cache}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
