"""Course assignments: nbgrader releases that never leak a solution, and autograded checks that can fail."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bookkit.colab import SETUP_MARKER, chapter_notebooks
from bookkit.course import (ANSWER_POINTS, CELL_TIMEOUT, COURSE_ID, CourseError, answer_checks, course_source,
                            make_course)
from bookkit.myst import RAW_MYST
from bookkit.student import (make_assignments, make_student_source, myst_to_markdown, release_notebook, run_nbgrader,
                             solution_snippets, strip_solutions, student_notebook)

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = [md for md in chapter_notebooks(ROOT) if md.name == "exercises.md"]
GRADED_CHAPTER = "01-self-distillation"  # the fastest exercises notebook
_EXERCISE_BOX = re.compile(r"^(`{3,}|:{3,})\{exercise\}.*?\n(.*?)^\1[ \t]*$", re.S | re.M)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    out = tmp_path_factory.mktemp("course")
    released = make_assignments(ROOT, out)
    return out, released


def test_every_chapter_has_code_exercises():
    for md in EXERCISES:
        text = md.read_text(encoding="utf-8")
        assert text.count("### BEGIN SOLUTION") >= 2, md
        assert text.count("solution: true") >= 2 and text.count("grade: true") >= 2, md


def test_strip_solutions_removes_solutions_and_hidden_tests():
    text = (ROOT / "chapters" / GRADED_CHAPTER / "exercises.md").read_text(encoding="utf-8")
    student = strip_solutions(text)
    assert "### BEGIN SOLUTION" not in student and "HIDDEN TESTS" not in student
    assert "{solution}" not in student and "raise NotImplementedError()" in student
    assert not any(snippet in student for snippet in solution_snippets(text))


@pytest.mark.slow
def test_release_never_leaks_a_solution(course):
    out, released = course
    assert sorted(p.parent.name for p in released) == sorted(md.parent.name for md in EXERCISES)
    for md in EXERCISES:
        snippets = solution_snippets(md.read_text(encoding="utf-8"))
        assert snippets, f"{md}: no solution text found to check"
        folder = out / "release" / md.parent.name
        files = [p for p in folder.rglob("*") if p.is_file()]
        assert [p.name for p in files] == ["exercises.ipynb"], files  # no source .md copied along
        for path in files:
            text = path.read_text(encoding="utf-8")
            leaked = [s for s in snippets if s in text or json.dumps(s)[1:-1] in text]
            assert not leaked, f"{path} leaks solution text: {leaked[:3]}"
            assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text


def author_check_snippets(text: str, min_length: int = 20) -> set[str]:
    """Distinctive lines of the author's hidden check cells (tagged remove-cell) of a MyST notebook."""
    import jupytext

    nb = jupytext.reads(text, fmt="md:myst")
    hidden = [c.source for c in nb.cells if c.cell_type == "code" and "remove-cell" in c.metadata.get("tags", [])
              and SETUP_MARKER not in c.source]
    shown = "\n".join(c.source for c in nb.cells if c.cell_type != "code" or "remove-cell" not in c.metadata.get("tags", []))
    return {line.strip() for cell in hidden for line in cell.splitlines()
            if len(line.strip()) >= min_length and line.strip() not in shown and not line.strip().startswith("#")}


MYST_SYNTAX = RAW_MYST


@pytest.mark.slow
def test_release_contains_only_what_a_student_should_see(course):
    out, _ = course
    for md in EXERCISES:
        text = md.read_text(encoding="utf-8")
        checks = author_check_snippets(text)
        data = json.loads((out / "release" / md.parent.name / "exercises.ipynb").read_text(encoding="utf-8"))
        released = json.dumps(data)
        leaked = [c for c in checks if c in released or json.dumps(c)[1:-1] in released]
        assert not leaked, f"{md.parent.name}: the release contains author checks: {leaked[:3]}"
        for cell in data["cells"]:
            source = "".join(cell["source"])
            assert "remove-cell" not in cell["metadata"].get("tags", []), f"{md.parent.name}: a remove-cell cell"
            if cell["cell_type"] == "markdown":
                assert not MYST_SYNTAX.search(source), f"{md.parent.name}: MyST syntax Jupyter cannot render: {source[:200]}"
        graded = [i for i, c in enumerate(data["cells"]) if c["cell_type"] == "code"
                  and c["metadata"].get("nbgrader", {}).get("grade") and not c["metadata"]["nbgrader"].get("solution")]
        boxes = [m.group(2) for m in _EXERCISE_BOX.finditer(text)]
        for i in graded:  # no discussion of the results right after an autograded cell
            nxt = data["cells"][i + 1] if i + 1 < len(data["cells"]) else None
            if nxt is not None and nxt["cell_type"] == "markdown":
                first = "".join(nxt["source"]).lstrip()
                # a heading, a bold "Exercise n", or the text of an {exercise} box of the page (an exercise
                # that continues the section's code exercise, announced by the section's heading)
                opening = first.split("\n", 1)[0].strip()
                assert first.startswith(("#", "**Exercise")) or any(opening and opening in box for box in boxes), (
                    f"{md.parent.name}: discussion after a graded cell: {first[:120]}")


