"""Tests of the build machinery (bookkit): the execution cache's key, claims read from rendered pages and
executed notebooks, the prose check and ``make reseed``'s argument handling. The site check, the Colab copies,
the course kit and the Sphinx extension have their own test files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bookkit import reseed
from bookkit.claims import claims_from_html, claims_from_notebook, rows_from_html
from bookkit.execution import invalidate_cache
from bookkit.prose import n_roles, paper_roles_without_source, typed_numbers
from companion_lib.common import ClaimTable

ROOT = Path(__file__).resolve().parents[1]


# -- the execution cache's key -----------------------------------------------------------------------
def test_typed_numbers_flags_typed_results_only():
    page = "\n".join([
        "---", "jupytext:", "  text_representation:", "    format_name: myst", "---",
        "# Figure 2 in miniature",
        "The gain is {glue:text}`gain` points; the paper reports {paper}`+12.6 (Fig. 2)`.",
        "See Fig. 3, Tables 2-4, Section 6 and Theorem 1; GPT-2 and 1-WL (ICLR 2025), $k = 4$, `x = 3`.",
        "1. A list item [link](https://example.org/v1.2)",
        "```{code-cell} ipython3", "x = 48", "```",
        ":::{note}", "It took 3 seconds.", ":::",
        "$$", "a = 0.5", "$$",
        "We ran 48 simulations and SD is ~10x faster at 25.7% noise.",
    ])
    found = [(line, number) for line, number, _ in typed_numbers(page)]
    assert found == [(14, "3"), (19, "48"), (19, "10x"), (19, "25.7%")]




def test_typed_numbers_reads_every_kind_of_prose_and_every_spelling():
    page = "\n".join([
        "## 2. A numbered heading and Eqs. (11) and (14)",          # exempt: heading number, references
        "| method | accuracy |", "|---|---|", "| CUT | 0.93 |",      # a Markdown table
        "Seven of the twelve runs, two thirds of them, in 30s at 64k tokens, 1.5-fold, a 3-layer net, the 5th seed.",
        "A lone $0.93$ is typed; $k = 4$ is math. One of them. 10⁵ and ½.",
        "In {n}`four` steps (a number of the text). The paper: {paper}`0.81 (Table 2)`; {paper}`0.5`.",
        "```{code-cell} ipython3", "---", "mystnb:", "  figure:", "    caption: |",
        "      Mirrors Fig. 2: accuracy 0.91 at 48 games.", "---", "x = 48", "```",
    ])
    found = [(line, number) for line, number, _ in typed_numbers(page)]
    assert found == [(4, "0.93"), (5, "30s"), (5, "64k"), (5, "1.5-fold"), (5, "3-layer"), (5, "5th"),
                     (5, "Seven"), (5, "twelve"), (5, "two thirds"), (6, "0.93"), (6, "⁵"), (6, "½"),
                     (13, "0.91"), (13, "48")]
    assert paper_roles_without_source(page) == [(7, "0.5")] and n_roles(page) == [(7, "four")]


def test_invalidate_cache_on_fingerprint_change(tmp_path):
    cache = tmp_path / ".jupyter_cache"
    cache.mkdir()
    assert invalidate_cache(cache) is True  # no stamp yet: cannot prove the cache is current
    assert not cache.exists()
    cache.mkdir()
    assert invalidate_cache(cache) is False  # stamp matches the current library
    assert cache.exists()
    stamp = tmp_path / ".jupyter_cache.companion_lib.fingerprint"
    stamp.write_text("0000000000000000\n")  # as if the library had changed
    assert invalidate_cache(cache) is True and not cache.exists()




# -- make reseed ---------------------------------------------------------------------------------------
def test_reseed_rejects_bad_arguments(capsys):
    for argv in (["--chapter", "01", "--seeds", "a b"], ["--chapter", "01", "--seeds", " "],
                 ["--chapter", "01", "--seeds", "1", "--timeout", "0"]):
        with pytest.raises(SystemExit) as info:
            reseed.main(argv)
        assert info.value.code == 2
    assert "--timeout must be a positive" in capsys.readouterr().err


def test_reseed_finds_exactly_one_chapter(tmp_path):
    for name in ("01-a", "02-b", "02-c"):
        (tmp_path / "chapters" / name).mkdir(parents=True)
    assert reseed.find_chapter(tmp_path, "01").name == "01-a"
    with pytest.raises(ValueError, match="exactly one chapter folder"):
        reseed.find_chapter(tmp_path, "02")
    with pytest.raises(ValueError, match="matches: none"):
        reseed.find_chapter(tmp_path, "09")
    with pytest.raises(ValueError, match="no reproduce"):
        reseed.reproduce_notebooks(tmp_path / "chapters" / "01-a")


def test_editing_the_build_package_keeps_the_execution_cache(tmp_path):
    # a copy of the repository's two packages; `python -m bookkit invalidate-cache` run there, as `make book` does
    for name in ("companion_lib", "bookkit"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "_build" / ".jupyter_cache"
    env = dict(os.environ, PYTHONPATH=str(tmp_path))

    def invalidate() -> str:
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "record").write_text("an executed notebook")
        out = subprocess.run([sys.executable, "-m", "bookkit", "invalidate-cache", "--cache", str(cache)],
                             cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
        return out.stdout

    used = subprocess.run([sys.executable, "-c", "import bookkit, companion_lib; print(bookkit.__file__, companion_lib.__file__)"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert all(Path(f).is_relative_to(tmp_path) for f in used)         # the copies run, not the checkout
    assert "emptied" in invalidate()                                    # no stamp yet: emptied once
    assert invalidate() == "" and (cache / "record").is_file()         # unchanged: kept
    sitecheck = tmp_path / "bookkit" / "sitecheck.py"
    sitecheck.write_text(sitecheck.read_text() + "\n# a fixed typo in the site check\n")
    assert invalidate() == "" and (cache / "record").is_file()         # build package edited: still kept
    glue_py = tmp_path / "companion_lib" / "common" / "glue.py"
    glue_py.write_text(glue_py.read_text() + "\n# a change in the library\n")
    assert "emptied" in invalidate()                                    # library edited: every notebook re-runs


def test_the_wheel_packages_only_the_library():
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == ["companion_lib*"]
    assert not any((ROOT / "companion_lib").rglob("*sitecheck*")) and not any((ROOT / "companion_lib").rglob("*reseed*"))


# -- claims as they travel -----------------------------------------------------------------------------
def _table() -> ClaimTable:
    t = ClaimTable("99-demo")
    t.declare("script", "a </script> in a claim", paper="Fig. 1", statistic="a score", competitor="half",
              margin=0.5, replicates=3, expect="reproduced")
    t.not_run("another", "another claim", paper="Table 2", reason="no data")
    values = np.array([0.74, 0.75, 0.76])
    t.decide("script", values)
    return t


def test_claims_are_read_from_the_html_the_table_displays():
    t = _table()
    html = t._repr_html_()
    assert html.count("</script>") == 1                                 # the row's text cannot end the element
    data = claims_from_html("<p>before</p>" + html)
    assert data == json.loads(json.dumps(t.to_dict())) and data["counts"]["reproduced as expected"] == 1
    assert rows_from_html(html)[0]["claim"] == "a </script> in a claim"
    assert claims_from_html("<table class='claims-table'></table>") is None and rows_from_html("") is None
    with pytest.raises(ValueError, match="claims"):
        claims_from_html('<script type="application/json" class="claims-data">{"n": 1}</script>')


def test_claims_are_read_from_the_last_table_of_an_executed_notebook():
    first, second = ClaimTable("99-a"), _table()
    first.declare("one", "one", paper="p", statistic="s", competitor="zero", margin=0.0, replicates=2,
                  expect="reproduced")
    x = np.array([1.0, 1.1])
    first.decide("one", x)
    nb = {"cells": [{"outputs": [{"data": {"text/html": first._repr_html_()}}]},
                    {"outputs": [{"data": {"text/plain": "x"}},
                                 {"data": {"text/html": second._repr_html_().splitlines(keepends=True)}}]},
                    {"outputs": [{"data": {"text/html": "<p>a figure</p>"}}]}]}
    assert claims_from_notebook(nb)["chapter"] == "99-demo"
    assert claims_from_notebook({"cells": []}) is None


# -- make test's scheduling (bookkit/pytest_notebooks.py) --------------------------------------------------
def test_schedule_groups_a_chapters_notebooks_and_each_test_file():
    from bookkit.pytest_notebooks import schedule_group

    assert schedule_group("chapters/07-strength-estimation/reproduce.md::Cell 12") == "chapters/07-strength-estimation"
    assert schedule_group("chapters/07-strength-estimation/derive.md::Cell 0") == "chapters/07-strength-estimation"
    assert schedule_group("tests/test_common.py::test_glue[3]") == "tests/test_common.py"
    assert schedule_group("tests/test_common.py") == "tests/test_common.py"


def test_order_by_schedule_puts_long_groups_first_and_keeps_each_group_in_order():
    from types import SimpleNamespace

    from bookkit.pytest_notebooks import UNLISTED_SECONDS_PER_TEST, order_by_schedule

    ids = ["tests/test_a.py::t1", "chapters/01-x/derive.md::Cell 0", "tests/test_a.py::t2",
           "chapters/01-x/reproduce.md::Cell 0", "chapters/02-y/derive.md::Cell 0", "tests/test_new.py::t1",
           "chapters/01-x/derive.md::Cell 1"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    seconds = {"chapters/02-y": 90.0, "chapters/01-x": 40.0, "tests/test_a.py": 5.0}
    order = [i.nodeid for i in order_by_schedule(items, seconds)]
    assert order == ["chapters/02-y/derive.md::Cell 0",
                     "chapters/01-x/derive.md::Cell 0", "chapters/01-x/reproduce.md::Cell 0",
                     "chapters/01-x/derive.md::Cell 1",
                     "tests/test_a.py::t1", "tests/test_a.py::t2", "tests/test_new.py::t1"]
    assert UNLISTED_SECONDS_PER_TEST * 1 < 5.0   # the unlisted module (one test) sorts after test_a.py
    assert sorted(order) == sorted(ids)


def test_load_schedule_reads_a_report_or_a_plain_table_and_refuses_anything_else(tmp_path):
    from bookkit.pytest_notebooks import load_schedule

    report = tmp_path / "runtime.json"
    report.write_text(json.dumps({"notebooks": {}, "groups": {"chapters/01-x": 12.5, "tests/test_a.py": 1}}))
    assert load_schedule(report) == {"chapters/01-x": 12.5, "tests/test_a.py": 1.0}
    plain = tmp_path / "schedule.json"
    plain.write_text(json.dumps({"chapters/01-x": 3}))
    assert load_schedule(plain) == {"chapters/01-x": 3.0}
    for bad in ([1, 2], {"chapters/01-x": "slow"}):
        plain.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match="group: seconds"):
            load_schedule(plain)


def test_the_committed_schedule_lists_every_chapter():
    from bookkit.pytest_notebooks import load_schedule

    seconds = load_schedule(ROOT / "bookkit" / "schedule.json")
    chapters = sorted(p.name for p in (ROOT / "chapters").iterdir() if p.is_dir() and p.name[:2].isdigit())
    missing = [c for c in chapters if f"chapters/{c}" not in seconds]
    assert not missing, f"bookkit/schedule.json has no seconds for {missing}: python -m bookkit schedule after make test"
    assert all(v >= 0 for v in seconds.values()) and all(seconds[f"chapters/{c}"] > 0 for c in chapters)


def test_a_scheduled_run_keeps_a_chapter_on_one_worker_and_reports_the_workers(tmp_path):
    """make test's options on a toy tree: the files of one chapter folder run on one worker, the longest group
    starts first, and the run-time report records the groups and both workers."""
    for chapter, n in (("01-a", 3), ("02-b", 2)):
        for i in range(n):
            path = tmp_path / "chapters" / chapter / f"test_{chapter[3]}{i}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("import os, time\n\ndef test_it():\n    time.sleep(0.3)\n"
                            f"    open({str(tmp_path / 'ran.txt')!r}, 'a').write("
                            f"'{chapter} ' + os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n")
    (tmp_path / "schedule.json").write_text(json.dumps({"chapters/02-b": 50, "chapters/01-a": 10}))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "bookkit.pytest_notebooks", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadscope", "--no-loadscope-reorder", "--schedule=schedule.json", "--runtime-report=rt.json",
         "-q", "chapters"], cwd=tmp_path, capture_output=True, text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stdout + result.stderr
    ran = [line.split() for line in (tmp_path / "ran.txt").read_text().splitlines()]
    workers = {c: {w for ch, w in ran if ch == c} for c in ("01-a", "02-b")}
    assert all(len(w) == 1 for w in workers.values()), ran
    report = json.loads((tmp_path / "rt.json").read_text())
    assert set(report["groups"]) == {"chapters/01-a", "chapters/02-b"} and report["groups"]["chapters/01-a"] >= 0.9
    assert len(report["workers"]) == 2 and all(r["busy_seconds"] > 0 for r in report["workers"].values())
    no_reorder = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "bookkit.pytest_notebooks", "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadscope", "--schedule=schedule.json", "-q", "chapters"], cwd=tmp_path, capture_output=True,
        text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert no_reorder.returncode != 0 and "--no-loadscope-reorder" in no_reorder.stdout + no_reorder.stderr


def test_run_with_parameters_reports_a_timeout_after_the_checked_section(tmp_path):
    """With the page's checks off before a heading, a failed check there is tolerated, but a cell that times out
    (no error output of its own, only the kernel's interrupt) is reported as the timeout it was."""
    page = tmp_path / "page.md"
    page.write_text("---\njupytext:\n  text_representation:\n    format_name: myst\nkernelspec:\n  name: python3\n"
                    "  display_name: Python 3\n  language: python\n---\n\n```{code-cell} ipython3\n:tags: [parameters]\n"
                    "wait = 0\n```\n\n```{code-cell} ipython3\nassert False, 'a check of the small run'\n```\n\n"
                    "## At full scale\n\n```{code-cell} ipython3\nimport time\ntime.sleep(wait)\n```\n", encoding="utf-8")
    _, _, error = reseed.run_with_parameters(page, {"wait": 0}, tmp_path / "out", "quick", timeout=30,
                                             checks_off_before="At full scale")
    assert error is None
    _, _, error = reseed.run_with_parameters(page, {"wait": 60}, tmp_path / "out", "slow", timeout=2,
                                             checks_off_before="At full scale")
    assert error is not None and "timed out" in error, error
