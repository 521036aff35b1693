"""Re-run a chapter's reproduce notebook(s) under other seeds and print the claims table.

``make reseed CHAPTER=01 SEEDS="11 12 13"`` calls :func:`main`: each ``reproduce*.md`` of the chapter
is read as the book reads it, executed by papermill with ``seeds`` set in its ``parameters`` cell
(in the chapter's folder, with an empty disk cache), and its claims table is printed from the
executed notebook. The exit status is non-zero when a notebook failed, e.g. because a claim went
against its declared kind; the table is printed either way, so the reader sees which row.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from .claims import claims_from_notebook

__all__ = ["find_chapter", "reproduce_notebooks", "run_with_parameters", "run_with_seeds", "main"]


def find_chapter(root: Path, chapter: str) -> Path:
    """The folder ``chapters/<chapter>*`` (``chapter`` may be ``01`` or ``01-self-distillation``)."""
    matches = sorted(p for p in (Path(root) / "chapters").glob(f"{chapter}*") if p.is_dir())
    if len(matches) != 1:
        names = ", ".join(p.name for p in matches) or "none"
        raise ValueError(f"CHAPTER={chapter!r} must name exactly one chapter folder (matches: {names})")
    return matches[0]


def reproduce_notebooks(folder: Path) -> list[Path]:
    notebooks = sorted(Path(folder).glob("reproduce*.md"))
    if not notebooks:
        raise ValueError(f"{folder} has no reproduce*.md notebook")
    return notebooks


def run_with_parameters(md: Path, parameters: dict, out_dir: Path, tag: str,
                        timeout: int = 1800) -> tuple[dict, dict | None, str | None]:
    """Execute the MyST notebook ``md`` by papermill with ``parameters`` set after its ``parameters`` cell, in
    its own folder, writing ``<stem>.<tag>.ipynb`` under ``out_dir``.

    Returns (the executed notebook, its last claims table's JSON or None, error text or None). The kernel
    inherits this process's environment (``BOOK_CACHE_DIR``, ``BOOK_CLAIMS_DIR``)."""
    import nbformat
    import papermill
    from myst_nb.core.read import read_myst_markdown_notebook

    if not isinstance(parameters, dict) or not all(isinstance(k, str) and k.isidentifier() for k in parameters):
        raise ValueError(f"parameters must be a dict keyed by Python names, got {parameters!r}")
    md = Path(md).resolve()
    nb = read_myst_markdown_notebook(md.read_text(encoding="utf-8"), path=str(md))
    if not any("parameters" in c.get("metadata", {}).get("tags", []) for c in nb.cells):
        raise ValueError(f"{md} has no cell tagged 'parameters'")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / f"{md.stem}.{tag}.input.ipynb"
    dst = out_dir / f"{md.stem}.{tag}.ipynb"
    nbformat.write(nb, src)
    error = None
    try:
        papermill.execute_notebook(str(src), str(dst), parameters=parameters, cwd=str(md.parent),
                                   kernel_name="python3", progress_bar=False, execution_timeout=timeout)
    except Exception as exc:  # papermill re-raises the cell's error; the outputs so far are in dst
        error = f"{type(exc).__name__}: {exc}"
    executed = nbformat.read(dst, as_version=4) if dst.exists() else {"cells": []}
    return executed, claims_from_notebook(executed), error


def run_with_seeds(md: Path, seeds: list[int], out_dir: Path, timeout: int = 1800) -> tuple[dict | None, str | None]:
    """Execute ``md`` with ``seeds``; return (claims JSON or None, error text or None)."""
    tag = "seeds-" + "-".join(map(str, seeds))   # one file per seed set: two re-runs at once do not collide
    _, claims, error = run_with_parameters(md, {"seeds": list(seeds)}, out_dir, tag, timeout=timeout)
    return claims, error


def _print_table(data: dict) -> None:
    width = max(len(c.get("key", c["claim"])) for c in data["claims"])
    for c in data["claims"]:
        verdict = c.get("verdict") or c["outcome"]
        print(f"  {c['outcome']:<27} {c.get('key', c['claim']):<{width}}  {verdict:<15} {c.get('book', '')}  "
              f"[{c.get('criterion', '')}]")
    counts = ", ".join(f"{n} {o}" for o, n in data.get("counts", {}).items() if n)
    print(f"  -> {counts}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bookkit reseed", description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", required=True, help="chapter number or folder name, e.g. 01")
    parser.add_argument("--seeds", required=True, help='seeds separated by spaces or commas, e.g. "11 12 13"')
    parser.add_argument("--root", type=Path, default=Path("."))
    parser.add_argument("--out", type=Path, default=None, help="where executed notebooks go (default: _build/reseed)")
    parser.add_argument("--timeout", type=int, default=1800,
                        help="seconds one cell may run (default 1800); raise it on a heavily loaded machine")
    args = parser.parse_args(argv)
    if args.timeout < 1:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout}")
    try:
        seeds = [int(s) for s in args.seeds.replace(",", " ").split()]
    except ValueError:
        parser.error(f"--seeds must be integers, got {args.seeds!r}")
    if not seeds:
        parser.error("--seeds must name at least one seed")
    folder = find_chapter(args.root, args.chapter)
    out = (args.out or Path(args.root) / "_build" / "reseed") / folder.name
    status = 0
    with tempfile.TemporaryDirectory(prefix="reseed-cache-") as cache:
        os.environ["BOOK_CACHE_DIR"] = cache
        os.environ["BOOK_CLAIMS_DIR"] = str(out / ("claims-seeds-" + "-".join(map(str, seeds))))
        for md in reproduce_notebooks(folder):
            print(f"{folder.name}/{md.name} with seeds={seeds} ...", flush=True)
            data, error = run_with_seeds(md, seeds, out, timeout=args.timeout)
            if data:
                _print_table(data)
            else:
                print("  (no claims table was displayed)")
            if error:
                status = 1
                print("  FAILED: " + error.strip().splitlines()[-1][:500])
    print(f"executed notebooks: {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
