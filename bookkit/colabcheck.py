"""The Colab copies run where a reader runs them: a fresh environment with the wheel and nothing else.

:func:`colab_environment` builds the package's wheel, and creates (or reuses) a virtual environment that
holds only the wheel, its declared dependencies with every chapter's extra (``[all]``), and the two
packages that execute a notebook (``ipykernel``, ``nbclient``): no jupyter-book, myst-nb, papermill or nbval.
The environment is reused while the declared dependencies stay the same (only the book's wheel is
reinstalled); the wheels it was built from are kept in a wheelhouse under ``_build`` so that a second
environment installs offline.

:func:`run_notebooks` executes ``.ipynb`` copies there with ``nbclient``, each alone in an empty folder
outside the repository, in a fresh kernel of that environment, and returns one record per notebook: ran
or failed, the seconds, and for a failure the cell and the error. It also lists glued numbers that never
reached the text (``⟨name⟩`` markers left in the outputs of the "text with this run's numbers" cells).

``python -m bookkit colab-check`` (``make colab-check``) runs every Colab copy and writes
``_build/colab-check/report.json`` and ``report.md``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["EXECUTION_PACKAGES", "REDUCED", "BLOCKED_MODULES", "light_environment", "run_notebook", "colab_environment", "run_notebooks", "write_report", "main"]

#: what executes a notebook in the fresh environment (versions of the book's pins)
EXECUTION_PACKAGES = ("ipykernel==7.4.0", "nbclient==0.11.0")
#: packages the fresh environment must NOT hold (the book's toolchain)
TOOLCHAIN = ("jupyter-book", "myst-nb", "myst-parser", "papermill", "nbval", "jupytext", "nbgrader", "sphinx")
CELL_TIMEOUT = 900
#: reproduce copies that `make colab-check` runs at reduced parameters (set in a cell injected after the
#: `parameters` cell, papermill's way); the other reproduce copies run at book scale with `--full`, else are
#: skipped with the reason "book scale: run with --full". A reduced run checks that the copy runs, not its
#: verdicts: too few replicates may leave rows undecided, which never fails a notebook. A page whose claims turn
#: with the scale is not reduced: chapter 05 at T = 1000 contradicts its regret rows (the heuristic still wins).
REDUCED = {
    "chapters/04-censored-boosting/reproduce.ipynb":
        "reps_per_seed = 4\nseeds = [0, 1]\npilot_reps = 2\nn_mc = 20_000",
    "chapters/06-waiting-predictions/reproduce.ipynb":
        "n_people = 20_000\nn_grid_rank = 200\nn_grid = 100\nseeds = [0, 1, 2, 3]",
}

_RUNNER = r'''
import json, os, sys, time, traceback
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

src, out, timeout, kernel = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
overrides = json.loads(sys.argv[5]) if len(sys.argv) > 5 else None
nb = nbformat.read(src, as_version=4)
if overrides:   # papermill's way: a cell after the parameters cell that sets the reduced values
    at = next((i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])), None)
    cell = nbformat.v4.new_code_cell(overrides, metadata={"tags": ["injected-parameters"]})
    nb.cells.insert(at + 1 if at is not None else 1, cell)
client = NotebookClient(nb, timeout=timeout, kernel_name=kernel, allow_errors=False,
                        resources={"metadata": {"path": os.getcwd()}})
record = {"status": "ran", "error": None, "cell": None, "source": None}
start = time.perf_counter()
try:
    client.execute()
except (CellExecutionError, CellTimeoutError) as exc:
    record["status"] = "failed"
    failing = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                    and any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
    if failing is not None:
        err = next(o for o in nb.cells[failing].outputs if o.get("output_type") == "error")
        record["error"] = f"{err.get('ename')}: {err.get('evalue')}"[:600]
        record["cell"] = failing
        record["source"] = nb.cells[failing].source[:400]
    else:
        record["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"[:600]
except Exception as exc:
    record["status"] = "failed"
    record["error"] = f"{type(exc).__name__}: {exc}"[:600]
record["seconds"] = round(time.perf_counter() - start, 1)
unfilled = set()
for c in nb.cells:
    if c.cell_type == "code" and "show_glued(" in c.source:
        for o in c.get("outputs", []):
            text = (o.get("data") or {}).get("text/markdown", "")
            if "Computed further down" in text:
                import re
                unfilled.update(re.findall(r"\*\*⟨([^⟩]+)⟩\*\*", text))
record["unfilled"] = sorted(unfilled)
nbformat.write(nb, out)
print("RECORD " + json.dumps(record))
'''


def _declared(root: Path) -> dict:
    import tomllib

    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {"dependencies": project.get("dependencies", []),
            "optional": project.get("optional-dependencies", {}), "python": sys.version_info[:2],
            "execution": list(EXECUTION_PACKAGES)}


def _pip(python: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [str(python), "-m", "pip", *args]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


#: what the wheel is built from (pyproject.toml's readme, license-files and packages)
WHEEL_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "LICENSE-content", "companion_lib")


def _kernel_spec(kernels: Path, python: Path, display_name: str) -> None:
    """A Jupyter kernel named ``colab-check`` under ``kernels`` that runs ``python``."""
    spec = kernels / "kernels" / "colab-check"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": display_name, "language": "python"}))


def build_wheel(root: Path, out: Path) -> Path:
    """The wheel of the working tree (``pip wheel --no-deps``), in ``out`` (emptied first).

    It is built from a copy of :data:`WHEEL_SOURCES` in a temporary folder: an in-tree build writes
    ``build/`` and ``*.egg-info`` into the repository, and two builds at once (two test workers) collide there.
    """
    import shutil
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix="wheel-src-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in WHEEL_SOURCES:
            path = Path(root) / name
            if path.is_dir():
                shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(path, src / name)
        _pip(Path(sys.executable), "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src))
    return next(out.glob("*.whl"))


def colab_environment(root: Path, build: Path, extras: str = "all", log=print) -> tuple[Path, Path]:
    """A fresh virtual environment holding the wheel (with ``extras``), its declared dependencies and the
    execution packages; reused while they stay the same. Returns (python, kernel folder)."""
    root, build = Path(root).resolve(), Path(build).resolve()
    wheel = build_wheel(root, build / "dist")
    key = hashlib.sha256(json.dumps([_declared(root), extras], sort_keys=True, default=str).encode()).hexdigest()[:12]
    env = build / f"venv-{key}"
    python = env / "bin" / "python"
    stamp = env / ".complete"
    wheelhouse = build / "wheelhouse"
    requirement = f"{wheel}[{extras}]" if extras else str(wheel)
    if not stamp.exists():
        for old in build.glob("venv-*"):
            if old != env:
                import shutil

                shutil.rmtree(old, ignore_errors=True)
        log(f"colab environment: creating {env} (declared dependencies of {wheel.name}[{extras}])")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
        wheelhouse.mkdir(parents=True, exist_ok=True)
        offline = _pip(python, "install", "-q", "--no-index", "--find-links", str(wheelhouse), requirement,
                       *EXECUTION_PACKAGES, check=False)
        if offline.returncode != 0:
            log("colab environment: fetching the declared dependencies into the wheelhouse (once)")
            _pip(python, "wheel", "-q", "-w", str(wheelhouse), requirement, *EXECUTION_PACKAGES)
            _pip(python, "install", "-q", "--no-index", "--find-links", str(wheelhouse), requirement,
                 *EXECUTION_PACKAGES)
        stamp.write_text(json.dumps(_declared(root), default=str))
    else:
        _pip(python, "install", "-q", "--no-deps", "--force-reinstall", "--no-index", str(wheel))
    present = _pip(python, "list", "--format=json").stdout
    names = {p["name"].lower().replace("_", "-") for p in json.loads(present)}
    leaked = sorted(names & set(TOOLCHAIN))
    if leaked:
        raise RuntimeError(f"the Colab environment holds the book's toolchain: {leaked}")
    kernels = build / "jupyter"
    _kernel_spec(kernels, python, "Colab check (fresh environment)")
    return python, kernels


#: imported in the light environment, these fail as they would in Colab (the book's toolchain)
BLOCKED_MODULES = ("myst_nb", "myst_parser", "jupyter_book", "papermill", "nbval", "jupytext", "nbgrader", "sphinx",
                   "bookkit")

_BLOCKER = r"""
import importlib.abc, sys
class _BookToolchainBlocker(importlib.abc.MetaPathFinder):
    blocked = set(%r)
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (the book's toolchain is not in a Colab environment)")
        return None
sys.meta_path.insert(0, _BookToolchainBlocker())
"""


def light_environment(build: Path, root: Path | None = None) -> tuple[Path, Path]:
    """A cheap stand-in for :func:`colab_environment` (seconds, offline), for ``make test``: a fresh virtual
    environment with the wheel installed without dependencies, the running environment's third-party
    packages on a plain path entry (its ``.pth`` files, e.g. the editable install of this repository, are
    not processed), and an import hook that makes the book's toolchain (:data:`BLOCKED_MODULES`) fail to
    import. It proves the copies need only the wheel and no toolchain; which third-party packages they need
    is checked by ``tests/test_dependencies.py``, and the real fresh environment by ``make colab-check``."""
    import shutil
    import sysconfig

    root = Path(root or Path(__file__).resolve().parents[1]).resolve()
    build = Path(build).resolve()
    env = build / "light-venv"
    if env.exists():
        shutil.rmtree(env)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    wheel = build_wheel(root, build / "light-dist")
    import zipfile

    with zipfile.ZipFile(wheel) as zf:   # installing a pure wheel is unpacking it (no pip in this venv)
        zf.extractall(site)
    theirs = sysconfig.get_paths()["purelib"]
    (site / "zz_test_environment.pth").write_text(theirs + "\n", encoding="utf-8")
    (site / "_book_toolchain_blocker.py").write_text(_BLOCKER % (BLOCKED_MODULES,), encoding="utf-8")
    (site / "00_book_toolchain_blocker.pth").write_text("import _book_toolchain_blocker\n", encoding="utf-8")
    kernels = build / "light-jupyter"
    _kernel_spec(kernels, python, "Colab check (light environment)")
    return python, kernels


def _clean_env(python: Path, kernels: Path, work: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER", "BOOK_", "IPYTHON", "MPLBACKEND"))}
    env.update(PATH=f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(python.parents[1]),
               JUPYTER_PATH=str(kernels), JUPYTER_DATA_DIR=str(work / "jupyter-data"),
               JUPYTER_CONFIG_DIR=str(work / "jupyter-config"), IPYTHONDIR=str(work / "ipython"),
               BOOK_CACHE_DIR=str(work / "cache"), BOOK_CLAIMS_DIR=str(work / "claims"),
               MPLCONFIGDIR=str(work / "mpl"), PYDEVD_DISABLE_FILE_VALIDATION="1")
    return env


def run_notebook(python: Path, kernels: Path, notebook: Path, work: Path, timeout: int = CELL_TIMEOUT,
                 overrides: str | None = None, keep: Path | None = None) -> dict:
    """Execute one notebook alone in ``work`` (an empty folder) in the fresh environment."""
    work.mkdir(parents=True, exist_ok=True)
    (work / notebook.name).write_bytes(notebook.read_bytes())
    (work / "_runner.py").write_text(_RUNNER, encoding="utf-8")
    args = [str(python), "_runner.py", notebook.name, "_executed.ipynb", str(timeout), "colab-check"]
    if overrides:
        args.append(json.dumps(overrides))
    start = time.perf_counter()
    result = subprocess.run(args, cwd=work, env=_clean_env(python, kernels, work), capture_output=True, text=True)
    line = next((l for l in reversed(result.stdout.splitlines()) if l.startswith("RECORD ")), None)
    if line is None:
        record = {"status": "failed", "error": f"the runner stopped: {(result.stderr or result.stdout)[-600:]}",
                  "cell": None, "source": None, "unfilled": [], "seconds": round(time.perf_counter() - start, 1)}
    else:
        record = json.loads(line[len("RECORD "):])
    if keep is not None and (work / "_executed.ipynb").exists():
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_bytes((work / "_executed.ipynb").read_bytes())
    return record


def run_notebooks(root: Path, notebooks: list[Path], build: Path, jobs: int = 2, timeout: int = CELL_TIMEOUT,
                  overrides: dict[str, str] | None = None, log=print, keep_executed: bool = True) -> dict[str, dict]:
    """Execute every notebook (``.ipynb`` paths) in the fresh environment, ``jobs`` at a time."""
    import tempfile

    root, build = Path(root).resolve(), Path(build).resolve()
    python, kernels = colab_environment(root, build, log=log)
    overrides = overrides or {}
    results: dict[str, dict] = {}
    scratch = Path(tempfile.mkdtemp(prefix="colab-check-"))

    def one(item):
        i, notebook = item
        rel = notebook.resolve().relative_to(root).as_posix()
        keep = build / "executed" / rel if keep_executed else None
        record = run_notebook(python, kernels, notebook, scratch / f"{i:03d}", timeout, overrides.get(rel), keep)
        record["notebook"] = rel
        log(f"{record['status']:>6}  {record['seconds']:7.1f} s  {rel}"
            + (f"  -- {record['error']}" if record["error"] else "")
            + (f"  (numbers never filled: {', '.join(record['unfilled'])})" if record.get("unfilled") else ""))
        return rel, record

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for rel, record in pool.map(one, enumerate(notebooks)):
            results[rel] = record
    import shutil

    shutil.rmtree(scratch, ignore_errors=True)
    return results


def write_report(results: dict[str, dict], out: Path, environment: str = "") -> tuple[Path, Path]:
    """``report.json`` and ``report.md`` (one row per notebook) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(results, indent=1, sort_keys=True), encoding="utf-8")
    ran = sum(r["status"] == "ran" for r in results.values())
    failed = sum(r["status"] == "failed" for r in results.values())
    lines = ["# Colab copies in a fresh environment", "",
             f"{ran} of {len(results)} notebooks ran, {failed} failed, {len(results) - ran - failed} skipped. "
             f"{environment}".strip(), "",
             "| notebook | result | seconds | why it failed / numbers not filled |", "|---|---|---|---|"]
    for rel, r in sorted(results.items()):
        why = (r["error"] or "").replace("|", "\\|").replace("\n", " ")
        if r.get("cell") is not None:
            why = f"cell {r['cell']}: {why}"
        if r.get("unfilled"):
            why += (" " if why else "") + "unfilled: " + ", ".join(r["unfilled"])
        lines.append(f"| {rel} | {r['status']} | {r['seconds']} | {why} |")
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out / "report.json", out / "report.md"


