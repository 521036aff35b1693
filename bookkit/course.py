r"""A teacher's nbgrader course of every chapter's exercises, in a folder the build never deletes.

``python -m bookkit course --out PATH`` (``make course COURSE=PATH``) writes

* ``PATH/nbgrader_config.py``: the course id and the per-cell timeout the solutions need (written once;
  a teacher's edits are kept);
* ``PATH/source/<chapter>/exercises.ipynb``: the instructor version. Code solutions between
  ``### BEGIN SOLUTION`` and ``### END SOLUTION`` and hidden tests, for nbgrader to strip; every conceptual
  exercise with a manually graded Markdown answer cell holding the model answer (nbgrader replaces it by
  "YOUR ANSWER HERE" in the release); the author's hidden checks, cells tagged ``solution`` and the
  discussion after each autograded cell removed; MyST as plain Markdown; a first cell that installs the
  companion library from the course's wheel when it is missing;
* ``PATH/release/<chapter>/exercises.ipynb``: what students get (``nbgrader generate_assignment``);
* ``PATH/wheel/iclr2025_reproduced-<version>-py3-none-any.whl``: the companion library for students and
  for the grading environment (``pip install`` it);
* ``PATH/README.md``: the teacher's steps.

It refuses a folder that holds something other than a course, and never touches ``submitted/``,
``autograded/``, ``feedback/`` or ``gradebook.db`` itself; a chapter whose instructor version changed
while students have submitted it is not regenerated (the command stops and says which).
``make assignments`` builds a throw-away course in ``_build/assignments`` the same way (``scratch``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

from .colab import SETUP_MARKER, chapter_notebooks, ipynb_text
from .student import convert_cells, run_nbgrader, student_notebook

__all__ = ["ANSWER_POINTS", "CELL_TIMEOUT", "COURSE_ID", "make_course", "course_source", "install_cell_source",
           "answer_checks", "CourseError"]

COURSE_ID = "iclr2025-reproduced"
#: points of a conceptual exercise's manually graded answer
ANSWER_POINTS = 2
#: seconds one cell may run when nbgrader executes a submission. Measured: the slowest cell of any chapter's
#: solutions took 58 s on the book's two-core machine while other jobs ran (tests/test_assignments.py
#: records the run times of its autograding); nbgrader's default, 30 s, would score such cells zero.
#: Ten times the measurement leaves room for a slower grading machine.
CELL_TIMEOUT = 600
_KEEP = ("submitted", "autograded", "feedback", "gradebook.db", "exchange")
_OURS = {"source", "release", "wheel", "nbgrader_config.py", "README.md", ".course.json", *_KEEP,
         "nbgrader.log", ".ipynb_checkpoints"}


class CourseError(RuntimeError):
    """The course folder cannot be written without losing something (said in the message)."""


def install_cell_source(wheel_name: str) -> str:
    """The first cell of a course notebook: install the companion library from the course's wheel if missing."""
    return (
        "# Setup: this notebook needs the book's companion library (`companion_lib`).\n"
        "# Install it once in the environment that runs this notebook, from the wheel your teacher hands out:\n"
        f"#     pip install {wheel_name}\n"
        "# In Colab or Jupyter, put the wheel next to this notebook (in Colab: the Files pane) and run this cell.\n"
        "import glob, importlib.util\n\n"
        'if importlib.util.find_spec("companion_lib") is None:\n'
        '    _wheels = sorted(glob.glob("iclr2025_reproduced-*.whl"))\n'
        "    if not _wheels:\n"
        f'        raise ModuleNotFoundError("companion_lib is not installed: pip install {wheel_name}")\n'
        "    %pip install --quiet {_wheels[-1]}")