def test_student_notebook_drops_author_checks_and_discussion():
    import jupytext

    text = """---
jupytext:
  text_representation:
    format_name: myst
kernelspec:
  name: python3
  display_name: Python 3
---

```{code-cell} ipython3
:tags: [remove-cell]

import sys

if "google.colab" in sys.modules:
    pass
```

## Exercise 1: a

```{exercise}
:label: ex-a

Compute $x$ as in {eq}`eq-x` (see {doc}`derive`).
```

```{code-cell} ipython3
---
nbgrader:
  grade: true
  solution: false
---
assert 1 + 1 == 2
```

```{code-cell} ipython3
:tags: [remove-cell]

assert kappa_answer_is_secret in (0.6, 1.05)
```

The result is 0.93, as the paper says.

## Exercise 2: b

```{note}
A hint.
```
"""
    nb = student_notebook(jupytext.reads(text, fmt="md:myst"))
    sources = [c.source for c in nb.cells]
    assert any(SETUP_MARKER in s for s in sources)
    assert not any("kappa_answer_is_secret" in s for s in sources)
    assert not any("0.93" in s for s in sources)
    assert any(s.startswith("## Exercise 2") for s in sources)
    assert all("remove-cell" not in c.metadata.get("tags", []) for c in nb.cells)
    released = release_notebook(jupytext.reads(text, fmt="md:myst"))
    markdown = "\n".join(c.source for c in released.cells if c.cell_type == "markdown")
    assert "## Exercise 1: a" in markdown and "> **Note.**" in markdown
    assert "**Exercise 1.**" not in markdown   # the heading already numbers the box
    assert not MYST_SYNTAX.search(markdown), markdown


def test_myst_to_markdown_keeps_math_and_drops_targets():
    text = "(sec-a)=\n## A\n\n$$\nx^2\n$$ (eq-a)\n\nSee {ref}`the proof <sec-a>` and {math}`y`.\n"
    plain = myst_to_markdown(text)
    assert "(sec-a)=" not in plain and "$$\nx^2\n\\tag{1}\n$$" in plain   # labelled equations are numbered
    assert "See the proof and $y$." in plain


def _scores(course: Path, chapter: str, student: str) -> dict[str, tuple[float | None, float, bool]]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook("exercises", chapter, student)
        return {g.name: (g.score, g.max_score, g.needs_manual_grade) for g in nb.grades}


def _cell_seconds(notebook: Path) -> list[float]:
    """Seconds each code cell of an executed notebook ran (nbclient's timing metadata)."""
    from datetime import datetime

    data = json.loads(notebook.read_text(encoding="utf-8"))
    seconds = []
    for cell in data["cells"]:
        timing = cell.get("metadata", {}).get("execution", {})
        start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        if start and end:
            parse = lambda t: datetime.fromisoformat(t.replace("Z", "+00:00"))
            seconds.append((parse(end) - parse(start)).total_seconds())
    return seconds


@pytest.fixture(scope="module")
def autograded(course):
    """Every chapter submitted twice, the instructor's solutions and the untouched release (an empty
    submission), and all of them autograded by one nbgrader process (one start instead of nineteen)."""
    out, _ = course
    for chapter in (md.parent.name for md in EXERCISES):
        for student, source in (("instructor", out / "source"), ("student", out / "release")):
            target = out / "submitted" / student / chapter
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / chapter / "exercises.ipynb", target / "exercises.ipynb")
    run_nbgrader(out, "autograde", "*", "--force", f"--Execute.timeout={CELL_TIMEOUT}")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("chapter", [md.parent.name for md in EXERCISES])
