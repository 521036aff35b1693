"""The student edition and the course kit: solutions stripped, exercises released with nbgrader.

* :func:`make_student_source` writes the sources of the website with solutions hidden;
* :func:`make_assignments` builds an nbgrader course and releases every chapter's exercises
  (:func:`release_notebook`: author checks and result discussions dropped, MyST as plain Markdown);
* :func:`solution_snippets` lists the lines that a release must not contain.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from .colab import SETUP_MARKER, chapter_notebooks, ipynb_text

__all__ = ["SOLUTION_PLACEHOLDER", "strip_solutions", "solution_snippets", "student_notebook", "myst_to_markdown",
           "release_notebook", "make_assignments", "run_nbgrader", "make_student_source"]


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
        target.write_text(ipynb_text(nb), encoding="utf-8")
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
