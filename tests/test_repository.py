"""Repository-level checks: pinned requirements vs environment.yml, notebooks vs _toc.yml."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from bookkit.pytest_notebooks import is_chapter_notebook

ROOT = Path(__file__).resolve().parents[1]


def _pins(lines):
    pins = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)==([^\s;]+)", line)
        assert m, f"not an exact pin: {line!r}"
        pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def test_environment_yml_matches_requirements():
    req = _pins((ROOT / "requirements.txt").read_text().splitlines())
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    assert "python=3.11" in deps
    pip_section = next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)
    assert _pins(pip_section) == req


def test_torch_is_pinned_exactly():
    """torch==2.13.0 is the CPU build these machines carry on disk (a project rule, not a preference)."""
    req = _pins((ROOT / "requirements.txt").read_text().splitlines())
    assert req["torch"] == "2.13.0"
    assert req["jupyter-book"].startswith("1.")


def _toc_files(node):
    if isinstance(node, dict):
        if "file" in node:
            yield node["file"]
        for value in node.values():
            yield from _toc_files(value)
    elif isinstance(node, list):
        for value in node:
            yield from _toc_files(value)


def test_every_notebook_is_in_the_toc_and_vice_versa():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    listed = {f for f in _toc_files(toc) if f.startswith("chapters/")}
    on_disk = {p.relative_to(ROOT).with_suffix("").as_posix()
               for p in (ROOT / "chapters").rglob("*.md") if ".ipynb_checkpoints" not in p.parts}
    assert listed == on_disk, (f"in _toc.yml but missing: {sorted(listed - on_disk)}; "
                               f"on disk but not in _toc.yml: {sorted(on_disk - listed)}")
    for f in listed:
        path = ROOT / f"{f}.md"
        if path.name != "index.md":
            assert is_chapter_notebook(path), f"{f}.md is listed as a notebook but has no jupytext MyST header"


def test_every_toc_file_exists():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"], *_toc_files(toc)]
    missing = [f for f in files if not (ROOT / f"{f}.md").exists()]
    assert not missing, missing


def test_six_parts_in_order():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    captions = [p["caption"] for p in toc["parts"]]
    numbered = [c for c in captions if re.match(r"^[IVX]+\. ", c)]
    assert [c.split(".")[0] for c in numbered] == ["I", "II", "III", "IV", "V", "VI"]


# -- the honesty rules, checked on the sources -----------------------------------------------------
PAGES = ("index", "derive", "implement", "reproduce", "exercises")


def _chapter_pages():
    return sorted(p for p in (ROOT / "chapters").glob("*/*.md") if p.stem.split("-")[0] in PAGES)


def test_no_typed_numbers_on_any_page():
    """Every number on a chapter page (prose, tables, directive bodies, figure captions, numbers as words and
    with suffixes) is glued ({glue:text}), the paper's ({paper} role with its source) or, outside reproduce
    pages, a number of the text marked {n}."""
    from bookkit.prose import typed_numbers

    problems = []
    for page in _chapter_pages():
        for line, number, text in typed_numbers(page.read_text(encoding="utf-8")):
            problems.append(f"{page.relative_to(ROOT)}:{line}: {number!r} in: {text[:120]}")
    assert not problems, ("numbers typed into a page (glue them, mark the paper's with {paper} and its source, "
                          "or a number of the text with {n}):\n" + "\n".join(problems))


def test_paper_numbers_name_their_source_and_reproduce_pages_glue_everything():
    from bookkit.prose import n_roles, paper_roles_without_source

    problems = []
    for page in _chapter_pages():
        text = page.read_text(encoding="utf-8")
        problems += [f"{page.relative_to(ROOT)}:{line}: {{paper}}`{body}` names no source"
                     for line, body in paper_roles_without_source(text)]
        if page.stem.startswith("reproduce"):
            problems += [f"{page.relative_to(ROOT)}:{line}: {{n}}`{body}` on a reproduce page (glue it)"
                         for line, body in n_roles(text)]
    assert not problems, "\n".join(problems)
