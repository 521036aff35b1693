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


# -- claims: declared before the data, decided by one rule ---------------------------------------------
def _declared(n=6, **kw):
    t = ClaimTable("99-demo")
    args = dict(paper="Fig. 2: +12.6 points", statistic="accuracy gain over the teacher, per seed",
                competitor="the teacher", margin=0.0, replicates=n, expect="reproduced")
    args.update(kw)
    t.declare("gain", "Self-distillation beats its teacher", **args)
    return t


def test_verdict_rule_closed_form():
    from companion_lib.common.claims import verdict_of
    assert verdict_of(0.1, 0.3, 0.0) == "reproduced" and verdict_of(-0.1, 0.3, 0.0) == "undecided"
    assert verdict_of(-0.3, -0.1, 0.0) == "not reproduced" and verdict_of(-0.3, 0.0, 0.0) == "not reproduced"
    assert verdict_of(0.0, 0.3, 0.0) == "undecided"            # the interval touches the margin: not cleared
    assert verdict_of(-0.3, -0.1, 0.0, "<") == "reproduced" and verdict_of(0.0, 0.2, 0.0, "<") == "not reproduced"
    assert verdict_of(2.0, 2.0, 1.0) == "reproduced" and verdict_of(1.0, 1.0, 1.0) == "not reproduced"  # exact
    with pytest.raises(ValueError, match="direction"):
        verdict_of(0, 1, 0, ">=")
    with pytest.raises(ValueError, match="low must not exceed"):
        verdict_of(1, 0, 0)


def test_decide_is_a_two_sided_student_t_interval():
    from scipy import stats
    values = np.array([0.8, 1.1, 0.9, 1.4, 0.7, 1.0])
    row = _declared().decide("gain", values)
    ci = stats.ttest_1samp(values, 0.0).confidence_interval(0.95)
    assert (row.low, row.high) == pytest.approx((ci.low, ci.high)) and row.estimate == pytest.approx(values.mean())
    assert row.verdict == "reproduced" and row.outcome == "reproduced as expected" and row.method == "t" and row.n == 6
    # paired differences against the competitor's values on the same replicates
    base = values - np.array([0.1, -0.2, 0.3, 0.0, 0.2, -0.1])
    paired = _declared().decide("gain", values, baseline=base)
    d = values - base
    ci = stats.ttest_rel(values, base).confidence_interval(0.95)
    assert paired.method == "paired t" and (paired.low, paired.high) == pytest.approx((ci.low, ci.high))
    assert paired.verdict == "undecided" and paired.outcome == "undecided" and paired.estimate == pytest.approx(d.mean())


def test_the_three_verdicts_and_five_outcomes():
    t = ClaimTable("99-demo")
    common = dict(paper="p", statistic="s", competitor="c", margin=0.5, replicates=4)
    t.declare("a", "clears", expect="reproduced", **common)
    t.declare("b", "misses as declared", expect="not reproduced", reason="too small here", **common)
    t.declare("c", "straddles", expect="reproduced", **common)
    t.declare("d", "contradicts", expect="not reproduced", reason="expected to miss", **common)
    t.not_run("e", "not measured", paper="Table 3", reason="no data")
    high, low, mixed = np.array([0.9, 1.0, 1.1, 0.95]), np.array([0.1, 0.2, 0.0, 0.15]), np.array([0.1, 0.9, 0.3, 1.0])
    t.decide("a", high), t.decide("b", low), t.decide("c", mixed), t.decide("d", high)
    assert [r.outcome for r in t.rows] == ["reproduced as expected", "not reproduced as expected", "undecided",
                                           "contradicted", "not run"]
    assert t.counts() == dict.fromkeys(t.counts(), 1)
    with pytest.raises(ClaimsFailed) as err:
        t.assert_all()
    assert "1 of 5" in str(err.value) and "[contradicted] d" in str(err.value) and "] c" not in str(err.value)


def test_an_undecided_row_never_fails_and_a_declared_row_must_be_decided():
    t = _declared(4)
    with pytest.raises(ClaimsFailed, match="never decided"):
        t.assert_all()
    spread = np.array([-1.0, 2.0, -0.5, 1.5])
    t.decide("gain", spread)
    assert t["gain"].verdict == "undecided"
    t.assert_all()