def _exercise_groups(cells) -> list[list[int]]:
    """Cell indices grouped by exercise (a group starts at a Markdown cell that opens an exercise)."""
    start = re.compile(r"^\s*(?:#{1,6}\s+(?:\S+\s+)?Exercise\b|\*\*Exercise\s+\d+)", re.M)
    groups, current = [], []
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown" and start.search(cell.source) and current:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def course_source(md: Path, wheel_name: str, chapter=None):
    """The instructor's version of a chapter's exercises notebook (see the module docstring)."""
    import jupytext

    from .myst import Chapter, Page

    md = Path(md)
    chapter = chapter or Chapter(md.parent, md.parents[2])
    nb = jupytext.reads(md.read_text(encoding="utf-8"), fmt="md:myst")
    nb = student_notebook(nb)
    nb = convert_cells(nb, Page(chapter, md.stem, target="course"))
    for cell in nb.cells:
        if cell.cell_type == "code" and SETUP_MARKER in cell.source:
            cell.source = install_cell_source(wheel_name)
            cell.metadata.pop("tags", None)
    # a conceptual exercise (no code solution in its group) gets its model answer as an answer cell;
    # an exercise with a code solution keeps only the code (its prose solution is dropped)
    keep = []
    for group in _exercise_groups(nb.cells):
        coded = any(nb.cells[i].cell_type == "code" and nb.cells[i].metadata.get("nbgrader", {}).get("solution")
                    for i in group)
        for i in group:
            cell = nb.cells[i]
            if "answer" in cell.metadata:
                number = cell.metadata.pop("answer")
                if coded:
                    continue
                cell.metadata["nbgrader"] = {"grade": True, "solution": True, "locked": False, "task": False,
                                             "points": ANSWER_POINTS, "grade_id": f"answer-exercise-{number}",
                                             "schema_version": 3}
                cell.source = f"**Your answer to Exercise {number}.**\n\n" + cell.source
            keep.append(cell)
    nb.cells = keep
    nb.metadata.pop("jupytext", None)
    return nb


def answer_checks(nb) -> list[tuple[int, str]]:
    """Visible code cells between a conceptual exercise's answer cell and the next exercise: they run
    beside the worked answer and may print it (tag such a cell ``solution`` to keep it out of the course)."""
    found = []
    for group in _exercise_groups(nb.cells):
        answered = False
        for i in group:
            cell = nb.cells[i]
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "markdown" and meta.get("solution") and meta.get("grade"):
                answered = True
            elif answered and cell.cell_type == "code" and not meta:
                found.append((i, cell.source))
    return found


def _wheel(root: Path, out: Path) -> Path:
    from .colabcheck import build_wheel

    return build_wheel(root, out)


def _config_text(course_id: str, timeout: int) -> str:
    return f'''# nbgrader configuration of the course "{course_id}", written by `make course` (your edits are kept:
# `make course` writes this file only when it is missing).
c = get_config()  # noqa: F821

c.CourseDirectory.course_id = "{course_id}"
# Seconds one cell may run when nbgrader executes a submission (autograde, validate). nbgrader's default,
# 30 s, is below what some solutions need on a laptop (bookkit/course.py says how this was measured).
c.Execute.timeout = {timeout}
c.ExecutePreprocessor.timeout = {timeout}
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.md", "*.whl"]
'''


def _readme(course_id: str, wheel: str, chapters: list[str]) -> str:
    listing = "\n".join(f"- `{c}`" for c in chapters)
    return f"""# {course_id}: the exercises of "ICLR 2025, Reproduced" as an nbgrader course

Written by `make course` from the book's repository. Run it again after pulling the book: it rewrites
`source/` and `release/` only (and refuses to change an assignment that students have submitted); it never
touches `submitted/`, `autograded/`, `feedback/` or `gradebook.db`.

1. **The grading environment** needs the companion library: `pip install wheel/{wheel}` (Python 3.10 or
   later; the book is tested on 3.11), and nbgrader.
2. **Hand out** `release/<chapter>/exercises.ipynb` (nbgrader's exchange on JupyterHub, or by hand) together
   with `wheel/{wheel}`. Students install the wheel once (`pip install {wheel}`); in Colab they upload it
   next to the notebook and the notebook's first cell installs it. nbgrader's validate and submit
   extensions do not work in Colab: Colab students hand in the file, keeping its name `exercises.ipynb`.
3. **Collect** each submission as `submitted/<student>/<chapter>/exercises.ipynb`.
4. **Grade** from this folder: `nbgrader autograde <chapter>`, then grade the conceptual answers (manually
   graded cells, {ANSWER_POINTS} points each) with `nbgrader formgrader`, then `nbgrader generate_feedback <chapter>`.

The per-cell timeout and the course id are in `nbgrader_config.py`. The model answers of the conceptual
exercises are in the answer cells of `source/`, which students never see; the public website shows every
solution, so host the book's student edition (`make book-student`) for a course.

Chapters (assignments):

{listing}
"""


