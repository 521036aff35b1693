"""Tests of companion_lib.common: seeding, threads, style, claims tables, cache, timer, build tools."""

from __future__ import annotations

import json
import random

import matplotlib as mpl
import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_info

from companion_lib.common.claims import CLAIMS_MIME
from companion_lib.common import (
    ClaimsFailed, ClaimTable, disk_cache, glue, library_fingerprint, limit_threads,
    seed_everything, timer, use_book_style,
)
from companion_lib.common.glue import GluedText, format_value
from companion_lib.common.prose import typed_numbers
from companion_lib.common.buildtools import invalidate_cache
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
    bundle = t._repr_mimebundle_()
    assert bundle[CLAIMS_MIME] == t.to_dict() and bundle["text/html"] == t._repr_html_()
    html = t._repr_html_()
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


def test_library_fingerprint_is_stable_hex():
    fp = library_fingerprint()
    assert fp == library_fingerprint() and len(fp) == 16 and int(fp, 16) >= 0


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


# -- timer -----------------------------------------------------------------------------------------
def test_timer_measures_and_prints(capsys):
    with timer("nap") as t:
        sum(range(1000))
    assert t.seconds >= 0
    assert capsys.readouterr().out.startswith("nap: ")
    with pytest.raises(TypeError, match="label"):
        with timer(3):
            pass


# -- make reseed -------------------------------------------------------------------------------------


def test_reseed_rejects_bad_arguments(capsys):
    from companion_lib.common import reseed

    for argv in (["--chapter", "01", "--seeds", "a b"], ["--chapter", "01", "--seeds", " "],
                 ["--chapter", "01", "--seeds", "1", "--timeout", "0"]):
        with pytest.raises(SystemExit) as info:
            reseed.main(argv)
        assert info.value.code == 2
    assert "--timeout must be a positive" in capsys.readouterr().err


def test_reseed_finds_exactly_one_chapter(tmp_path):
    from companion_lib.common import reseed

    for name in ("01-a", "02-b", "02-c"):
        (tmp_path / "chapters" / name).mkdir(parents=True)
    assert reseed.find_chapter(tmp_path, "01").name == "01-a"
    with pytest.raises(ValueError, match="exactly one chapter folder"):
        reseed.find_chapter(tmp_path, "02")
    with pytest.raises(ValueError, match="matches: none"):
        reseed.find_chapter(tmp_path, "09")
    with pytest.raises(ValueError, match="no reproduce"):
        reseed.reproduce_notebooks(tmp_path / "chapters" / "01-a")


def test_reseed_reads_the_last_claims_table():
    from companion_lib.common import reseed

    nb = {"cells": [{"outputs": [{"data": {CLAIMS_MIME: {"n": 1}}}]},
                    {"outputs": [{"data": {"text/plain": "x"}}, {"data": {CLAIMS_MIME: json.dumps({"n": 2})}}]}]}
    assert reseed.claims_from_notebook(nb) == {"n": 2}
    assert reseed.claims_from_notebook({"cells": []}) is None