def test_exact_rows_and_their_reason():
    t = _declared(1)
    value = 0.25
    row = t.decide_exact("gain", value, why="exact quadrature, no randomness")
    assert (row.low, row.high, row.method, row.verdict) == (0.25, 0.25, "exact", "reproduced")
    assert "exact: exact quadrature" in row.reason and row.interval_text() == "0.25 (exact)"
    with pytest.raises(ValueError, match="declares 1"):
        _declared(3).decide_exact("gain", value, why="w")


def test_design_gives_the_replicates_a_pilot_needs():
    from companion_lib.common.replicates import replicates_needed
    t = _declared(8)
    pilot = np.array([0.3, 0.6, 0.2, 0.5])
    row = t.design("gain", pilot)
    assert row.pilot_n == 4 and row.needed == replicates_needed(pilot.std(ddof=1), pilot.mean(), 0.0)
    assert row.pilot_spread == pytest.approx(pilot.std(ddof=1))


def test_claims_reject_bad_input():
    t = _declared(4)
    ok = np.array([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="declared with 4 replicates"):
        t.decide("gain", ok[:3])
    with pytest.raises(ValueError, match="finite"):
        t.decide("gain", np.array([1.0, np.nan, 2.0, 3.0]))
    with pytest.raises(ValueError, match="finite"):
        t.decide("gain", np.array([1.0, np.inf, 2.0, 3.0]))
    with pytest.raises(ValueError, match="paired"):
        t.decide("gain", ok, baseline=ok[:2])
    with pytest.raises(ValueError, match="at least 2"):
        _declared(1).decide("gain", ok[:1])
    with pytest.raises(KeyError, match="declare every row"):
        t.decide("other", ok)
    with pytest.raises(TypeError, match="literal"):
        t.decide("gain", [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(TypeError, match="literal"):
        _declared(1).decide_exact("gain", 0.5, why="w")
    with pytest.raises(ValueError, match="wrong scale"):
        _declared(4, bounds=(0, 1), margin=60)
    with pytest.raises(ValueError, match="range"):
        _declared(4, bounds=(0, 1)).decide("gain", ok)
    with pytest.raises(ValueError, match="expect"):
        _declared(4, expect="holds")
    with pytest.raises(ValueError, match="reason"):
        _declared(4, expect="not reproduced")
    with pytest.raises(ValueError, match="replicates"):
        _declared(0)
    with pytest.raises(ValueError, match="key"):
        ClaimTable("99-demo").declare("Not A Key", "c", paper="p", statistic="s", competitor="c", margin=0,
                                      replicates=2, expect="reproduced")
    with pytest.raises(ValueError, match="already declared"):
        t.declare("gain", "another", paper="p", statistic="s", competitor="c", margin=0, replicates=2,
                  expect="reproduced")
    with pytest.raises(ValueError, match="chapter"):
        ClaimTable("no spaces allowed")
    t.decide("gain", ok)
    with pytest.raises(ValueError, match="already decided"):
        t.decide("gain", ok)


def test_claim_table_renders_exports_and_glues(tmp_path, monkeypatch):
    t = _declared(4)
    t.not_run("imagenet", "The ImageNet result", paper="Table 3", reason="no ImageNet here")
    gains = np.array([0.8, 1.2, 1.0, 0.9])
    t.decide("gain", gains)
    html = t._repr_html_()
    assert "<table" in html and "<svg" in html and "no ImageNet here" in html and "reproduced" in html
    assert claims_from_html(html) == json.loads(json.dumps(t.to_dict()))   # the one encoding: JSON in the HTML
    data = json.loads(t.export(tmp_path).read_text())
    assert data["chapter"] == "99-demo" and data["schema"] == 3 and data["level"] == 0.95
    assert data["counts"]["reproduced as expected"] == 1 and data["counts"]["not run"] == 1
    assert data["claims"][0]["values"] == gains.tolist()
    monkeypatch.setenv("BOOK_CLAIMS_DIR", str(tmp_path / "claims"))
    assert t.export() == tmp_path / "claims" / "99-demo.json"
    glued = {}
    import sys
    glue_module = sys.modules["companion_lib.common.glue"]
    monkeypatch.setattr(glue_module, "glue", lambda name, value, fmt=None: glued.__setitem__(name, format_value(value, fmt)))
    t.glue("d_")
    assert glued["d_gain_verdict"] == "reproduced" and glued["d_gain_n"] == "4" and glued["d_imagenet_outcome"] == "not run"
    assert glued["d_gain_interval"] == f"[{t['gain'].low:.3g}, {t['gain'].high:.3g}]"
    fig = t.forest()
    assert len(fig.axes[0].get_yticklabels()) == 2


def test_the_binary_api_is_gone():
    """Every chapter decides its rows by the one rule: the binary checks of before (holds /
    does_not_reproduce) no longer exist, and a row not run needs its own key and claim."""
    t = ClaimTable("99-demo")
    assert not any(hasattr(t, name) for name in ("holds", "does_not_reproduce", "not_run_legacy"))
    with pytest.raises(TypeError):
        t.not_run("the ImageNet result", paper="Table 3", reason="no ImageNet here")


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



def test_glue_in_a_kernel_without_myst_nb_records_and_fills_the_colab_text(monkeypatch):
    """Colab and plain Jupyter have a kernel but no myst_nb: glue() must not fail, must record the text,
    and the Colab copies' show_glued() cells display the prose with it (filled in later when the value
    is computed further down)."""
    import builtins
    import types

    import sys

    import IPython

    g = sys.modules["companion_lib.common.glue"]   # (companion_lib.common.glue is also the function)

    shell = types.SimpleNamespace(kernel=object())
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    real_import = builtins.__import__

    def no_myst_nb(name, *args, **kwargs):
        if name.split(".")[0] == "myst_nb":
            raise ImportError("No module named 'myst_nb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_myst_nb)
    monkeypatch.setattr(g, "_GLUED", {})
    monkeypatch.setattr(g, "_PENDING", [])
    shown = []

    class Handle:
        def update(self, obj):
            shown.append(obj.data)

    def display(obj, display_id=None):
        shown.append(obj.data)
        return Handle() if display_id else None

    monkeypatch.setattr("IPython.display.display", display)
    assert g._myst_glue() is None
    assert g.glue("gain", 0.1234, "+.1%") is None
    assert g.glued() == {"gain": "+12.3%"}
    g.show_glued("The gain is ⟨gain⟩ over ⟨n⟩ seeds.")
    assert shown[-1].startswith("The gain is +12.3% over **⟨n⟩** seeds.") and "further down" in shown[-1]
    g.glue("n", 5)                                     # computed further down: the display is updated
    assert shown[-1] == "The gain is +12.3% over 5 seeds." and g._PENDING == []
    assert g.render_glued("no markers") == "no markers"
    with pytest.raises(TypeError):
        g.render_glued(3)


def test_glue_in_the_books_kernel_hands_the_value_to_myst_nb(monkeypatch):
    import sys
    import types

    import IPython

    g = sys.modules["companion_lib.common.glue"]

    calls = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: types.SimpleNamespace(kernel=object()))
    monkeypatch.setitem(sys.modules, "myst_nb", types.SimpleNamespace(
        glue=lambda name, value, display=True: calls.append((name, repr(value), display))))
    monkeypatch.setattr(g, "_GLUED", {})
    g.glue("acc", 0.5, ".2f")
    assert calls == [("acc", "0.50", False)] and g.glued() == {"acc": "0.50"}

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


def test_disk_cache_keeps_a_gpus_results_apart(tmp_path, monkeypatch):
    """A GPU's results are not bit-identical to the CPU's: with a GPU as the default device the cache lives in
    a subfolder, so BOOK_DEVICE=cpu on the same machine recomputes instead of reading them."""
    import companion_lib.common.cache as cache_module
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path))
    calls = []

    def square(x):
        calls.append(x)
        return x * x

    assert disk_cache("demo").cache(square)(3) == 9
    monkeypatch.setattr(cache_module, "device", lambda: torch.device("cuda"))
    assert disk_cache("demo").cache(square)(3) == 9 and calls == [3, 3]
    assert (tmp_path / "demo" / library_fingerprint() / "cuda").is_dir()


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


# -- device ------------------------------------------------------------------------------------------------
def test_device_is_the_cpu_here_and_can_be_chosen(monkeypatch):
    from companion_lib.common import describe_device, device
    monkeypatch.delenv("BOOK_DEVICE", raising=False)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert device().type == expected and device("cpu") == torch.device("cpu")
    assert device(torch.device("cpu")) == torch.device("cpu")
    monkeypatch.setenv("BOOK_DEVICE", "cpu")
    assert device() == torch.device("cpu") and describe_device().startswith("cpu (")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="not available"):
            device("cuda")
        with pytest.raises(ValueError, match="not available"):
            device(torch.device("cuda"))
        monkeypatch.setenv("BOOK_DEVICE", "cuda:0")
        with pytest.raises(ValueError, match="not available"):
            device()
    with pytest.raises(ValueError, match="unknown device"):
        device("gpu-please")
    with pytest.raises(TypeError, match="device name"):
        device(3)


