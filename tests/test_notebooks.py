"""The readers' toolchain: Colab setup cells, the Colab .ipynb copies (plain Jupyter: no MyST left, glued
numbers, captions, the author's checks), the website's links, and Colab-like runs of the copies in a fresh
environment that holds only the wheel and its declared dependencies."""

from __future__ import annotations

import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from bookkit.colab import (CHECKS_TITLE, SETUP_MARKER, chapter_extra, chapter_notebooks, colab_setup_source,
                           hidden_cell_plan, paired_notebook, sync_notebooks)
from bookkit.myst import GLUE_MARKER, RAW_MYST, Chapter
from bookkit.colabcheck import build_wheel
from bookkit.pytest_notebooks import read_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = chapter_notebooks(ROOT)


def test_there_are_chapter_notebooks():
    assert NOTEBOOKS, "no chapter notebooks found"


@pytest.mark.parametrize("md", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_first_code_cell_is_the_colab_setup_cell(md):
    nb = read_notebook(md)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, f"{md} has no code cell"
    assert code[0].source.strip() == colab_setup_source(ROOT).strip(), (
        f"{md}: the first code cell must be the Colab setup cell; run `make notebooks`")
    others = [i for i, c in enumerate(code[1:], 1) if "google.colab" in c.source]
    assert not others, f"{md}: only the first code cell may install in Colab (cells {others})"


def test_colab_setup_cell_installs_this_version_from_config():
    source = colab_setup_source(ROOT)
    assert 'if "google.colab" in sys.modules:' in source  # never an ImportError fallback
    assert "git+https://github.com/" in source and "@v0." in source


def test_paired_ipynb_are_in_sync():
    stale = sync_notebooks(ROOT, check=True)
    assert not stale, "out of date (run `make notebooks`): " + ", ".join(str(p.relative_to(ROOT)) for p in stale)


def _copy(md: Path) -> dict:
    return json.loads(md.with_suffix(".ipynb").read_text(encoding="utf-8"))


def _source(cell) -> str:
    return "".join(cell["source"])


def test_paired_ipynb_have_no_outputs_and_stable_ids():
    for md in NOTEBOOKS:
        data = _copy(md)
        ids = [c["id"] for c in data["cells"]]
        assert len(ids) == len(set(ids))
        assert all(not c.get("outputs") for c in data["cells"] if c["cell_type"] == "code")
    md = NOTEBOOKS[0]
    chapter = Chapter(md.parent, ROOT)
    assert [c["id"] for c in paired_notebook(md, chapter).cells] == [c["id"] for c in _copy(md)["cells"]]  # deterministic


def test_colab_copies_hold_no_raw_myst():
    """Jupyter and Colab render CommonMark and math only: a role (`{name}` and a backtick), a directive fence,
    a `(label)=` target or a `+++` cell break left in a copy shows as raw text."""
    problems = []
    for md in NOTEBOOKS:
        for i, cell in enumerate(_copy(md)["cells"]):
            for line in _source(cell).splitlines():
                if RAW_MYST.search(line):
                    problems.append(f"{md.with_suffix('.ipynb').relative_to(ROOT)} cell {i}: {line.strip()[:100]}")
    assert not problems, "raw MyST in the Colab copies (run `make notebooks`):\n" + "\n".join(problems[:40])


def test_the_raw_myst_detector_catches_what_colab_shows_raw():
    from bookkit.myst import find_raw_myst, myst_to_markdown

    raw = ["the gain is {glue:text}`sd_gain`", "```{prf:theorem} T", ":::{note}", "(sec-a)=", "+++",
           "see {cite}`mobahi2020`"]
    assert all(RAW_MYST.search(line) for line in raw)
    assert not find_raw_myst("plain `code`, $x$ and [a link](derive.ipynb)\n```python\nx = 1\n```")
    converted = myst_to_markdown(":::{note}\nthe gain is {glue:text}`g`\n:::\n\n(sec-b)=\n## B\n")
    assert not find_raw_myst(converted) and "⟨g⟩" in converted and "> **Note.**" in converted
    # an inline code span that breaks across lines neither hides nor swallows the roles after it
    wrapped = myst_to_markdown("set `x =\ny` to {paper}`35 (Table 1)` and `a\nb` then {n}`three`.\n\n"
                               "`open\n\nstill {glue:text}`g`")
    assert not find_raw_myst(wrapped), wrapped
    assert "`x =\ny` to 35 (Table 1) and `a\nb` then three." in wrapped and "still ⟨g⟩" in wrapped


def test_colab_copies_show_every_glued_number():
    """Each Markdown cell with a glued number (the marker ⟨name⟩) is followed by the cell that shows it with
    the run's value; every name the MyST source glues into its prose appears in the copy."""
    from companion_lib.common.glue import MARKER

    assert MARKER.fullmatch(GLUE_MARKER.format("sd_gain.x-1"))
    for md in NOTEBOOKS:
        cells = _copy(md)["cells"]
        for i, cell in enumerate(cells):
            if cell["cell_type"] == "markdown" and MARKER.search(_source(cell)):
                nxt = cells[i + 1] if i + 1 < len(cells) else None
                assert nxt is not None and "show_glued(" in _source(nxt), f"{md}: cell {i} shows ⟨…⟩ with no value cell"
                assert nxt["metadata"].get("cellView") == "form"
                assert set(MARKER.findall(_source(nxt))) <= set(MARKER.findall(_source(cell)))
        names = set(re.findall(r"\{glue(?::text)?\}`([^`]+)`", md.read_text(encoding="utf-8")))
        shown = set(MARKER.findall("\n".join(_source(c) for c in cells if c["cell_type"] == "markdown")))
        assert names <= shown, f"{md}: glued names missing from the copy: {sorted(names - shown)[:5]}"


def test_colab_copies_put_every_caption_under_its_figure():
    for md in NOTEBOOKS:
        nb = read_notebook(md)
        captions = sum(1 for c in nb.cells if c.cell_type == "code"
                       and ((c.metadata.get("mystnb") or {}).get("figure") or {}).get("caption"))
        cells = _copy(md)["cells"]
        under = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown"
                 and re.match(r"^\*\*Figure \d+\.\*\* ", _source(c))]
        assert len(under) == captions, f"{md}: {captions} captions, {len(under)} caption cells"
        assert all(cells[i - 1]["cell_type"] == "code" for i in under)
        assert not any("mystnb" in c["metadata"] for c in cells)


