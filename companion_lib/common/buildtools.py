"""Build helpers used by the Makefile and the tests (readers never need them).

* ``invalidate-cache``: empty Jupyter Book's execution cache when the companion library changed.
  jupyter-cache keys notebooks on their code cells only, so without this a library change would be
  served from stale outputs.
* ``cache-executed``: put the notebooks that ``make test`` executed under nbval into the book's execution
  cache, so that the book build serves them instead of executing everything twice; ``check-served``
  fails when the build had to execute a notebook itself.
* ``sync-notebooks``: write the Colab copy (``.ipynb``, no outputs, deterministic cell ids) of every
  chapter notebook next to its MyST source, after putting the one Colab setup cell (built from
  ``_config.yml``'s repository URL and the package version) at the top of every notebook.
  ``--check`` only reports what is out of date.

Run as ``python -m companion_lib.common.buildtools <command>`` from the repository root.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import sys
from pathlib import Path

from .cache import library_fingerprint

__all__ = ["invalidate_cache", "chapter_notebooks", "colab_setup_source", "paired_notebook",
           "sync_notebooks", "strip_solutions", "solution_snippets", "make_assignments", "run_nbgrader",
           "make_student_source", "cache_executed", "executed_during_build", "student_notebook",
           "myst_to_markdown", "release_notebook"]

_STAMP = "companion_lib.fingerprint"
SETUP_MARKER = 'if "google.colab" in sys.modules:'


# -- execution cache ---------------------------------------------------------------------------------
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


# -- notebooks ---------------------------------------------------------------------------------------
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


def _ipynb_text(nb) -> str:
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
        text = _ipynb_text(paired_notebook(md))
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


# -- the student edition and course assignments --------------------------------------------------
_SOLUTION_DIRECTIVE = re.compile(r"^(`{3,}|:{3,})\{solution\}.*?^\1[ \t]*$\n?", re.S | re.M)
_CODE_SOLUTION = re.compile(r"^([ \t]*)### BEGIN SOLUTION[ \t]*\n.*?^[ \t]*### END SOLUTION[ \t]*$", re.S | re.M)
_HIDDEN_TESTS = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[ \t]*\n.*?^[ \t]*### END HIDDEN TESTS[ \t]*\n?", re.S | re.M)
SOLUTION_PLACEHOLDER = "*The solution is not part of the student edition.*\n"


def strip_solutions(text: str, keep_code: bool = False) -> str:
    """Remove the worked solutions from a MyST exercises notebook (the student edition).

    ``{solution}`` directive blocks become a short placeholder; unless ``keep_code``, the code between
    ``### BEGIN SOLUTION`` and ``### END SOLUTION`` becomes nbgrader's stub and hidden tests are dropped.
    """
    text = _SOLUTION_DIRECTIVE.sub(SOLUTION_PLACEHOLDER, text)
    if not keep_code:
        text = _CODE_SOLUTION.sub(lambda m: f"{m.group(1)}# YOUR CODE HERE\n{m.group(1)}raise NotImplementedError()", text)
        text = _HIDDEN_TESTS.sub("", text)
    return text


def solution_snippets(text: str, min_length: int = 20) -> set[str]:
    """Distinctive lines of the worked solutions (code regions, hidden tests and ``{solution}`` blocks)
    that appear nowhere else in ``text``; a release that contains one of them leaks a solution."""
    regions = [m.group(0) for rx in (_SOLUTION_DIRECTIVE, _CODE_SOLUTION, _HIDDEN_TESTS) for m in rx.finditer(text)]
    outside = text
    for region in regions:
        outside = outside.replace(region, "")
    snippets = set()
    for region in regions:
        for line in region.splitlines():
            line = line.strip()
            if len(line) >= min_length and "SOLUTION" not in line and "HIDDEN TESTS" not in line \
                    and not line.startswith((":label:", ":class:", "```", ":::")) and line not in outside:
                snippets.add(line)
    return snippets


# what a student sees: no author checks, no discussion of results before solving, plain Markdown
_EXERCISE_START = re.compile(r"^\s*(#{1,6}\s|\*\*Exercise\b|[`:]{3,}\{exercise\})")
_DIRECTIVE_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:.-]+)\}[ \t]*(?P<arg>.*)$")
_ROLE = re.compile(r"\{(?P<name>[\w:.-]+)\}`(?P<body>[^`]*)`")
_ADMONITIONS = {"note", "tip", "hint", "important", "warning", "attention", "caution", "danger", "error",
                "seealso", "admonition"}


def _is_graded_test(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def student_notebook(nb, release: bool = True):
    """The cells of an exercises notebook that a student should see (a copy; ``nb`` is not changed).

    * Author check cells (tagged ``remove-cell``) are dropped; they hold the answers. The Colab setup
      cell stays (without the tag in a ``release``, so that Jupyter shows it; hidden on the website).
    * The discussion after an autograded test cell (which states the results) is dropped up to the
      next exercise (a heading, a bold "Exercise N" or an ``{exercise}`` box).
    """
    import copy

    nb = copy.deepcopy(nb)
    cells, after_test = [], False
    for cell in nb.cells:
        tags = list(cell.get("metadata", {}).get("tags", []))
        if cell.cell_type == "code" and "remove-cell" in tags:
            if SETUP_MARKER not in cell.source:
                continue
            if release:
                cell.metadata["tags"] = [t for t in tags if t != "remove-cell"]
                if not cell.metadata["tags"]:
                    del cell.metadata["tags"]
        if cell.cell_type == "markdown" and after_test:
            lines = cell.source.split("\n")
            start = next((i for i, line in enumerate(lines) if _EXERCISE_START.match(line)), None)
            if start is None:
                continue
            cell.source = "\n".join(lines[start:])
            after_test = False
        if cell.cell_type == "code":
            after_test = _is_graded_test(cell) or (after_test and "remove-cell" in tags)
        cells.append(cell)
    nb.cells = cells
    return nb


def _role_text(match: re.Match) -> str:
    name, body = match.group("name"), match.group("body")
    if name == "math":
        return f"${body}$"
    if name.startswith("cite"):
        return f"({body})"
    if name in ("eq", "numref", "ref", "doc", "prf:ref", "any", "term", "download"):
        explicit = re.match(r"^(.*?)\s*<[^<>]+>$", body)
        if explicit:
            return explicit.group(1)
        return {"eq": "the equation of the chapter's derive page", "doc": f"the *{body}* page",
                "prf:ref": "the result of the chapter's derive page"}.get(name, f"*{body}*")
    return body


def _numbering() -> dict:
    return {"current": 0, "section": None, "bold": None, "used": set()}


_EXERCISE_NUMBER = re.compile(r"^\s*(?:#{1,6}\s+|\*\*)Exercise\s+(\d+)\b")


def myst_to_markdown(text: str, state: dict | None = None) -> str:
    """MyST Markdown as plain Markdown that Jupyter and Colab render: directives become bold labels and
    block quotes, roles become their text, ``(label)=`` targets and directive options go.

    ``{exercise}`` boxes are numbered as on the website: the number of the "Exercise N" heading or
    bold paragraph right before them, else the next number; pass the same ``state`` dict for every
    cell of a notebook.
    """
    state = _numbering() if state is None else state
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _DIRECTIVE_OPEN.match(line.strip())
        number = _EXERCISE_NUMBER.match(line)
        heading = re.match(r"^\s*#{1,6}\s", line)
        if number:
            state["current"] = int(number.group(1))
            state["section" if heading else "bold"] = state["current"]
            if heading:
                state["bold"] = None
        elif heading:
            state["section"] = state["bold"] = None
        elif line.strip() and not m and (i == 0 or not lines[i - 1].strip()):
            state["bold"] = None  # a new paragraph between a bold "Exercise N" and a box
        if not m:
            if re.match(r"^\(\s*[\w:.-]+\s*\)=\s*$", line.strip()):
                i += 1
                continue
            line = re.sub(r"^(\s*\$\$)\s*\([\w:.-]+\)\s*$", r"\1", line)  # $$ (label)
            out.append(_ROLE.sub(_role_text, line))
            i += 1
            continue
        fence, name, arg = m.group("fence"), m.group("name"), m.group("arg").strip()
        j = i + 1
        depth = 1
        while j < len(lines):
            inner = lines[j].strip()
            if _DIRECTIVE_OPEN.match(inner) and inner.startswith(fence[0]) and len(re.match(r"^[`:]+", inner).group(0)) == len(fence):
                depth += 1
            elif inner == fence:
                depth -= 1
                if depth == 0:
                    break
            j += 1
        body = lines[i + 1:j]
        while body and re.match(r"^\s*:[\w-]+:", body[0]):
            body = body[1:]
        body_text = myst_to_markdown("\n".join(body), state).strip("\n")
        if name == "exercise":
            n = next((k for k in (state["section"], state["bold"]) if k is not None and k not in state["used"]),
                     state["current"] + 1)
            state["used"].add(n)
            state["current"], state["bold"] = max(state["current"], n), None
            title = f" ({_ROLE.sub(_role_text, arg)})" if arg else ""
            out.append(f"**Exercise {n}{title}.**\n\n{body_text}")
        elif name in ("math",):
            out.append(f"$$\n{body_text}\n$$")
        elif name in ("code-block", "code", "sourcecode"):
            out.append(f"```{arg}\n{body_text}\n```")
        elif name in _ADMONITIONS or name.startswith("prf:"):
            label = arg if name == "admonition" and arg else name.split(":")[-1].capitalize()
            quoted = "\n".join(f"> {l}" if l else ">" for l in body_text.split("\n"))
            out.append(f"> **{_ROLE.sub(_role_text, label)}.**\n>\n{quoted}")
        elif name in ("solution", "glue", "glue:figure", "glue:any", "tableofcontents", "notebook-runtimes"):
            pass
        else:
            out.append(body_text)
        i = j + 1
    return "\n".join(out)


def release_notebook(nb):
    """The student release of an exercises notebook: :func:`student_notebook`, in plain Markdown."""
    nb = student_notebook(nb)
    state = _numbering()
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = myst_to_markdown(cell.source, state)
        else:
            state["bold"] = None
    nb.cells = [c for c in nb.cells if c.cell_type != "markdown" or c.source.strip()]
    return nb


def make_assignments(root: Path, out: Path) -> list[Path]:
    """Build an nbgrader course in ``out`` and release every chapter's exercises with nbgrader.

    ``out/source/<chapter>/exercises.ipynb`` is the instructor version (conceptual solutions removed,
    code solutions kept for nbgrader to strip); ``out/release/<chapter>/exercises.ipynb`` is what
    students get. Source ``.md`` files never enter the course folder (and ``*.md`` is ignored anyway).
    Returns the released notebooks.
    """
    import jupytext

    root, out = Path(root).resolve(), Path(out).resolve()
    if out.exists():
        shutil.rmtree(out)
    chapters = [md for md in chapter_notebooks(root) if md.name == "exercises.md"]
    for md in chapters:
        nb = jupytext.reads(strip_solutions(md.read_text(encoding="utf-8"), keep_code=True), fmt="md:myst")
        nb = release_notebook(nb)
        nb.metadata.pop("jupytext", None)
        target = out / "source" / md.parent.name / "exercises.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_ipynb_text(nb), encoding="utf-8")
    released = []
    for md in chapters:
        assignment = md.parent.name
        run_nbgrader(out, "generate_assignment", assignment, "--force")
        released.append(out / "release" / assignment / "exercises.ipynb")
    return released


def run_nbgrader(course: Path, *args: str) -> None:
    import subprocess

    cmd = [sys.executable, "-m", "nbgrader", *args, f"--CourseDirectory.root={course}",
           "--CourseDirectory.ignore=['.ipynb_checkpoints', '*.pyc', '__pycache__', 'feedback', '*.md']",
           f"--CourseDirectory.db_url=sqlite:///{course / 'gradebook.db'}", "--log-level=WARN"]
    import os

    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    result = subprocess.run(cmd, cwd=course, capture_output=True, text=True, env=env)  # nbgrader runs `alembic`
    if result.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")


def make_student_source(root: Path, out: Path, cache: Path | None = None) -> Path:
    """Write the sources of the student edition of the website into ``out``.

    The book's pages are copied with every exercises notebook's solutions removed (code solutions
    become stubs, ``{solution}`` blocks disappear); the exercises are not executed; other notebooks
    reuse the main build's execution cache when it exists. Returns ``out``.
    """
    import yaml

    root, out = Path(root).resolve(), Path(out).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for folder in ("book", "chapters"):
        shutil.copytree(root / folder, out / folder, ignore=shutil.ignore_patterns("*.ipynb", "__pycache__"))
    for name in ("_toc.yml", "pyproject.toml"):
        shutil.copy2(root / name, out / name)
    (out / "companion_lib").symlink_to(root / "companion_lib")  # for the literalinclude directives
    import jupytext

    for md in (out / "chapters").rglob("exercises.md"):
        nb = student_notebook(jupytext.reads(strip_solutions(md.read_text(encoding="utf-8")), fmt="md:myst"),
                              release=False)
        md.write_text(jupytext.writes(nb, fmt="md:myst"), encoding="utf-8")
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    config["title"] = f"{config['title']} (student edition)"
    config.setdefault("execute", {})["exclude_patterns"] = ["*exercises*"]
    if cache is not None:
        config["execute"]["cache"] = str(Path(cache).resolve())
    sphinx_config = config.setdefault("sphinx", {}).setdefault("config", {})
    sphinx_config["hide_solutions"] = True
    sphinx_config["bookpages_runtime_report"] = str(root / "_build" / "runtime.json")  # run times of make test
    (out / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return out


# -- the test run's executed notebooks serve the book build -------------------------------------
EXECUTED_KEY = "iclr2025_executed"  # notebook metadata written by tests/executed_plugin.py


def _code_sources(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def cache_executed(executed: Path, cache: Path, root: Path = Path(".")) -> list[Path]:
    """Add the notebooks executed by ``make test`` (``tests/executed_plugin.py``) to the book's cache.

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m companion_lib.common.buildtools")
    sub = parser.add_subparsers(dest="command", required=True)
    inv = sub.add_parser("invalidate-cache", help="empty the execution cache after a library change")
    inv.add_argument("--cache", type=Path, required=True)
    inv.add_argument("--doctrees", type=Path, default=None, help="Sphinx's saved environment, removed with the cache")
    syn = sub.add_parser("sync-notebooks", help="update setup cells and the Colab .ipynb copies")
    syn.add_argument("--root", type=Path, default=Path("."))
    syn.add_argument("--check", action="store_true", help="only list what is out of date; exit 1 if anything is")
    asg = sub.add_parser("assignments", help="release every chapter's exercises with nbgrader")
    asg.add_argument("--root", type=Path, default=Path("."))
    asg.add_argument("--out", type=Path, required=True)
    stu = sub.add_parser("student-source", help="write the sources of the student edition")
    stu.add_argument("--root", type=Path, default=Path("."))
    stu.add_argument("--out", type=Path, required=True)
    stu.add_argument("--cache", type=Path, default=None)
    cex = sub.add_parser("cache-executed", help="serve the book build from the notebooks make test executed")
    cex.add_argument("--root", type=Path, default=Path("."))
    cex.add_argument("--executed", type=Path, required=True)
    cex.add_argument("--cache", type=Path, required=True)
    srv = sub.add_parser("check-served", help="fail if the book build executed a notebook itself")
    srv.add_argument("--cache", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "cache-executed":
        added = cache_executed(args.executed, args.cache, args.root)
        print(f"cache-executed: {len(added)} notebooks executed by the test run now serve the book build")
        return 0
    if args.command == "check-served":
        late = executed_during_build(args.cache)
        for uri in late:
            print(f"check-served: the book build executed {uri} again (not served from the test run)")
        if not late:
            print("check-served: every notebook page was served from the test run's outputs")
        return 1 if late else 0
    if args.command == "assignments":
        for path in make_assignments(args.root, args.out):
            print(f"released: {path}")
        return 0
    if args.command == "student-source":
        print(f"student edition sources: {make_student_source(args.root, args.out, args.cache)}")
        return 0
    if args.command == "invalidate-cache":
        if invalidate_cache(args.cache, (args.doctrees,) if args.doctrees else ()):
            print(f"companion_lib changed: emptied the execution cache {args.cache}")
        return 0
    if args.command == "sync-notebooks":
        changed = sync_notebooks(args.root, check=args.check)
        verb = "out of date" if args.check else "updated"
        for path in changed:
            print(f"{verb}: {path}")
        if not changed:
            print("notebooks: all in sync")
        return 1 if (args.check and changed) else 0
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