def test_module_device_and_to_device_follow_the_model():
    """The helpers that put a chapter's batches where its model is: on the meta device (which allocates
    nothing) they must report and move to meta; on the CPU they return the very tensors they were given."""
    from collections import namedtuple

    from companion_lib.common import module_device, to_device
    assert module_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert module_device(torch.nn.Linear(2, 2, device="meta")).type == "meta"
    only_buffer = torch.nn.Module()
    only_buffer.register_buffer("b", torch.zeros(1, device="meta"))
    assert module_device(only_buffer).type == "meta" and module_device(torch.nn.Module()) == torch.device("cpu")
    with pytest.raises(TypeError, match="torch.nn.Module"):
        module_device(torch.zeros(2))
    x, y = torch.ones(3), torch.zeros(2, dtype=torch.long)
    assert to_device(x, "cpu") is x and to_device(x, None) is x
    Pair = namedtuple("Pair", "a b")
    moved = to_device({"p": Pair(x, [y, 5]), "s": "text"}, "meta")
    assert isinstance(moved["p"], Pair) and moved["p"].a.device.type == "meta"
    assert moved["p"].b[0].device.type == "meta" and moved["p"].b[1] == 5 and moved["s"] == "text"
    assert x.device.type == "cpu"


def test_resolve_device_reads_none_as_the_default(monkeypatch):
    """A library function's device argument: None is device() (here BOOK_DEVICE), anything else as given."""
    from companion_lib.common import resolve_device
    monkeypatch.setenv("BOOK_DEVICE", "cpu")
    assert resolve_device() == resolve_device(None) == torch.device("cpu")
    assert resolve_device("meta") == torch.device("meta") and resolve_device(torch.device("meta")).type == "meta"
    monkeypatch.setenv("BOOK_DEVICE", "gpu-please")
    with pytest.raises(ValueError, match="unknown device"):
        resolve_device(None)
    assert resolve_device("cpu") == torch.device("cpu")