def test_autograde_full_marks_for_solutions_and_zero_for_an_empty_submission(autograded, chapter):
    """nbgrader autogrades the instructor's solutions to full marks on every autograded cell (the conceptual
    answers wait for a teacher) and the untouched release, an empty submission, to zero everywhere."""
    out = autograded
    instructor, student = _scores(out, chapter, "instructor"), _scores(out, chapter, "student")
    autograded = {k: v for k, v in instructor.items() if not k.startswith("answer-")}
    answers = {k: v for k, v in instructor.items() if k.startswith("answer-")}
    assert len(autograded) >= 2, instructor
    assert all(score == max_score > 0 for score, max_score, _ in autograded.values()), autograded
    assert all(needs and max_score == ANSWER_POINTS for _, max_score, needs in answers.values()), answers
    assert all(score == 0 and not needs for score, _, needs in student.values()), student
    seconds = _cell_seconds(out / "autograded" / "instructor" / chapter / "exercises.ipynb")
    record = Path(__file__).resolve().parents[1] / "_build" / "course-cell-seconds.json"
    try:
        known = json.loads(record.read_text(encoding="utf-8")) if record.exists() else {}
        known[chapter] = max(seconds, default=0.0)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(known, indent=1, sort_keys=True), encoding="utf-8")
    except OSError:
        pass
    assert max(seconds, default=0.0) < CELL_TIMEOUT / 3, (
        f"{chapter}: a solution cell ran {max(seconds):.0f} s, too close to the course's per-cell timeout "
        f"({CELL_TIMEOUT} s, bookkit/course.py)")


@pytest.mark.slow
def test_student_edition_sources(tmp_path):
    out = make_student_source(ROOT, tmp_path / "student-src")
    import yaml

    config = yaml.safe_load((out / "_config.yml").read_text(encoding="utf-8"))
    assert config["sphinx"]["config"]["hide_solutions"] is True
    assert config["sphinx"]["config"]["bookpages_runtime_report"].endswith("_build/runtime.json")
    assert "*exercises*" in config["execute"]["exclude_patterns"]
    for md in EXERCISES:
        student = (out / md.relative_to(ROOT)).read_text(encoding="utf-8")
        source = md.read_text(encoding="utf-8")
        assert not any(s in student for s in solution_snippets(source)), md
        assert not any(s in student for s in author_check_snippets(source)), md
    assert (out / "companion_lib").resolve() == (ROOT / "companion_lib").resolve()
    assert (out / "bookkit").resolve() == (ROOT / "bookkit").resolve()      # the Sphinx extension


# -- the course kit --------------------------------------------------------------------------------------
def _exercise_count(md: Path) -> int:
    """Exercises of a chapter page: its {exercise} boxes, or its "Exercise N" headings where it has no boxes."""
    text = md.read_text(encoding="utf-8")
    boxes = len(re.findall(r"^[`:]{3,}\{exercise\}", text, re.M))
    headings = len(set(re.findall(r"^#{2,4}\s+(?:\S+\s+)?Exercise\s+(\d+)", text, re.M)))
    return max(boxes, headings)


@pytest.mark.slow
def test_every_exercise_has_an_answer_cell(course):
    """Each exercise of the release has somewhere to answer: a code solution cell (autograded) or, for a
    conceptual one, a manually graded Markdown answer cell; model answers stay in the instructor's source."""
    out, _ = course
    for md in EXERCISES:
        release = json.loads((out / "release" / md.parent.name / "exercises.ipynb").read_text(encoding="utf-8"))
        source = json.loads((out / "source" / md.parent.name / "exercises.ipynb").read_text(encoding="utf-8"))
        meta = lambda c: c["metadata"].get("nbgrader", {})
        code = {meta(c)["grade_id"] for c in release["cells"] if c["cell_type"] == "code" and meta(c).get("solution")}
        answers = [c for c in release["cells"] if c["cell_type"] == "markdown" and meta(c).get("solution")]
        assert all(meta(c).get("grade") and meta(c).get("points") == ANSWER_POINTS for c in answers), md
        assert all("".join(c["source"]).strip() == "YOUR ANSWER HERE" for c in answers), md
        model = [c for c in source["cells"] if c["cell_type"] == "markdown" and meta(c).get("solution")]
        assert len(model) == len(answers) and all(len("".join(c["source"])) > 80 for c in model), md
        n_code = len({g.split("-solution")[0] for g in code}) if code else 0
        assert len(answers) + n_code >= _exercise_count(md), (
            f"{md.parent.name}: {_exercise_count(md)} exercises but {len(answers)} answer cells and "
            f"{n_code} code solutions")
        if re.search(r"^[`:]{3,}\{solution\}", md.read_text(encoding="utf-8"), re.M):
            assert answers, f"{md.parent.name}: conceptual solutions but no answer cell"


