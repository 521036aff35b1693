"""Keep every chapter notebook as nbval executed it, so that the book build does not execute it again.

``make test`` runs every chapter notebook once, under nbval (:mod:`bookkit.pytest_notebooks`). With
``-p bookkit.pytest_executed --store-executed DIR`` each notebook that ran completely and passed is
written to ``DIR/<path of its .md>.ipynb``: myst-nb's own reading of the MyST source (the cells the
book build hashes) with the outputs nbval collected from the kernel. ``python -m
bookkit cache-executed`` then adds those notebooks to the book's
jupyter-cache, keyed exactly as myst-nb keys them, and ``jupyter-book build`` serves every page from
that cache: the website that ``make test`` checks shows the outputs of the test run itself.

A notebook with a failed or skipped cell is not stored (the build would execute it and fail the same
way, with the page and cell in its message).
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from nbval import plugin as nbval_plugin

ROOT = Path(__file__).resolve().parents[1]
METADATA_KEY = "iclr2025_executed"


def pytest_addoption(parser):
    parser.addoption("--store-executed", default=None, metavar="DIR",
                     help="write each chapter notebook, with the outputs nbval collected, under DIR")


class ExecutedNotebooks:
    def __init__(self, folder: Path):
        self.folder = folder
        self.state: dict[object, dict] = {}

    def _file_state(self, item) -> dict:
        return self.state.setdefault(item.parent, {"count": 0, "seconds": 0.0, "complete": True})

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        start = time.perf_counter()
        outcome = yield
        if not isinstance(item, nbval_plugin.IPyNbCell):
            return
        state = self._file_state(item)
        state["seconds"] += time.perf_counter() - start
        state["count"] += 1
        outputs = getattr(item, "test_outputs", None) or []
        item.cell.outputs = [nbformat.from_dict(dict(o)) for o in outputs]
        item.cell.execution_count = state["count"]
        if outcome.excinfo is not None:
            state["complete"] = False

    def pytest_runtest_logreport(self, report):
        if report.skipped or report.failed:
            for parent, state in self.state.items():
                if report.nodeid.startswith(parent.nodeid + "::"):
                    state["complete"] = False

    def pytest_runtest_teardown(self, item, nextitem):
        if not isinstance(item, nbval_plugin.IPyNbCell):
            return
        if nextitem is not None and nextitem.parent is item.parent:
            return
        state = self.state.pop(item.parent, None)
        nb = getattr(item.parent, "nb", None)
        if state is None or nb is None or not state["complete"]:
            return
        n_code = sum(c.cell_type == "code" for c in nb.cells)
        if state["count"] != n_code:
            return
        source = Path(str(item.parent.path)).resolve()
        try:
            relative = source.relative_to(ROOT)
        except ValueError:
            return
        nb.metadata[METADATA_KEY] = {"source": relative.as_posix(), "seconds": round(state["seconds"], 2)}
        target = self.folder / relative.with_suffix(".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".ipynb.tmp")
        tmp.write_text(nbformat.writes(nb), encoding="utf-8")
        tmp.replace(target)


def pytest_configure(config):
    folder = config.getoption("--store-executed")
    if folder:
        config.pluginmanager.register(ExecutedNotebooks(Path(folder).resolve()), "store-executed")