def test_colab_copies_fold_or_label_the_authors_hidden_cells():
    """No hidden author cell appears as plain clutter: a check that can run last is in the one "Checks of
    this page" cell at the end; one that computes numbers for the text, or must run where it stands, is a
    collapsed form cell whose title says what it is."""
    for md in NOTEBOOKS:
        nb = read_notebook(md)
        plan = hidden_cell_plan(nb.cells)
        cells = _copy(md)["cells"]
        hidden = [c for c in cells if c["cell_type"] == "code" and "remove-cell" in c["metadata"].get("tags", [])
                  and SETUP_MARKER not in _source(c)]
        assert all(c["metadata"].get("cellView") == "form" and _source(c).startswith("#@title Hidden on the website")
                   for c in hidden), md
        assert len(hidden) == sum(kind != "fold" for kind in plan.values()), md
        folded = [kind for kind in plan.values() if kind == "fold"]
        checks = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and _source(c).startswith(CHECKS_TITLE)]
        assert bool(folded) == bool(checks), md
        if checks:
            code = [c for c in cells[checks[0] + 1:] if c["cell_type"] == "code"]
            assert len(code) == 1 and "page-checks" in code[0]["metadata"]["tags"], md


def test_colab_copies_install_their_chapters_extra():
    for md in NOTEBOOKS:
        first = next(c for c in _copy(md)["cells"] if c["cell_type"] == "code")
        assert _source(first) == colab_setup_source(ROOT, md.parent.name), md
    assert chapter_extra(ROOT, "15-event-isp") == "event-isp" and chapter_extra(ROOT, "01-self-distillation") is None
    assert "iclr2025-reproduced[event-isp] @ git+" in colab_setup_source(ROOT, "15-event-isp")