@pytest.mark.slow
def test_release_prints_no_answer(course):
    """No answer shows in a release: no outputs, and no visible code cell beside a conceptual exercise's
    worked answer (such a cell runs with the answer and prints it, e.g. the closed form the exercise asks
    for). Tag such a cell `solution` in the chapter's exercises.md to keep it out of the course."""
    out, _ = course
    problems = []
    for md in EXERCISES:
        release = json.loads((out / "release" / md.parent.name / "exercises.ipynb").read_text(encoding="utf-8"))
        assert not [c for c in release["cells"] if c.get("outputs")], f"{md.parent.name}: a release with outputs"
        import nbformat

        source = nbformat.read(out / "source" / md.parent.name / "exercises.ipynb", as_version=4)
        for _, code in answer_checks(source):
            first = next((l for l in code.splitlines() if l.strip()), "")
            line = next((i + 1 for i, l in enumerate(md.read_text(encoding="utf-8").splitlines()) if l == first), "?")
            problems.append(f"{md.relative_to(ROOT)}:{line}: {first[:80]}")
    assert not problems, ("visible cells that run beside a worked answer (tag them `solution`):\n" + "\n".join(problems))


@pytest.mark.slow
def test_course_config_and_install_cell(course):
    out, _ = course
    config = (out / "nbgrader_config.py").read_text(encoding="utf-8")
    assert f'course_id = "{COURSE_ID}"' in config and f"c.Execute.timeout = {CELL_TIMEOUT}" in config
    wheels = list((out / "wheel").glob("iclr2025_reproduced-*.whl"))
    assert len(wheels) == 1
    for md in EXERCISES:
        data = json.loads((out / "release" / md.parent.name / "exercises.ipynb").read_text(encoding="utf-8"))
        first = next(c for c in data["cells"] if c["cell_type"] == "code")
        source = "".join(first["source"])
        assert f"pip install {wheels[0].name}" in source and "git+" not in source, source
    assert "autograde" in (out / "README.md").read_text(encoding="utf-8")


def test_course_source_gives_conceptual_exercises_answer_cells():
    md = ROOT / "chapters" / GRADED_CHAPTER / "exercises.md"
    nb = course_source(md, "iclr2025_reproduced-0.1.0-py3-none-any.whl")
    answers = [c for c in nb.cells if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("solution")]
    assert answers and all(c.metadata["nbgrader"]["grade"] for c in answers)
    assert all(c.metadata["nbgrader"]["grade_id"].startswith("answer-exercise-") for c in answers)
    assert not any(RAW_MYST.search(c.source) for c in nb.cells if c.cell_type == "markdown")


def test_course_folder_is_refused_when_it_is_not_a_course(tmp_path):
    (tmp_path / "thesis.tex").write_text("mine")
    with pytest.raises(CourseError, match="not a course"):
        make_course(ROOT, tmp_path)
    with pytest.raises(CourseError, match="make clean"):
        make_course(ROOT, ROOT / "_build" / "my-course")
    assert (tmp_path / "thesis.tex").read_text() == "mine"


@pytest.mark.slow
def test_course_rebuild_keeps_submissions_and_refuses_to_change_submitted_assignments(tmp_path, monkeypatch):
    import bookkit.course as course_module

    out = tmp_path / "course"
    only = [md for md in chapter_notebooks(ROOT) if md.parent.name == GRADED_CHAPTER]
    monkeypatch.setattr(course_module, "chapter_notebooks", lambda root: only)
    make_course(ROOT, out, log=lambda *_: None)
    (out / "nbgrader_config.py").write_text((out / "nbgrader_config.py").read_text() + "# the teacher's line\n")
    submission = out / "submitted" / "ada" / GRADED_CHAPTER / "exercises.ipynb"
    submission.parent.mkdir(parents=True)
    submission.write_text("{}")
    gradebook = (out / "gradebook.db").read_bytes()
    make_course(ROOT, out, log=lambda *_: None)                    # nothing changed: nothing touched
    assert submission.read_text() == "{}" and (out / "gradebook.db").read_bytes() == gradebook
    assert (out / "nbgrader_config.py").read_text().endswith("# the teacher's line\n")
    source = out / "source" / GRADED_CHAPTER / "exercises.ipynb"
    source.write_text(source.read_text().replace("Exercise", "Exercize", 1))   # the book's version differs now
    with pytest.raises(CourseError, match="submitted"):
        make_course(ROOT, out, log=lambda *_: None)
    assert submission.read_text() == "{}" and (out / "gradebook.db").read_bytes() == gradebook