def main(argv: list[str] | None = None) -> int:
    import argparse

    from .colab import chapter_notebooks

    parser = argparse.ArgumentParser(prog="python -m bookkit colab-check",
                                     description="execute the Colab copies in a fresh environment (wheel + declared dependencies)")
    parser.add_argument("--root", type=Path, default=Path("."))
    parser.add_argument("--build", type=Path, default=Path("_build/colab-env"), help="wheel, wheelhouse, environment")
    parser.add_argument("--out", type=Path, default=Path("_build/colab-check"), help="report.json, report.md")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT, help="seconds a cell may run")
    parser.add_argument("--full", action="store_true",
                        help="run every reproduce copy at book scale (about 20 min on two cores); default: the REDUCED ones, reduced")
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every Colab copy")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    notebooks = [Path(n).resolve() for n in args.notebooks] or \
        [md.with_suffix(".ipynb").resolve() for md in chapter_notebooks(root)]
    rel = lambda n: n.relative_to(root).as_posix()
    skipped = {} if args.full else {
        rel(n): {"status": "skipped", "error": "book scale: run with --full", "cell": None, "source": None,
                 "unfilled": [], "seconds": 0, "notebook": rel(n)}
        for n in notebooks if n.stem == "reproduce" and rel(n) not in REDUCED}
    start = time.perf_counter()
    results = run_notebooks(root, [n for n in notebooks if rel(n) not in skipped], args.build, jobs=args.jobs,
                            timeout=args.timeout, overrides={} if args.full else REDUCED)
    results.update(skipped)
    python = next(Path(args.build).resolve().glob("venv-*/bin/python"))
    versions = subprocess.run([str(python), "-c", "import sys, numpy, pandas, torch, transformers; "
                               "print(f'Python {sys.version.split()[0]}, numpy {numpy.__version__}, pandas {pandas.__version__}, "
                               "torch {torch.__version__}, transformers {transformers.__version__}')"],
                              capture_output=True, text=True).stdout.strip()
    json_path, md_path = write_report(results, args.out.resolve(),
                                      f"Environment: {versions}; {len(results)} notebooks in "
                                      f"{time.perf_counter() - start:.0f} s on {args.jobs} workers.")
    failed = [n for n, r in results.items() if r["status"] == "failed"]
    ran = sum(r["status"] == "ran" for r in results.values())
    print(f"colab-check: {ran} of {len(results)} ran, {len(failed)} failed, {len(results) - ran - len(failed)} "
          f"skipped; report: {md_path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