def test_colab_copies_cite_with_a_reference_list():
    for md in NOTEBOOKS:
        if "{cite}`" not in md.read_text(encoding="utf-8"):
            continue
        cells = _copy(md)["cells"]
        assert _source(cells[-1]).startswith("## References\n"), md


# -- a Colab reader: the wheel and its declared dependencies alone run the copies ------------------------
@pytest.mark.slow
def test_wheel_contains_package_data(tmp_path):
    wheel = build_wheel(ROOT, tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    data = [p.relative_to(ROOT).as_posix() for p in (ROOT / "companion_lib").rglob("*")
            if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts
            and p.name != "README.md"]
    missing = [d for d in data if d not in names]
    assert not missing, f"package data missing from the wheel: {missing}"


#: the Colab copy `make test` runs in the light environment (about 40 CPU seconds): a page whose prose quotes
#: glued numbers, so that glue() without myst-nb and the show_glued cells are exercised.
COLAB_SAMPLE = ["chapters/01-self-distillation/implement.ipynb"]


def test_a_colab_copy_runs_from_the_wheel_without_the_books_toolchain(tmp_path):
    """The cheap piece of `make colab-check` that `make test` runs: the wheel alone (no editable install), the
    book's toolchain (myst-nb, papermill, jupyter-book, jupytext, bookkit, ...) failing at import, and a Colab
    copy executed alone in an empty folder; its glued numbers reach the text."""
    from bookkit.colabcheck import light_environment, run_notebook

    python, kernels = light_environment(tmp_path / "env", ROOT)
    probe = subprocess.run([str(python), "-c", "import companion_lib, sys; print(companion_lib.__file__)\n"
                            "try:\n import myst_nb\nexcept ImportError: print('blocked')"],
                           capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert str(tmp_path / "env") in probe and str(ROOT / "companion_lib") not in probe and "blocked" in probe
    for name in COLAB_SAMPLE:
        keep = tmp_path / "executed.ipynb"
        record = run_notebook(python, kernels, ROOT / name, tmp_path / "work", timeout=600, keep=keep)
        assert record["status"] == "ran", f"{name}: cell {record['cell']}: {record['error']}"
        assert not record["unfilled"], f"{name}: glued numbers that never reached the text: {record['unfilled']}"
        shown = [o["data"]["text/markdown"] for c in json.loads(keep.read_text(encoding="utf-8"))["cells"]
                 if "show_glued(" in "".join(c.get("source", "")) for o in c.get("outputs", []) if "data" in o]
        assert shown and not any("⟨" in text for text in shown), shown


def test_the_light_environment_blocks_the_toolchain_and_reports_a_failing_copy(tmp_path):
    """run_notebook can fail: a copy that imports myst_nb fails there, naming the cell and the error."""
    import nbformat

    from bookkit.colabcheck import light_environment, run_notebook

    python, kernels = light_environment(tmp_path / "env", ROOT)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"),
                                         nbformat.v4.new_code_cell("from myst_nb import glue")])
    bad = tmp_path / "bad.ipynb"
    nbformat.write(nb, bad)
    record = run_notebook(python, kernels, bad, tmp_path / "work", timeout=120)
    assert record["status"] == "failed" and record["cell"] == 1 and "myst_nb" in record["error"], record


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("BOOK_COLAB_FRESH") != "1",
                    reason="downloads and installs the declared dependencies (GBs): BOOK_COLAB_FRESH=1, or make colab-check")
