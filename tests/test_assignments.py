"""Course assignments: nbgrader releases that never leak a solution, and autograded checks that can fail."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bookkit.colab import SETUP_MARKER, chapter_notebooks
from bookkit.student import (make_assignments, make_student_source, myst_to_markdown, release_notebook, run_nbgrader,
                             solution_snippets, strip_solutions, student_notebook)

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = [md for md in chapter_notebooks(ROOT) if md.name == "exercises.md"]
GRADED_CHAPTER = "01-self-distillation"  # the fastest exercises notebook: autograded twice below


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


MYST_SYNTAX = re.compile(r"^\s*[`:]{3,}\{[\w:.-]+\}|\{[\w:.-]+\}`|^\([\w:.-]+\)=\s*$", re.M)


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
        for i in graded:  # no discussion of the results right after an autograded cell
            nxt = data["cells"][i + 1] if i + 1 < len(data["cells"]) else None
            if nxt is not None and nxt["cell_type"] == "markdown":
                first = "".join(nxt["source"]).lstrip()
                assert first.startswith(("#", "**Exercise")), f"{md.parent.name}: discussion after a graded cell: {first[:120]}"


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
    assert "**Exercise 1.**" in markdown and "> **Note.**" in markdown
    assert not MYST_SYNTAX.search(markdown), markdown


def test_myst_to_markdown_keeps_math_and_drops_targets():
    text = "(sec-a)=\n## A\n\n$$\nx^2\n$$ (eq-a)\n\nSee {ref}`the proof <sec-a>` and {math}`y`.\n"
    plain = myst_to_markdown(text)
    assert "(sec-a)=" not in plain and "$$\nx^2\n$$" in plain
    assert "See the proof and $y$." in plain


def _scores(course: Path, student: str) -> dict[str, tuple[float, float]]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook("exercises", GRADED_CHAPTER, student)
        return {g.name: (g.score, g.max_score) for g in nb.grades}


@pytest.mark.slow
def test_autograde_full_marks_for_solutions_and_zero_for_the_release(course):
    out, _ = course
    for student, source in (("instructor", out / "source"), ("student", out / "release")):
        target = out / "submitted" / student / GRADED_CHAPTER
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / GRADED_CHAPTER / "exercises.ipynb", target / "exercises.ipynb")
    run_nbgrader(out, "autograde", GRADED_CHAPTER, "--force", "--ExecutePreprocessor.timeout=600")
    instructor, student = _scores(out, "instructor"), _scores(out, "student")
    assert len(instructor) >= 2
    assert all(score == max_score > 0 for score, max_score in instructor.values()), instructor
    assert all(score == 0 for score, _ in student.values()), student


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
