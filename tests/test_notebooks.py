"""The readers' toolchain: Colab setup cells, the Colab .ipynb copies, the website's links, and a
Colab-like run of a chapter from an installed wheel, outside the repository."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bookkit.colab import chapter_notebooks, colab_setup_source, paired_notebook, sync_notebooks
from bookkit.pytest_notebooks import read_notebook

ROOT = Path(__file__).resolve().parents[1]
STRUCTURE = ROOT / "_build" / "structure"
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


def test_paired_ipynb_have_no_outputs_and_stable_ids():
    for md in NOTEBOOKS:
        data = json.loads(md.with_suffix(".ipynb").read_text(encoding="utf-8"))
        ids = [c["id"] for c in data["cells"]]
        assert len(ids) == len(set(ids))
        assert all(not c.get("outputs") for c in data["cells"] if c["cell_type"] == "code")
        again = paired_notebook(md)
        assert [c["id"] for c in again.cells] == ids  # deterministic


# -- the website's links ---------------------------------------------------------------------------
def _structure_pages():
    if not (STRUCTURE / "index.html").exists():
        if os.environ.get("BOOK_REQUIRE_STRUCTURE"):
            pytest.fail("_build/structure was not built")
        pytest.skip("run `make structure` first")
    return [(md, STRUCTURE / md.relative_to(ROOT).with_suffix(".html")) for md in NOTEBOOKS]


def test_every_notebook_page_links_to_colab_and_a_notebook_download():
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repo = config["repository"]["url"].rstrip("/").removeprefix("https://github.com/")
    prefix = f"https://colab.research.google.com/github/{repo}/blob/{config['repository']['branch']}/"
    for md, page in _structure_pages():
        html = page.read_text(encoding="utf-8")
        colab = re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', html)
        assert colab, f"{page}: no Colab link"
        for link in colab:
            assert link.startswith(prefix), link
            target = ROOT / link.removeprefix(prefix)
            assert target.suffix == ".ipynb" and target.exists(), f"{page}: Colab link to missing {target}"
        downloads = re.findall(r'href="([^"]*_sources/[^"]+\.ipynb)"', html)
        assert downloads, f"{page}: no notebook download"
        for link in downloads:
            assert (page.parent / link).resolve().exists(), f"{page}: download link to missing {link}"


# -- a Colab reader: the installed package alone runs a chapter ------------------------------------
FASTEST = ROOT / "chapters" / "01-self-distillation" / "implement.ipynb"

_RUNNER = r"""
import sys, nbformat
from nbclient import NotebookClient
import companion_lib
assert "site-packages" in companion_lib.__file__, companion_lib.__file__
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=False).execute()
nbformat.write(nb, sys.argv[2])
print("executed with companion_lib from", companion_lib.__file__)
"""


@pytest.mark.slow
def test_wheel_contains_package_data(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    data = [p.relative_to(ROOT).as_posix() for p in (ROOT / "companion_lib").rglob("*")
            if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts
            and p.name != "README.md"]
    missing = [d for d in data if d not in names]
    assert not missing, f"package data missing from the wheel: {missing}"


@pytest.mark.slow
def test_a_chapter_runs_from_the_installed_wheel_outside_the_repository(tmp_path):
    """Build a wheel, install it into a fresh virtual environment outside the repository, copy one
    chapter's .ipynb alone into an empty folder and execute it there.

    The fresh environment reuses the test environment's third-party packages (read-only, through a
    path entry) instead of reinstalling torch; companion_lib itself comes only from the wheel.
    """
    if not FASTEST.exists():
        pytest.skip("paired notebooks not generated")
    wheels, env, work = tmp_path / "wheels", tmp_path / "venv", tmp_path / "reader"
    work.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(ROOT)], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    python = env / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    str(next(wheels.glob("*.whl")))], check=True, capture_output=True)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    # a plain path entry: .pth files there (the editable install of this repository) are NOT processed
    Path(site, "zz_test_environment.pth").write_text("\n".join(deps) + "\n")
    notebook = work / FASTEST.name
    notebook.write_bytes(FASTEST.read_bytes())
    (work / "runner.py").write_text(_RUNNER)
    env_vars = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER"))}
    env_vars.update(BOOK_CACHE_DIR=str(tmp_path / "cache"), BOOK_CLAIMS_DIR=str(tmp_path / "claims"),
                    PATH=f"{env / 'bin'}:{os.environ['PATH']}", VIRTUAL_ENV=str(env))
    result = subprocess.run([str(python), "runner.py", notebook.name, "out.ipynb"], cwd=work, env=env_vars,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert str(env) in result.stdout
    assert {p.name for p in work.iterdir()} == {"out.ipynb", "runner.py", notebook.name}


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
