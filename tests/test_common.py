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
    NOT_REPRODUCED, ClaimsFailed, ClaimTable, disk_cache, library_fingerprint, limit_threads,
    seed_everything, timer, use_book_style,
)
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
def test_claim_table_passes_and_renders(tmp_path):
    t = ClaimTable("99-demo")
    t.add("gain grows with noise", paper="Fig. 2", book=3.14159, criterion="> 1", passed=3.14159 > 1)
    t.add_not_reproduced("huge model effect", paper="+10%", book="n/a", reason="needs a GPU-scale model")
    t.assert_all()  # the not-reproduced row is not asserted
    assert t.rows[0].book == "3.142" and t.rows[0].passed is True
    assert t.rows[1].passed is None and t.rows[1].status == NOT_REPRODUCED
    bundle = t._repr_mimebundle_()
    assert bundle[CLAIMS_MIME] == t.to_dict() and bundle["text/html"] == t._repr_html_()
    html = t._repr_html_()
    assert "<table" in html and "needs a GPU-scale model" in html and "not reproduced" in html
    assert list(t.to_frame().columns) == ["claim", "paper", "book", "criterion", "status", "reason"]
    data = json.loads(t.export(tmp_path).read_text())
    assert data["chapter"] == "99-demo"
    assert data["counts"] == {"passed": 1, "failed": 0, "not reproduced at this scale": 1}


def test_claim_table_assert_all_lists_every_failure():
    t = ClaimTable("99-demo")
    t.add("a", paper="1", book="0", criterion=">= 1", passed=False)
    t.add("b", paper="1", book="2", criterion=">= 1", passed=True)
    t.add("c", paper="1", book="-1", criterion=">= 1", passed=np.bool_(False))
    with pytest.raises(ClaimsFailed) as err:
        t.assert_all()
    msg = str(err.value)
    assert "2 of 3 claims failed" in msg and "- a:" in msg and "- c:" in msg and "- b:" not in msg


def test_claim_table_export_defaults_to_env_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("BOOK_CLAIMS_DIR", str(tmp_path / "claims"))
    t = ClaimTable("99-demo")
    t.add("x", paper="1", book="1", criterion="== 1", passed=True)
    assert t.export() == tmp_path / "claims" / "99-demo.json"


def test_claim_table_rejects_bad_input():
    with pytest.raises(ValueError, match="chapter"):
        ClaimTable("no spaces allowed")
    t = ClaimTable("99-demo")
    with pytest.raises(TypeError, match="passed"):
        t.add("x", paper="1", book="1", criterion="c", passed="yes")
    with pytest.raises(ValueError, match="claim"):
        t.add("  ", paper="1", book="1", criterion="c", passed=True)
    with pytest.raises(ValueError, match="book"):
        t.add("x", paper="1", book=float("nan"), criterion="c", passed=True)
    with pytest.raises(TypeError, match="book"):
        t.add("x", paper="1", book=True, criterion="c", passed=True)
    with pytest.raises(ValueError, match="reason"):
        t.add_not_reproduced("x", paper="1", book="1", reason="")
    with pytest.raises(ClaimsFailed, match="empty"):
        t.assert_all()


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
