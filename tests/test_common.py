"""Tests of companion_lib.common: seeding, threads, style, claims tables, glue, cache, timer."""

from __future__ import annotations

import json
import random
import shutil
import time

import matplotlib as mpl
import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info

from bookkit.claims import claims_from_html
from companion_lib.common import (
    ClaimsFailed, ClaimTable, disk_cache, glue, library_fingerprint, limit_threads,
    seed_everything, timer, use_book_style,
)
from companion_lib.common.glue import GluedText, format_value
from companion_lib.common.threads import default_threads


# -- seeding ---------------------------------------------------------------------------------------
def test_seed_everything_repeats_every_generator():
    def draw():
        rng = seed_everything(123)
        return random.random(), np.random.rand(), torch.rand(1).item(), rng.random()

    assert draw() == draw()


def test_seed_everything_different_seeds_differ():
    seed_everything(1)
    a = np.random.rand(3)
    seed_everything(2)
    assert not np.allclose(a, np.random.rand(3))


@pytest.mark.parametrize("bad, exc", [(-1, ValueError), (2**32, ValueError), (1.5, TypeError), ("3", TypeError), (True, TypeError)])
def test_seed_everything_rejects_bad_seeds(bad, exc):
    with pytest.raises(exc, match="seed"):
        seed_everything(bad)


# -- threads ---------------------------------------------------------------------------------------
def test_limit_threads_sets_torch_and_blas():
    before = torch.get_num_threads()
    try:
        assert limit_threads(1) == 1
        assert torch.get_num_threads() == 1
        assert all(pool["num_threads"] == 1 for pool in threadpool_info())
    finally:
        torch.set_num_threads(before)


def test_default_threads_reads_environment(monkeypatch):
    monkeypatch.setenv("BOOK_NUM_THREADS", "2")
    assert default_threads() == 2
    monkeypatch.setenv("BOOK_NUM_THREADS", "zero")
    with pytest.raises(ValueError, match="BOOK_NUM_THREADS"):
        default_threads()
    monkeypatch.setenv("BOOK_NUM_THREADS", "0")
    with pytest.raises(ValueError, match="BOOK_NUM_THREADS"):
        default_threads()


@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-2, ValueError), (1.0, TypeError)])
def test_limit_threads_rejects_bad_input(bad, exc):
    with pytest.raises(exc, match="n must"):
        limit_threads(bad)


# -- style -----------------------------------------------------------------------------------------
def test_use_book_style_sets_the_theme():
    use_book_style()
    assert mpl.rcParams["axes.spines.top"] is False
    assert mpl.rcParams["savefig.bbox"] == "tight"
    with pytest.raises(ValueError, match="context"):
        use_book_style("huge")


# -- claims ----------------------------------------------------------------------------------------
def _table():
    t = ClaimTable("99-demo")
    gain, gap = 3.14159, 0.2
    t.holds("gain grows with noise", paper="Fig. 2", book=gain, criterion="> 1", check=gain > 1)
    t.does_not_reproduce("gap above one", paper="Table 1: 1.5", book=gap, criterion="gap > 1",
                         check=gap > 1, reason="a tiny model")
    t.not_run("the ImageNet result", paper="Table 3", reason="no ImageNet here")
    return t


def test_claim_table_three_kinds_render_and_export(tmp_path):
    t = _table()
    t.assert_all()
    held, dnr, skipped = t.rows
    assert (held.kind, held.check, held.outcome, held.book) == ("holds", True, "held", "3.142")
    assert (dnr.kind, dnr.check, dnr.outcome) == ("does_not_reproduce", False, "did not reproduce")
    assert (skipped.kind, skipped.check, skipped.outcome, skipped.book) == ("not_run", None, "not run", "—")
    html = t._repr_html_()
    assert claims_from_html(html) == json.loads(json.dumps(t.to_dict()))   # the one encoding: JSON in the HTML
    assert "<table" in html and "a tiny model" in html and "did not reproduce" in html and "not run" in html
    assert list(t.to_frame().columns) == ["claim", "paper", "book", "criterion", "kind", "check", "outcome", "reason"]
    data = json.loads(t.export(tmp_path).read_text())
    assert data["chapter"] == "99-demo" and data["schema"] == 2
    assert data["counts"] == {"held": 1, "failed": 0, "did not reproduce": 1, "unexpectedly held": 0, "not run": 1}


def test_claim_table_fails_on_false_holds_and_on_strict_rows_that_hold():
    t = ClaimTable("99-demo")
    values = {"a": 0.0, "b": 2.0, "c": -1.0, "d": 5.0}
    t.holds("a", paper="1", book=values["a"], criterion=">= 1", check=values["a"] >= 1)
    t.holds("b", paper="1", book=values["b"], criterion=">= 1", check=values["b"] >= 1)
    t.holds("c", paper="1", book=values["c"], criterion=">= 1", check=np.bool_(values["c"] >= 1))
    t.does_not_reproduce("d", paper="1", book=values["d"], criterion=">= 1", check=values["d"] >= 1,
                         reason="expected to miss")
    assert [r.outcome for r in t.rows] == ["failed", "held", "failed", "unexpectedly held"]
    with pytest.raises(ClaimsFailed) as err:
        t.assert_all()
    msg = str(err.value)
    assert "3 of 4 claims" in msg and "- [failed] a:" in msg and "- [failed] c:" in msg
    assert "- [unexpectedly held] d:" in msg and "] b:" not in msg


