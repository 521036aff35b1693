"""Course assignments: nbgrader releases that never leak a solution, and autograded checks that can fail."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from companion_lib.common.buildtools import (chapter_notebooks, make_assignments, make_student_source,
                                             run_nbgrader, solution_snippets, strip_solutions)

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


def _scores(course: Path, student: str) -> dict[str, tuple[float, float]]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        nb = gb.find_submission_notebook("exercises", GRADED_CHAPTER, student)
        return {g.name: (g.score, g.max_score) for g in nb.grades}


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


def test_student_edition_sources(tmp_path):
    out = make_student_source(ROOT, tmp_path / "student-src")
    import yaml

    config = yaml.safe_load((out / "_config.yml").read_text(encoding="utf-8"))
    assert config["sphinx"]["config"]["hide_solutions"] is True
    assert "*exercises*" in config["execute"]["exclude_patterns"]
    for md in EXERCISES:
        student = (out / md.relative_to(ROOT)).read_text(encoding="utf-8")
        assert not any(s in student for s in solution_snippets(md.read_text(encoding="utf-8"))), md
    assert (out / "companion_lib").resolve() == (ROOT / "companion_lib").resolve()
