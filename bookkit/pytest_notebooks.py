"""Run the chapters' MyST Markdown notebooks under nbval, in place, and report their cost.

* Collection: every ``chapters/**/*.md`` whose front matter makes it a MyST notebook is read with
  myst-nb's own reader (the one the book build uses) and handed to nbval's collector, so the tests
  execute exactly what the website executes, with nothing written to disk. Paired ``.ipynb`` copies
  under ``chapters/`` are not collected a second time.
* Run-time report (``--runtime-report PATH``): wall seconds and the kernel's peak resident memory
  (VmHWM) for every notebook and chapter, written as JSON and printed as a table.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import nbformat
import pytest
from myst_nb.core.read import is_myst_markdown_notebook, read_myst_markdown_notebook
from nbval import plugin as nbval_plugin

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
#: The budget of a chapter's notebooks together (CONTRIBUTING.md): wall seconds on two cores and peak memory.
BUDGET_SECONDS = 150.0
BUDGET_MIB = 3072.0


def pytest_addoption(parser):
    parser.addoption("--runtime-report", default=None, metavar="PATH",
                     help="write per-notebook wall time and peak memory as JSON to PATH")


def _in_chapters(path: Path) -> bool:
    try:
        path.resolve().relative_to(CHAPTERS)
    except ValueError:
        return False
    return True


def is_chapter_notebook(path: Path) -> bool:
    """True for a ``.md`` file under ``chapters/`` that the book executes as a notebook."""
    return path.suffix == ".md" and _in_chapters(path) and is_myst_markdown_notebook(
        path.read_text(encoding="utf-8"))


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read a MyST Markdown notebook as the book build does."""
    return read_myst_markdown_notebook(path.read_text(encoding="utf-8"), path=str(path))


class MystNotebook(nbval_plugin.IPyNbFile):
    """nbval's notebook collector, fed from a MyST Markdown source instead of an ``.ipynb``."""

    def collect(self):
        nb = read_notebook(Path(self.path))
        # nbval's collector reads the file with nbformat.read: hand it the parsed notebook instead.
        shim = SimpleNamespace(read=lambda *args, **kwargs: nb, from_dict=nbformat.from_dict)
        with mock.patch.object(nbval_plugin, "nbformat", shim):
            items = list(super().collect())
        yield from items


def pytest_ignore_collect(collection_path, config):
    # Paired .ipynb notebooks (for Colab) mirror the .md sources: run each notebook once.
    if collection_path.suffix == ".ipynb" and _in_chapters(collection_path):
        return True
    return None


def pytest_collect_file(file_path, parent):
    opt = parent.config.option
    if (opt.nbval or opt.nbval_lax) and is_chapter_notebook(file_path):
        return MystNotebook.from_parent(parent, path=file_path)
    return None


# -- run-time report -------------------------------------------------------------------------------

def _kernel_pid(item) -> int | None:
    kernel = getattr(item.parent, "kernel", None)
    km = getattr(kernel, "km", None)
    pid = None
    provisioner = getattr(km, "provisioner", None)
    process = getattr(provisioner, "process", None)
    if process is not None:
        pid = getattr(process, "pid", None)
    return pid