def test_claim_table_rejects_literal_checks():
    t = ClaimTable("99-demo")
    with pytest.raises(TypeError, match="literal True"):
        t.holds("x", paper="1", book="1", criterion="c", check=True)
    with pytest.raises(TypeError, match="literal False"):
        t.does_not_reproduce("y", paper="1", book="1", criterion="c", check=False, reason="r")
    with pytest.raises(TypeError, match="literal None"):
        t.holds("z", paper="1", book="1", criterion="c",
                check=None)
    computed = 2 > 1
    t.holds("x", paper="1", book="1", criterion="c", check=computed)  # a computed bool is accepted
    assert len(t) == 1


def test_claim_table_export_defaults_to_env_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("BOOK_CLAIMS_DIR", str(tmp_path / "claims"))
    t = _table()
    assert t.export() == tmp_path / "claims" / "99-demo.json"


def test_claim_table_rejects_bad_input():
    with pytest.raises(ValueError, match="chapter"):
        ClaimTable("no spaces allowed")
    t = ClaimTable("99-demo")
    ok = 1 < 2
    with pytest.raises(TypeError, match="check must be a bool"):
        t.holds("x", paper="1", book="1", criterion="c", check="yes")
    with pytest.raises(TypeError, match="check must be a bool"):
        t.holds("x", paper="1", book="1", criterion="c", check=np.array([ok, ok]))
    with pytest.raises(ValueError, match="claim"):
        t.holds("  ", paper="1", book="1", criterion="c", check=ok)
    with pytest.raises(ValueError, match="book"):
        t.holds("x", paper="1", book=float("nan"), criterion="c", check=ok)
    with pytest.raises(TypeError, match="book"):
        t.holds("x", paper="1", book=ok, criterion="c", check=ok)
    with pytest.raises(ValueError, match="reason"):
        t.does_not_reproduce("x", paper="1", book="1", criterion="c", check=ok, reason="")
    with pytest.raises(ValueError, match="reason"):
        t.not_run("x", paper="1", reason=" ")
    with pytest.raises(TypeError):
        t.holds("x", "1", "1", "c", ok)  # keyword-only: the call names what each value is
    with pytest.raises(ClaimsFailed, match="empty"):
        t.assert_all()
    t.not_run("x", paper="1", reason="r")
    with pytest.raises(ValueError, match="already"):
        t.not_run("x", paper="1", reason="r")


# -- glue and typed numbers ------------------------------------------------------------------------
def test_glue_text_formats_and_rejects_bad_values():
    assert format_value(0.91234, ".2f") == "0.91"
    assert format_value(np.int64(12)) == "12" and format_value(123456) == "123,456"
    assert format_value(1 / 3) == "0.333" and format_value("SD") == "SD"
    assert glue("acc", 0.91234, ".2f") is None  # a cell ending in a glue prints nothing
    assert repr(GluedText("0.91")) == "0.91"  # what {glue:text} shows: no quotes
    with pytest.raises(TypeError, match="bool"):
        glue("b", True)
    with pytest.raises(ValueError, match="non-finite"):
        glue("x", float("nan"))
    with pytest.raises(ValueError, match="name"):
        glue("not a name", 1)


# -- cache -----------------------------------------------------------------------------------------
def test_disk_cache_computes_once(tmp_path, monkeypatch):
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path))
    calls = []

    def square(x):
        calls.append(x)
        return x * x

    cached = disk_cache("demo").cache(square)
    assert cached(3) == 9 and cached(3) == 9
    assert calls == [3]
    assert (tmp_path / "demo" / library_fingerprint()).is_dir()


def test_disk_cache_rejects_bad_namespace():
    with pytest.raises(ValueError, match="namespace"):
        disk_cache("../escape")


def test_library_fingerprint_follows_every_library_file(tmp_path):
    from companion_lib.common.cache import _PACKAGE_ROOT

    copies = []
    for name in ("a", "b", "c"):   # the fingerprint is computed once per folder and process: one copy per state
        copy = tmp_path / name / "companion_lib"
        shutil.copytree(_PACKAGE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
        copies.append(copy)
    fp = library_fingerprint(copies[0])
    assert len(fp) == 16 and fp == library_fingerprint()                  # a copy: the same key
    glue_py = copies[1] / "common" / "glue.py"
    glue_py.write_text(glue_py.read_text() + "# a comment\n")          # a library file changed: a new key
    assert library_fingerprint(copies[1]) != fp
    (copies[2] / "common" / "notes.txt").write_text("not code")           # neither code nor shipped data
    assert library_fingerprint(copies[2]) == fp


# -- timer -----------------------------------------------------------------------------------------
def test_timer_measures_and_prints(capsys):
    with timer("nap") as t:
        time.sleep(0.05)
    assert 0.05 <= t.seconds < 5
    assert capsys.readouterr().out.startswith("nap: ")
    with pytest.raises(TypeError, match="label"):
        with timer(3):
            pass
