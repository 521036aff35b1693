"""The Colab copies: one ``.ipynb`` (no outputs, deterministic cell ids) beside every chapter notebook.

:func:`sync_notebooks` puts the one Colab setup cell (built from ``_config.yml``'s repository URL and the
package version, :func:`colab_setup_source`) at the top of every chapter notebook and writes the paired
``.ipynb`` (:func:`paired_notebook`); ``--check`` only reports what is out of date.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

__all__ = ["SETUP_MARKER", "chapter_notebooks", "colab_setup_source", "paired_notebook", "sync_notebooks",
           "ipynb_text"]

SETUP_MARKER = 'if "google.colab" in sys.modules:'


def _is_myst_notebook(text: str) -> bool:
    head = text.split("\n---", 1)[0] if text.startswith("---") else ""
    return bool(re.search(r"format_name:\s*myst", head))


def chapter_notebooks(root: Path) -> list[Path]:
    """Every MyST notebook under ``<root>/chapters`` (plain pages such as ``index.md`` excluded)."""
    root = Path(root)
    return sorted(p for p in (root / "chapters").rglob("*.md")
                  if ".ipynb_checkpoints" not in p.parts and _is_myst_notebook(p.read_text(encoding="utf-8")))


def colab_setup_source(root: Path) -> str:
    """The source of the Colab setup cell, from ``_config.yml`` (repository) and ``pyproject.toml`` (version)."""
    import tomllib

    import yaml

    root = Path(root)
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    url = config["repository"]["url"].rstrip("/")
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return ("# Colab setup: inside Google Colab, install this book's companion library; elsewhere, do nothing.\n"
            "import sys\n\n"
            f"{SETUP_MARKER}\n"
            f'    %pip install --quiet "{project["name"]} @ git+{url}@v{project["version"]}"')


def _fix_setup_cell(md: Path, expected: str) -> bool:
    """Replace the body of the first code cell of ``md`` by ``expected`` if it is a Colab cell that differs."""
    text = md.read_text(encoding="utf-8")
    match = re.search(r"```\{code-cell\}[^\n]*\n(?::tags:[^\n]*\n\n)?(.*?)```", text, re.S)
    if not match or "google.colab" not in match.group(1) or match.group(1).strip() == expected.strip():
        return False
    md.write_text(text[:match.start(1)] + expected + "\n" + text[match.end(1):], encoding="utf-8")
    return True


def paired_notebook(md: Path):
    """The Colab copy of a MyST notebook: same cells and metadata, no outputs, ids from cell contents."""
    import jupytext

    nb = jupytext.read(md)
    seen: dict[str, int] = {}
    for cell in nb.cells:
        digest = hashlib.sha1((cell.cell_type + "\0" + cell.source).encode()).hexdigest()[:10]
        seen[digest] = seen.get(digest, 0) + 1
        cell["id"] = digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"
        if cell.cell_type == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    nb.metadata.pop("jupytext", None)
    nb.metadata["colab"] = {"provenance": []}
    nb.nbformat, nb.nbformat_minor = 4, 5
    return nb


def ipynb_text(nb) -> str:
    import nbformat

    return nbformat.writes(nb) + "\n"


def sync_notebooks(root: Path, check: bool = False) -> list[Path]:
    """Bring every chapter notebook's setup cell and ``.ipynb`` copy up to date.

    Returns the files that were (or, with ``check=True``, would be) rewritten.
    """
    root = Path(root)
    expected = colab_setup_source(root)
    stale: list[Path] = []
    for md in chapter_notebooks(root):
        if check:
            nb = paired_notebook(md)
            first = next((c for c in nb.cells if c.cell_type == "code"), None)
            if first is None or first.source.strip() != expected.strip():
                stale.append(md)
        elif _fix_setup_cell(md, expected):
            stale.append(md)
        target = md.with_suffix(".ipynb")
        text = ipynb_text(paired_notebook(md))
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            stale.append(target)
            if not check:
                target.write_text(text, encoding="utf-8")
    # a .ipynb whose .md source is gone is stale too
    for ipynb in sorted((root / "chapters").rglob("*.ipynb")):
        if ".ipynb_checkpoints" not in ipynb.parts and not ipynb.with_suffix(".md").exists():
            stale.append(ipynb)
            if not check:
                ipynb.unlink()
    return stale