def _kernel_peak_rss_bytes(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def _kernel_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of the kernel process so far (its own threads included)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if isinstance(item, nbval_plugin.IPyNbCell) and call.when == "call":
        pid = _kernel_pid(item)
        if pid is None:
            return
        props = outcome.get_result().user_properties
        peak = _kernel_peak_rss_bytes(pid)
        if peak is not None:
            props.append(("kernel_peak_rss", peak))
        cpu = _kernel_cpu_seconds(pid)
        if cpu is not None:
            props.append(("kernel_cpu_seconds", cpu))


class RuntimeReport:
    def __init__(self, path: Path):
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)
        self.peak: dict[str, int] = defaultdict(int)
        self.cpu: dict[str, float] = defaultdict(float)
        self.failed: set[str] = set()
        self.started = time.time()

    def pytest_runtest_logreport(self, report):
        nodeid = report.nodeid
        file = nodeid.split("::", 1)[0]
        if not file.startswith("chapters/"):
            return
        self.seconds[file] += report.duration
        for key, value in report.user_properties:
            if key == "kernel_peak_rss":
                self.peak[file] = max(self.peak[file], int(value))
            elif key == "kernel_cpu_seconds":  # cumulative: keep the latest (largest) reading
                self.cpu[file] = max(self.cpu[file], float(value))
        if report.failed:
            self.failed.add(file)

    def as_dict(self) -> dict:
        notebooks = {
            f: {"seconds": round(s, 2), "cpu_seconds": round(self.cpu.get(f, 0.0), 2),
                "peak_mib": round(self.peak.get(f, 0) / 2**20, 1), "passed": f not in self.failed}
            for f, s in sorted(self.seconds.items())
        }
        chapters: dict[str, dict] = {}
        for f, rec in notebooks.items():
            ch = f.split("/")[1]
            agg = chapters.setdefault(ch, {"seconds": 0.0, "cpu_seconds": 0.0, "peak_mib": 0.0,
                                           "notebooks": 0, "passed": True})
            agg["seconds"] = round(agg["seconds"] + rec["seconds"], 2)
            agg["cpu_seconds"] = round(agg["cpu_seconds"] + rec["cpu_seconds"], 2)
            agg["peak_mib"] = max(agg["peak_mib"], rec["peak_mib"])
            agg["notebooks"] += 1
            agg["passed"] = agg["passed"] and rec["passed"]
        machine = {
            "platform": platform.platform(),
            "processor": _cpu_model(),
            "cpu_count": os.cpu_count(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "python": platform.python_version(),
        }
        return {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": machine, "notebooks": notebooks, "chapters": chapters}

    def pytest_terminal_summary(self, terminalreporter):
        if not self.seconds:
            return
        data = self.as_dict()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(data, indent=2), encoding="utf-8")
        tr = terminalreporter
        tr.section("notebook run times")
        header = f"{'seconds':>8s} {'cpu s':>7s} {'peak MiB':>9s}"
        tr.write_line(f"{'notebook':58s} {header}")
        for f, rec in data["notebooks"].items():
            flag = "" if rec["passed"] else "  FAILED"
            tr.write_line(f"{f:58s} {rec['seconds']:8.1f} {rec['cpu_seconds']:7.1f} {rec['peak_mib']:9.0f}{flag}")
        tr.write_line("")
        for line in budget_lines(data):
            tr.write_line(line)
        tr.write_line(f"report written to {self.path}")


def budget_lines(data: dict) -> list[str]:
    """The per-chapter table of a run-time report against the budget (``python -m bookkit bench`` prints it)."""
    header = f"{'chapter':34s} {'wall s':>8s} {'cpu s':>7s} {'peak MiB':>9s}   budget {BUDGET_SECONDS:.0f} s, {BUDGET_MIB:.0f} MiB"
    lines = [header]
    over = 0
    for ch, rec in data["chapters"].items():
        flags = [name for name, bad in (("over the time budget", rec["seconds"] > BUDGET_SECONDS),
                                        ("over the memory budget", rec["peak_mib"] > BUDGET_MIB)) if bad]
        over += bool(flags)
        lines.append(f"{ch:34s} {rec['seconds']:8.1f} {rec.get('cpu_seconds', 0):7.1f} {rec['peak_mib']:9.0f}   "
                     + ("; ".join(flags) if flags else "within"))
    total = sum(r["seconds"] for r in data["chapters"].values())
    lines.append(f"{len(data['chapters'])} chapters, {total:.0f} notebook-seconds in all, {over} over budget")
    return lines


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def pytest_configure(config):
    path = config.getoption("--runtime-report")
    # Only the controlling process writes the report (xdist workers have a workerinput attribute).
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(RuntimeReport(Path(path)), "runtime-report")