def test_colab_copies_run_from_the_wheel_in_a_fresh_environment():
    """Build the wheel, install it with its declared dependencies (every chapter extra) and nothing of the
    book's toolchain into a fresh virtual environment (reused under _build/colab-env while pyproject.toml's
    dependencies stay the same), and execute Colab copies there with nbclient, each alone in an empty
    folder outside the repository. BOOK_COLAB_SAMPLE=derive-implement: every derive and implement copy and
    the reduced reproduce copies of bookkit.colabcheck.REDUCED."""
    from bookkit.colabcheck import REDUCED, TOOLCHAIN, colab_environment, run_notebooks

    build = ROOT / "_build" / "colab-env"
    python, _ = colab_environment(ROOT, build, log=lambda *_: None)
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                            check=True).stdout.lower()
    assert not [t for t in TOOLCHAIN if f"{t}==" in listed.replace("_", "-")]
    where = subprocess.run([str(python), "-c", "import companion_lib; print(companion_lib.__file__)"],
                           capture_output=True, text=True, check=True, cwd=build).stdout
    assert "site-packages" in where and str(ROOT / "companion_lib") not in where
    if os.environ.get("BOOK_COLAB_SAMPLE") == "derive-implement":
        selection = [md.with_suffix(".ipynb").relative_to(ROOT).as_posix() for md in NOTEBOOKS
                     if md.stem in ("derive", "implement")] + sorted(REDUCED)
    else:
        selection = COLAB_SAMPLE + ["chapters/09-infomorphic-neurons/derive.ipynb"]   # the second needs its extra
    results = run_notebooks(ROOT, [ROOT / n for n in selection], build, jobs=int(os.environ.get("JOBS", "2")),
                            overrides=REDUCED, log=lambda *_: None, keep_executed=False)
    failed = {n: f"cell {r['cell']}: {r['error']}" for n, r in results.items() if r["status"] != "ran"}
    assert not failed, failed
    unfilled = {n: r["unfilled"] for n, r in results.items() if r.get("unfilled")}
    assert not unfilled, f"glued numbers that never reached the text: {unfilled}"


# -- navigation and page hygiene, checked on the sources (the site check reads the built pages) ------
CHAPTER_INDEXES = sorted((ROOT / "chapters").glob("*/index.md"))


def _toc_chapters() -> set[str]:
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    found = set()

    def walk(node):
        if isinstance(node, dict):
            if str(node.get("file", "")).startswith("chapters/") and node["file"].endswith("/index"):
                found.add(node["file"].split("/")[1])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(toc)
    return found


@pytest.mark.parametrize("index", [p for p in CHAPTER_INDEXES if p.parent.name in _toc_chapters()],
                         ids=lambda p: p.parent.name)
def test_every_overview_page_lists_its_notebooks_with_run_times(index):
    text = index.read_text(encoding="utf-8")
    assert "```{tableofcontents}" in text, f"{index}: no {{tableofcontents}} listing the chapter's notebooks"
    assert "```{notebook-runtimes}" in text, f"{index}: no {{notebook-runtimes}} table"


def test_every_chapter_in_the_book_is_on_its_part_page():
    listed = set()
    for part in sorted((ROOT / "book" / "parts").glob("part*.md")):
        text = part.read_text(encoding="utf-8")
        assert "```{part-chapters}" in text, f"{part}: the part page must list its chapters with {{part-chapters}}"
        listed |= set(re.findall(r"^(\d\d) \|", text, re.M))
    missing = sorted(c for c in _toc_chapters() if c[:2] not in listed)
    assert not missing, f"chapters in _toc.yml but on no part page: {missing}"


@pytest.mark.parametrize("md", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_setup_lines_print_nothing(md):
    """limit_threads() returns the thread count and seed_everything() a Generator: as the last line of a
    cell they print ``1`` or ``Generator(PCG64) at 0x...`` on the page. Assign them (``_ = ...``)."""
    nb = read_notebook(md)
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        lines = [l for l in cell.source.rstrip().splitlines() if l.strip() and not l.lstrip().startswith("#")]
        if lines and re.match(r"^(limit_threads|seed_everything)\(.*\)\s*(#.*)?$", lines[-1]):
            pytest.fail(f"{md}: code cell {i} ends with {lines[-1].strip()!r}, which prints its return value")