def _submitted(course: Path, assignment: str) -> list[Path]:
    return sorted((course / "submitted").glob(f"*/{assignment}"))


def make_course(root: Path, out: Path, course_id: str = COURSE_ID, timeout: int = CELL_TIMEOUT,
                scratch: bool = False, log=print) -> list[Path]:
    """Write (or refresh) the nbgrader course in ``out`` (see the module docstring). Returns the releases.

    ``scratch``: ``out`` is a throw-away folder under ``_build`` (``make assignments``, the tests), emptied
    first. Otherwise ``out`` must be outside ``_build`` and either empty or a course this command wrote.
    """
    from .myst import Bibliography, Chapter

    root, out = Path(root).resolve(), Path(out).resolve()
    if scratch:
        if out.exists():
            shutil.rmtree(out)
    else:
        build = (root / "_build").resolve()
        if out == build or build in out.parents:
            raise CourseError(f"{out} is inside {build}, which `make clean` deletes: put the course elsewhere")
        if out.exists() and any(out.iterdir()):
            strangers = sorted(p.name for p in out.iterdir() if p.name not in _OURS)
            if not (out / ".course.json").exists() or strangers:
                raise CourseError(f"{out} is not empty and is not a course written by `make course`"
                                  + (f" (it holds {', '.join(strangers[:5])})" if strangers else ""))
    out.mkdir(parents=True, exist_ok=True)
    wheel = _wheel(root, out / "wheel")
    bibliography = Bibliography(root / "book" / "references.bib")
    exercises = [md for md in chapter_notebooks(root) if md.name == "exercises.md"]
    sources = {md.parent.name: ipynb_text(course_source(md, wheel.name, Chapter(md.parent, root, bibliography)))
               for md in exercises}
    changed = [a for a, text in sources.items()
               if not (out / "source" / a / "exercises.ipynb").exists()
               or (out / "source" / a / "exercises.ipynb").read_text(encoding="utf-8") != text
               or not (out / "release" / a / "exercises.ipynb").exists()]
    blocked = [a for a in changed if _submitted(out, a)]
    if blocked:
        raise CourseError("students have submitted these assignments and the book's version of them changed; "
                          "regenerating would orphan their grades, so nothing was written: " + ", ".join(blocked)
                          + ". Grade them first, or write the new version into a new course folder.")
    if not (out / "nbgrader_config.py").exists():
        (out / "nbgrader_config.py").write_text(_config_text(course_id, timeout), encoding="utf-8")
    (out / "README.md").write_text(_readme(course_id, wheel.name, sorted(sources)), encoding="utf-8")
    for assignment in changed:
        target = out / "source" / assignment / "exercises.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(sources[assignment], encoding="utf-8")
    # one nbgrader process releases every assignment when all changed (a new course: 5 s, not 19 starts of
    # nbgrader at 2.5 s each); a refresh releases only the changed ones
    for batch in (["*"] if changed and sorted(changed) == sorted(sources) else changed):
        run_nbgrader(out, "generate_assignment", batch, "--force")
    for assignment in changed:
        log(f"released: {out / 'release' / assignment / 'exercises.ipynb'}")
    (out / ".course.json").write_text(json.dumps({
        "course_id": course_id, "written_by": "make course",
        "sources": {a: hashlib.sha256(t.encode()).hexdigest()[:16] for a, t in sorted(sources.items())}},
        indent=1), encoding="utf-8")
    return [out / "release" / a / "exercises.ipynb" for a in sorted(sources)]
