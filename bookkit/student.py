"""The student edition and the course kit: solutions stripped, exercises released with nbgrader.

* :func:`make_student_source` writes the sources of the website with solutions hidden;
* :func:`release_notebook` is what a student sees of an exercises notebook (author checks and result
  discussions dropped, MyST as plain Markdown); the course itself is :mod:`bookkit.course`
  (:func:`make_assignments` writes a throw-away one);
* :func:`solution_snippets` lists the lines that a release must not contain.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from .colab import SETUP_MARKER, chapter_notebooks, ipynb_text
from .myst import myst_to_markdown

__all__ = ["SOLUTION_PLACEHOLDER", "SOLUTION_TAG", "convert_cells", "strip_solutions", "solution_snippets", "student_notebook", "myst_to_markdown",
           "release_notebook", "make_assignments", "run_nbgrader", "make_student_source"]


_SOLUTION_DIRECTIVE = re.compile(r"^(`{3,}|:{3,})\{solution\}.*?^\1[ \t]*$\n?", re.S | re.M)
_CODE_SOLUTION = re.compile(r"^([ \t]*)### BEGIN SOLUTION[ \t]*\n.*?^[ \t]*### END SOLUTION[ \t]*$", re.S | re.M)
_HIDDEN_TESTS = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[ \t]*\n.*?^[ \t]*### END HIDDEN TESTS[ \t]*\n?", re.S | re.M)
SOLUTION_PLACEHOLDER = "*The solution is not part of the student edition.*\n"
#: the tag of a code cell that belongs to a worked answer (dropped from the student edition and the course)
SOLUTION_TAG = "solution"


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


def _is_graded_test(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def student_notebook(nb, release: bool = True):
    """The cells of an exercises notebook that a student should see (a copy; ``nb`` is not changed).

    * Author check cells (tagged ``remove-cell``) are dropped; they hold the answers. The Colab setup
      cell stays (without the tag in a ``release``, so that Jupyter shows it; hidden on the website).
    * Cells tagged ``solution`` (code that belongs to a worked answer, e.g. a check that prints the
      closed form a conceptual exercise asks for) are dropped.
    * The discussion after an autograded test cell (which states the results) is dropped up to the
      next exercise (a heading, a bold "Exercise N" or an ``{exercise}`` box).
    """
    import copy

    nb = copy.deepcopy(nb)
    cells, after_test = [], False
    for cell in nb.cells:
        tags = list(cell.get("metadata", {}).get("tags", []))
        if cell.cell_type == "code" and SOLUTION_TAG in tags:
            continue
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


def convert_cells(nb, page):
    """``nb``'s Markdown cells converted by ``page`` (a :class:`bookkit.myst.Page`), each Markdown cell that
    shows glued numbers followed by the cell that fills them in; other cells as they are. Segments of kind
    ``"answer"`` (course sources) become Markdown cells with ``metadata["answer"]`` set to the exercise."""
    import nbformat

    from .colab import glue_cell_source

    cells = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            page.numbering["bold"] = None
            cells.append(cell)
            continue
        for segment in page.convert_markdown(cell.source):
            if segment.kind == "code":
                cells.append(nbformat.v4.new_code_cell(segment.source, metadata=dict(segment.metadata)))
                continue
            new = nbformat.v4.new_markdown_cell(segment.source)
            if segment.kind == "answer":
                new.metadata["answer"] = segment.metadata.get("exercise")
            cells.append(new)
            glue = glue_cell_source(segment.source) if segment.kind == "markdown" else None
            if glue is not None:
                cells.append(nbformat.v4.new_code_cell(glue, metadata={"cellView": "form"}))
    from .colab import _cell_id

    nb.cells = [c for c in cells if c.cell_type != "markdown" or c.source.strip()]
    seen: dict[str, int] = {}
    for cell in nb.cells:
        cell["id"] = _cell_id(cell, seen)
    return nb


def release_notebook(nb, chapter=None, stem: str = "exercises"):
    """The student release of an exercises notebook: :func:`student_notebook`, in plain Markdown
    (:mod:`bookkit.myst`; ``chapter``, a :class:`bookkit.myst.Chapter`, resolves references and citations)."""
    from .myst import Page

    nb = student_notebook(nb)
    return convert_cells(nb, Page(chapter, stem, target="release"))


def make_assignments(root: Path, out: Path) -> list[Path]:
    """A throw-away nbgrader course in ``out`` (emptied first; ``make assignments`` and the tests): the same
    course as :func:`bookkit.course.make_course` writes for a teacher. Returns the released notebooks."""
    from .course import make_course

    return make_course(root, out, scratch=True, log=lambda *_: None)


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
    (out / "bookkit").symlink_to(root / "bookkit")              # the book's Sphinx extension
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