def test_full_scale_estimate_closed_form_and_errors():
    from companion_lib.common import COLAB_GPUS, full_scale_estimate

    e = full_scale_estimate(1e9, dtype="float16", forward_tokens=1e6, train_tokens=1e5, trainable_params=1e6,
                            extra_memory_gib=0.5, headroom=1.5, utilisation=0.5)
    assert e.memory_gib == pytest.approx((1e9 * 2 * 1.5 + 1e6 * 12) / 2**30 + 0.5)
    assert e.flops == pytest.approx(2e9 * 1e6 + 6e9 * 1e5)
    t4 = COLAB_GPUS[0]
    assert e.seconds(t4) == pytest.approx(e.flops / (t4.peak_flops * 0.5))
    table = e.table()
    assert list(table.index) == [g.name for g in COLAB_GPUS] and table["fits"].all()
    big = full_scale_estimate(7e9, dtype="float32")             # 26 GiB of float32 weights: only the A100 holds it
    assert big.smallest_gpu() is COLAB_GPUS[-1] and big.table()["fits"].tolist() == [False, False, True]
    assert full_scale_estimate(1e9, train_tokens=1).memory_gib > full_scale_estimate(1e9).memory_gib  # optimiser state
    for bad in (dict(dtype="int8"), dict(headroom=0.5), dict(utilisation=0), dict(forward_tokens=-1),
                dict(trainable_params=2e9)):
        with pytest.raises(ValueError):
            full_scale_estimate(1e9, **bad)
    with pytest.raises(ValueError, match="n_params"):
        full_scale_estimate(0)
