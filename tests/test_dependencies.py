"""What the wheel declares: every package that the library or a chapter notebook imports, with floors the code needs.

The Colab copies install the wheel and its declared dependencies only (plus the chapter's extra), so an
import that pyproject.toml does not declare fails there even though it works in the book's pinned
environment. The imports are read from the source (the library's modules and the notebooks' code cells);
each is mapped to its distribution through this environment's installed packages.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from bookkit.colab import chapter_notebooks

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

#: imported, never declared, on purpose (with the reason)
NOT_DECLARED = {
    "IPython": "the Jupyter kernel's own package: every kernel that runs a notebook has it",
    "ipykernel": "the Jupyter kernel's own package",
    "myst_nb": "the book's build only; glue() works without it (companion_lib/common/glue.py)",
}
#: declared distributions that provide a module under another distribution name in the book's environment
SAME_PACKAGE = {"xgboost-cpu": "xgboost"}
#: what the code uses -> (distribution, oldest version that has it); the declared floor must not be lower
NEEDS = [
    (re.compile(r"\bnp\.trapezoid\b"), "numpy", "2.0"),
    (re.compile(r"\bnp\.bitwise_count\b"), "numpy", "2.0"),
    # tinylm reads DynamicCache's per-layer keys/values; transformers 4.55 still returns tuple caches for GPT-2
    (re.compile(r"\bcache\.layers\b|getattr\(cache, \"layers\""), "transformers", "4.56"),
]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(specs) -> dict[str, Requirement]:
    reqs = {}
    for spec in specs:
        req = Requirement(spec)
        reqs[_norm(req.name)] = req
    return reqs


BASE = _requirements(PROJECT["dependencies"])
EXTRAS = {name: _requirements(specs) for name, specs in PROJECT.get("optional-dependencies", {}).items()}


def _code(source: str) -> str:
    """Cell source as Python: IPython's own transformer turns magics into calls."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def _imports(source: str) -> list[tuple[str, bool]]:
    """(top-level module, guarded by ``except ImportError``) for every absolute import in ``source``."""
    tree = ast.parse(_code(source))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                or isinstance(h.type, ast.Tuple) and any(getattr(e, "id", "") in ("ImportError", "ModuleNotFoundError")
                                                         for e in h.type.elts)
                for h in node.handlers):
            for inner in ast.walk(ast.Module(body=node.body, type_ignores=[])):
                guarded.add(id(inner))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name.split(".")[0], id(node) in guarded) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], id(node) in guarded))
    return found


def _chapter_of_module(path: Path) -> str | None:
    parts = path.relative_to(ROOT / "companion_lib").parts
    first = parts[0].removesuffix(".py")
    return None if first in ("common", "tinylm", "tinyvlm", "__init__") else first.replace("_", "-")


def _all_imports() -> list[tuple[str, bool, str, str | None]]:
    """(module, guarded, where, chapter slug or None) over the library and every notebook's code cells."""
    import jupytext

    out = []
    for path in sorted((ROOT / "companion_lib").rglob("*.py")):
        for module, guarded in _imports(path.read_text(encoding="utf-8")):
            out.append((module, guarded, str(path.relative_to(ROOT)), _chapter_of_module(path)))
    for md in chapter_notebooks(ROOT):
        nb = jupytext.read(md)
        slug = md.parent.name.split("-", 1)[1]
        for cell in nb.cells:
            if cell.cell_type == "code":
                for module, guarded in _imports(cell.source):
                    out.append((module, guarded, str(md.relative_to(ROOT)), slug))
    return out


IMPORTS = _all_imports()
PROVIDERS = metadata.packages_distributions()


def _distributions(module: str) -> set[str]:
    dists = {_norm(d) for d in PROVIDERS.get(module, [])}
    return {_norm(SAME_PACKAGE.get(d, d)) for d in dists} or {_norm(module)}


def _third_party() -> list[tuple[str, bool, str, str | None]]:
    return [i for i in IMPORTS if i[0] not in sys.stdlib_module_names and i[0] != "companion_lib"
            and i[0] not in NOT_DECLARED]


def test_the_scan_finds_the_imports():
    modules = {m for m, *_ in _third_party()}
    assert {"numpy", "torch", "pandas", "transformers", "dit", "colour"} <= modules, modules


def test_every_import_is_declared():
    """An unguarded import is declared as a dependency, or in the extra named after its chapter (which
    that chapter's Colab copies install); a guarded one (``except ImportError``) at least in some extra."""
    problems = []
    every_extra = set().union(*(set(reqs) for reqs in EXTRAS.values()))
    for module, guarded, where, slug in _third_party():
        dists = _distributions(module)
        if dists & set(BASE):
            continue
        chapter_extra = set(EXTRAS.get(slug, {})) if slug else set()
        if dists & chapter_extra:
            continue
        if guarded and dists & every_extra:
            continue
        problems.append(f"{where}: imports {module} (distribution {sorted(dists)}), declared "
                        + ("nowhere" if not dists & every_extra else "only in another chapter's extra"))
    assert not problems, "undeclared imports (pyproject.toml):\n" + "\n".join(sorted(set(problems)))


def test_every_declared_dependency_is_imported():
    used = set().union(*(_distributions(m) for m, *_ in _third_party()))
    unused = sorted(name for name in BASE if name not in used)
    assert not unused, f"declared but imported nowhere (drop them from pyproject.toml): {unused}"
    for extra, reqs in EXTRAS.items():
        for name in reqs:
            if name == _norm(PROJECT["name"]):
                continue
            assert name in used, f"extra {extra!r}: {name} is imported nowhere"


def test_all_is_every_chapter_extra():
    chapter_extras = {name for name in EXTRAS if any(md.parent.name.split("-", 1)[1] == name
                                                     for md in chapter_notebooks(ROOT))}
    assert chapter_extras, "no per-chapter extras"
    (all_req,) = EXTRAS["all"].values()
    assert set(all_req.extras) == chapter_extras


def test_floors_cover_what_the_code_uses():
    sources = [p.read_text(encoding="utf-8") for p in (ROOT / "companion_lib").rglob("*.py")]
    sources += [md.read_text(encoding="utf-8") for md in chapter_notebooks(ROOT)]
    text = "\n".join(sources)
    for pattern, dist, version in NEEDS:
        if not pattern.search(text):
            continue
        req = BASE.get(_norm(dist))
        assert req is not None, f"{dist} is used ({pattern.pattern}) but not declared"
        floors = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
        assert floors and max(floors) >= Version(version), (
            f"{dist}: the code uses {pattern.pattern}, which needs {dist}>={version}; declared {req}")


@pytest.mark.parametrize("name", sorted(BASE))
def test_the_book_environment_satisfies_the_declared_ranges(name):
    """The pinned environment (requirements.txt) is one the declared ranges accept."""
    req = BASE[name]
    candidates = [name] + [k for k, v in SAME_PACKAGE.items() if _norm(v) == name]
    for candidate in candidates:
        try:
            version = metadata.version(candidate)
        except metadata.PackageNotFoundError:
            continue
        assert req.specifier.contains(Version(version).base_version or version, prereleases=True), (
            f"{candidate} {version} is pinned but pyproject.toml declares {req}")
        return
    pytest.fail(f"{name} is declared but not installed in the book's environment")
