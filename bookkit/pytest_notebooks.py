"""Run the chapters' MyST Markdown notebooks under nbval, in place, and report their cost.

* Collection: every ``chapters/**/*.md`` whose front matter makes it a MyST notebook is read with
  myst-nb's own reader (the one the book build uses) and handed to nbval's collector, so the tests
  execute exactly what the website executes, with nothing written to disk. Paired ``.ipynb`` copies
  under ``chapters/`` are not collected a second time.
* Run-time report (``--runtime-report PATH``): wall seconds and the kernel's peak resident memory
  (VmHWM) for every notebook and chapter, written as JSON and printed as a table; with it, the seconds of
  every scheduling group (below) and how long each xdist worker was busy and when it finished.
* Scheduling (``--schedule PATH`` with ``--dist loadscope --no-loadscope-reorder``): a chapter's notebooks
  form one group, run one after another by one worker in collection order (so a notebook reuses what an earlier one of its chapter
  put in the disk cache instead of computing it at the same time on the other worker), and every test
  module forms a group (its module fixtures are set up once). The groups are handed out longest first,
  by the seconds ``PATH`` gives each (a run-time report's ``groups``, ``python -m bookkit schedule``
  refreshes it): the long groups start at once and short ones fill in at the end, so neither worker waits
  for the other at the end of the run. The order changes no result: every notebook runs in a fresh kernel.
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
    parser.addoption("--schedule", default=None, metavar="PATH",
                     help="with --dist loadscope: one group per chapter and per test module, longest first by "
                          "the seconds in PATH (a JSON object of group: seconds, or a run-time report)")


#: seconds assumed for one test of a group that the schedule does not list (a new test module)
UNLISTED_SECONDS_PER_TEST = 0.2


def schedule_group(nodeid: str) -> str:
    """The scheduling group of a test: ``chapters/<chapter>`` for a chapter notebook's cells, else its file."""
    file = nodeid.split("::", 1)[0]
    parts = file.split("/")
    if len(parts) >= 3 and parts[0] == "chapters":
        return "/".join(parts[:2])
    return file


def load_schedule(path: Path) -> dict[str, float]:
    """Seconds per group from ``path``: a run-time report (its ``groups``) or a plain ``{group: seconds}``."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    groups = data.get("groups", data) if isinstance(data, dict) else None
    if not isinstance(groups, dict) or not all(isinstance(v, (int, float)) for v in groups.values()):
        raise ValueError(f"{path}: expected a JSON object of group: seconds (or a run-time report with 'groups')")
    return {str(k): float(v) for k, v in groups.items()}


def order_by_schedule(items: list, seconds: dict[str, float]) -> list:
    """``items`` grouped by :func:`schedule_group`, the groups longest first (a group the schedule does not list
    counts :data:`UNLISTED_SECONDS_PER_TEST` per test), ties and the tests within a group in collection order."""
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(schedule_group(item.nodeid), []).append(item)
    cost = {g: seconds.get(g, UNLISTED_SECONDS_PER_TEST * len(members)) for g, members in groups.items()}
    order = sorted(groups, key=lambda g: -cost[g])   # sorted() is stable: ties keep collection order
    return [item for g in order for item in groups[g]]


def _scheduled(config) -> bool:
    return bool(config.getoption("--schedule")) and config.getoption("dist", "no") == "loadscope"


def pytest_collection_modifyitems(session, config, items):
    path = config.getoption("--schedule")
    if not path:
        return
    items[:] = order_by_schedule(items, load_schedule(Path(path)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """With ``--schedule`` and ``--dist loadscope``: xdist's scope scheduler with :func:`schedule_group` as the
    scope (a chapter's notebooks together, else a test file), handed out in the collection order above."""
    if not _scheduled(config):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return schedule_group(nodeid)

    return GroupScheduling(config, log)


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
        self.groups: dict[str, float] = defaultdict(float)
        self.busy: dict[str, float] = defaultdict(float)
        self.finished: dict[str, float] = {}

    def pytest_runtest_logreport(self, report):
        nodeid = report.nodeid
        file = nodeid.split("::", 1)[0]
        self.groups[schedule_group(nodeid)] += report.duration
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "main")
        self.busy[worker] += report.duration
        stop = getattr(report, "stop", None)
        if stop is not None:
            self.finished[worker] = max(self.finished.get(worker, 0.0), stop - self.started)
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
        workers = {w: {"busy_seconds": round(self.busy[w], 1), "finished_after": round(self.finished.get(w, 0.0), 1)}
                   for w in sorted(self.busy)}
        return {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": machine, "notebooks": notebooks, "chapters": chapters,
                "groups": {g: round(s, 1) for g, s in sorted(self.groups.items(), key=lambda kv: -kv[1])},
                "workers": workers}

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
        if len(data["workers"]) > 1:
            tr.write_line("workers: " + "; ".join(f"{w} busy {r['busy_seconds']:.0f} s, done after {r['finished_after']:.0f} s"
                                                  for w, r in data["workers"].items()))
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
    if _scheduled(config) and config.getoption("loadscopereorder", False):
        # (xdist would sort the groups by their number of tests again)
        raise pytest.UsageError("--schedule orders the groups itself: pass --no-loadscope-reorder too")
    path = config.getoption("--runtime-report")
    # Only the controlling process writes the report (xdist workers have a workerinput attribute).
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(RuntimeReport(Path(path)), "runtime-report")
