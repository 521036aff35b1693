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

__all__ = ["CHECK_ERRORS", "find_chapter", "reproduce_notebooks", "run_with_parameters", "run_with_seeds", "main"]


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


#: errors a page's own checks raise: a contradicted claims table (ClaimsFailed) and a prose check (assert)
CHECK_ERRORS = ("ClaimsFailed", "AssertionError")


def run_with_parameters(md: Path, parameters: dict, out_dir: Path, tag: str, timeout: int = 1800,
                        checks_off_before: str | None = None) -> tuple[dict, dict | None, str | None]:
    """Execute the MyST notebook ``md`` by papermill with ``parameters`` set after its ``parameters`` cell, in
    its own folder, writing ``<stem>.<tag>.ipynb`` under ``out_dir``.

    Returns (the executed notebook, its last claims table's JSON or None, error text or None). The kernel
    inherits this process's environment (``BOOK_CACHE_DIR``, ``BOOK_CLAIMS_DIR``).

    ``checks_off_before`` (a heading's text, e.g. ``"At full scale"``): the code cells before the first Markdown
    cell with that heading run on after an error, and the page's own checks failing there (:data:`CHECK_ERRORS`:
    a contradicted claim or a prose assertion, which toy sizes can trip) are not errors of the run; any other
    error there, and every error from the heading on, still is. A test of the full-scale section then runs the
    book's experiments at minimal sizes without depending on their verdicts (the book's run checks those)."""
    import nbformat
    import papermill
    from myst_nb.core.read import read_myst_markdown_notebook

    if not isinstance(parameters, dict) or not all(isinstance(k, str) and k.isidentifier() for k in parameters):
        raise ValueError(f"parameters must be a dict keyed by Python names, got {parameters!r}")
    md = Path(md).resolve()
    nb = read_myst_markdown_notebook(md.read_text(encoding="utf-8"), path=str(md))
    if not any("parameters" in c.get("metadata", {}).get("tags", []) for c in nb.cells):
        raise ValueError(f"{md} has no cell tagged 'parameters'")
    if checks_off_before is not None:
        starts = [i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and any(
            line.lstrip("#").strip() == checks_off_before for line in c.source.splitlines() if line.startswith("#"))]
        if not starts:
            raise ValueError(f"{md} has no heading {checks_off_before!r}")
        for cell in nb.cells[:starts[0]]:
            if cell.cell_type == "code":
                cell.metadata.setdefault("tags", []).append("raises-exception")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / f"{md.stem}.{tag}.input.ipynb"
    dst = out_dir / f"{md.stem}.{tag}.ipynb"
    nbformat.write(nb, src)
    error, cell_error = None, False
    try:
        papermill.execute_notebook(str(src), str(dst), parameters=parameters, cwd=str(md.parent),
                                   kernel_name="python3", progress_bar=False, execution_timeout=timeout)
    except Exception as exc:  # papermill re-raises the cell's error; the outputs so far are in dst
        error = f"{type(exc).__name__}: {exc}"
        cell_error = isinstance(exc, papermill.PapermillExecutionError)
    executed = nbformat.read(dst, as_version=4) if dst.exists() else {"cells": []}
    # checks off before the heading: decide from the cells' error outputs. A timeout or a dead kernel leaves no
    # error output, so papermill's own error stands then.
    if checks_off_before is not None and dst.exists() and (error is None or cell_error):
        error = None
        for cell in executed.cells:
            tolerant = "raises-exception" in cell.get("metadata", {}).get("tags", [])
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error" and not (tolerant and out.get("ename") in CHECK_ERRORS):
                    error = error or f"{out.get('ename')}: {out.get('evalue')} (in the cell starting " \
                                     f"{cell.source.strip().splitlines()[0][:80] if cell.source.strip() else ''!r})"
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
