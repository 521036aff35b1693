"""The execution cache: each notebook executed once per build, by ``make test``, and served to the website.

* :func:`invalidate_cache` empties Jupyter Book's execution cache when the companion library changed:
  jupyter-cache keys notebooks on their code cells only, so without it a library change would be served
  from stale outputs. The key is :func:`companion_lib.common.library_fingerprint`, which covers the
  library readers import and not this build package: editing ``bookkit`` re-executes nothing.
* :func:`cache_executed` puts the notebooks that ``make test`` executed under nbval
  (:mod:`bookkit.pytest_executed`) into the book's execution cache, so that the book build serves them
  instead of executing everything twice; :func:`executed_during_build` (``check-served``) lists what the
  build had to execute itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from companion_lib.common.cache import library_fingerprint

__all__ = ["invalidate_cache", "cache_executed", "executed_during_build", "EXECUTED_KEY"]

_STAMP = "companion_lib.fingerprint"


def invalidate_cache(cache: Path, also: tuple[Path, ...] = ()) -> bool:
    """Remove ``cache`` if it was filled under another library fingerprint; return True if removed.

    The current fingerprint is stored next to the cache (``<cache>.companion_lib.fingerprint``). The
    folders in ``also`` (Sphinx's saved environment, ``_build/.doctrees``) go with it, so that pages whose
    source did not change are re-read and shown with the new outputs.
    """
    cache = Path(cache)
    stamp = cache.with_name(cache.name + "." + _STAMP)
    current = library_fingerprint()
    removed = False
    if cache.exists() and (not stamp.exists() or stamp.read_text().strip() != current):
        shutil.rmtree(cache)
        for folder in also:
            shutil.rmtree(folder, ignore_errors=True)
        removed = True
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(current + "\n")
    return removed


EXECUTED_KEY = "iclr2025_executed"  # notebook metadata written by bookkit/pytest_executed.py


def _code_sources(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def cache_executed(executed: Path, cache: Path, root: Path = Path(".")) -> list[Path]:
    """Add the notebooks executed by ``make test`` (:mod:`bookkit.pytest_executed`) to the book's cache.

    Each ``executed/<chapters/...>.ipynb`` is myst-nb's reading of a MyST source plus the outputs nbval
    collected. It is stored in the jupyter-cache at ``cache`` under the same hash myst-nb computes for
    the source (code cells and kernelspec), so ``jupyter-book build`` serves the page from the cache
    instead of executing it again. A notebook whose source changed since it ran is not added. The cache
    is first emptied if it was filled under another library fingerprint. Returns the sources added;
    writes ``<cache>.served-since`` (the time of this call) for :func:`executed_during_build`.
    """
    import time

    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from myst_nb.core.read import read_myst_markdown_notebook

    root, executed, cache = Path(root).resolve(), Path(executed), Path(cache)
    invalidate_cache(cache, (cache.parent / ".doctrees",))
    store = get_cache(str(cache))
    added = []
    for path in sorted(executed.rglob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        meta = nb.metadata.pop(EXECUTED_KEY, None) or {}
        md = root / meta.get("source", "")
        if not meta or not md.is_file():
            print(f"cache-executed: skipped {path} (no source recorded, or the source is gone)")
            continue
        current = read_myst_markdown_notebook(md.read_text(encoding="utf-8"), path=str(md))
        if _code_sources(current) != _code_sources(nb):
            print(f"cache-executed: skipped {md.relative_to(root)} (its code changed after the test run)")
            continue
        store.cache_notebook_bundle(CacheBundleIn(nb, str(md), data={"execution_seconds": meta.get("seconds")}),
                                    check_validity=False, overwrite=True)
        added.append(md)
    cache.with_name(cache.name + ".served-since").write_text(f"{time.time()}\n")
    return added


def executed_during_build(cache: Path) -> list[str]:
    """Notebooks that the book build had to execute (cache records newer than :func:`cache_executed`)."""
    from datetime import timezone

    from jupyter_cache import get_cache

    cache = Path(cache)
    since = float(cache.with_name(cache.name + ".served-since").read_text().strip())
    late = []
    for record in get_cache(str(cache)).list_cache_records():
        created = record.created
        stamp = (created.replace(tzinfo=timezone.utc) if created.tzinfo is None else created).timestamp()
        if stamp > since:
            late.append(record.uri)
    return sorted(late)
