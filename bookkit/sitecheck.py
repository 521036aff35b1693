r"""The website as a reader meets it: a check of the built HTML (``make test`` runs it on every build).

Each defect class a reader has met has its own check, so that a new chapter cannot bring it back:

``raw-tex``, ``stray-dollar``
    TeX that MathJax will not typeset: a ``\command`` or a ``$`` in the page's text outside rendered
    math, code and outputs (e.g. a ``$$`` block glued to the text before it inside a theorem box).
``object-repr``, ``warning``, ``traceback``
    A cell output showing an object's repr (``<... at 0x...>``, ``Generator(PCG64)``), a printed
    warning, or a traceback in a cell not tagged ``raises-exception``.
``remote-asset``
    A script, stylesheet or font loaded from another host: the book must work offline.
``nbgrader-marker``
    ``### BEGIN SOLUTION`` and friends shown in a page's code.
``exercise-numbers``
    Exercises of a chapter not numbered 1, 2, ..., N (e.g. a book-wide counter showing "Exercise 11").
``overview``
    A chapter's overview page that does not list its notebooks, or a front page that does not list
    every chapter.
``scoreboard``
    Scoreboard counts that differ from the claims tables the reproduce pages show (or from the claims
    the notebooks exported, when their folder is given).

Use :func:`check_site` on a build folder, or the checks one page at a time::

    python -m bookkit sitecheck _build/html --claims _build/test-claims
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from companion_lib.common.claims import OUTCOMES  # the five outcomes of a claim

from .claims import rows_from_html

__all__ = ["Problem", "check_page", "check_overview", "check_front_page", "check_exercise_numbers",
           "check_scoreboard", "check_stylesheets", "check_site", "parse_claims_html", "OUTCOMES"]

NOTEBOOK_PAGES = ("derive", "implement", "reproduce", "exercises")

_TEX_COMMAND = re.compile(r"\\[A-Za-z]{2,}")
_DOLLAR = re.compile(r"\$(?!\d)")
_REPR = re.compile(r"<[A-Za-z_][\w.]*(?: [\w.]+)* (?:object )?at 0x[0-9a-fA-F]+>|Generator\(PCG64\)|"
                   r"\bRandomState\(MT19937\)")
_WARNING = re.compile(r"\b[A-Z]\w*Warning\b(?::|\s*\()|^\s*warnings\.warn\(", re.M)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^-{20,}\n\w*(Error|Exception)", re.M)
_MARKER = re.compile(r"###\s*(BEGIN|END)\s+(SOLUTION|HIDDEN TESTS)")
_EXERCISE = re.compile(r"^\s*Exercise\s+(\d+)\b")
_REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.I)
_CSS_REMOTE = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])(?:https?:)?//""", re.I)
# what is not the page's prose: code, outputs, rendered math, navigation
_NOT_PROSE = ("script", "style", "pre", "code", "kbd", "samp", "tt", "nav", "mjx-container", "svg",
              "span.math", "div.math", ".math", "div.cell_input", "div.cell_output", "div.highlight",
              ".toctree-wrapper", "a.headerlink", "table.claims-table", "table.claims-scoreboard")


@dataclass(frozen=True)
class Problem:
    page: str
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.page}: [{self.kind}] {self.detail}"


def _soup(html: str):
    from bs4 import BeautifulSoup

    return BeautifulSoup(html, "html.parser")


def _article(soup):
    return soup.select_one("article.bd-article") or soup.select_one("div.body") or soup.body or soup


def _snippet(text: str, start: int, width: int = 40) -> str:
    return " ".join(text[max(0, start - width):start + width].split())


# -- one page ---------------------------------------------------------------------------------------
def _remote_assets(soup, page: str) -> list[Problem]:
    problems = []
    for tag in soup.find_all("script", src=True):
        if _REMOTE.match(tag["src"].strip()):
            problems.append(Problem(page, "remote-asset", f"script from another host: {tag['src']}"))
    for tag in soup.find_all("link", href=True):
        rel = {r.lower() for r in tag.get("rel", [])}
        if rel & {"stylesheet", "preload", "modulepreload", "font"} and _REMOTE.match(tag["href"].strip()):
            problems.append(Problem(page, "remote-asset", f"{'/'.join(sorted(rel))} from another host: {tag['href']}"))
    for tag in soup.find_all("style"):
        if _CSS_REMOTE.search(tag.get_text()):
            problems.append(Problem(page, "remote-asset", "inline style loads a font or stylesheet from another host"))
    for tag in soup.find_all(style=True):
        if _CSS_REMOTE.search(tag["style"]):
            problems.append(Problem(page, "remote-asset", f"style attribute loads from another host: {tag['style'][:80]}"))
    return problems


def _prose_problems(article, page: str) -> list[Problem]:
    import copy

    prose = copy.copy(article)
    for selector in _NOT_PROSE:
        for tag in prose.select(selector):
            tag.decompose()
    text = prose.get_text(" ")
    problems = []
    for m in _TEX_COMMAND.finditer(text):
        problems.append(Problem(page, "raw-tex", f"TeX outside rendered math: ...{_snippet(text, m.start())}..."))
    for m in _DOLLAR.finditer(text):
        problems.append(Problem(page, "stray-dollar", f"a '$' outside rendered math: ...{_snippet(text, m.start())}..."))
    return problems


def _output_problems(article, page: str) -> list[Problem]:
    problems = []
    for cell in article.select("div.cell"):
        tags = {c[4:] for c in cell.get("class", []) if c.startswith("tag_")}
        for output in cell.select("div.cell_output"):
            text = output.get_text("\n")
            m = _REPR.search(text)
            if m:
                problems.append(Problem(page, "object-repr", f"a cell prints an object's repr: {m.group(0)}"))
            stderr = " ".join(o.get_text(" ") for o in output.select("div.stderr, div.output.stderr"))
            m = _WARNING.search(stderr) or _WARNING.search(text)
            if m:
                problems.append(Problem(page, "warning", f"a cell prints a warning: ...{_snippet(text, m.start())}..."
                                        if _WARNING.search(text) else f"a cell prints a warning: {stderr[:80]}"))
            if "raises-exception" not in tags and (output.select("div.traceback, div.output.traceback")
                                                   or _TRACEBACK.search(text)):
                problems.append(Problem(page, "traceback", "a traceback in a cell not tagged raises-exception"))
    return problems


def check_page(html: str, page: str = "page") -> list[Problem]:
    """Every check that needs one page only: TeX, outputs, remote assets and nbgrader markers."""
    soup = _soup(html)
    article = _article(soup)
    problems = _remote_assets(soup, page) + _prose_problems(article, page) + _output_problems(article, page)
    m = next((m for pre in article.find_all("pre") if (m := _MARKER.search(pre.get_text(" ")))), None)
    if m:
        problems.append(Problem(page, "nbgrader-marker", f"an nbgrader marker is shown: {m.group(0)}"))
    return problems


def check_exercise_numbers(html: str, page: str = "exercises") -> list[Problem]:
    """The exercises of one chapter page are numbered 1..N: boxes and headings alike, no gaps."""
    article = _article(_soup(html))
    numbers = set()
    for tag in article.select("span.caption-number"):
        m = _EXERCISE.match(tag.get_text(" "))
        if m:
            numbers.add(int(m.group(1)))
    for tag in article.select("h1, h2, h3, h4, p > strong:first-child"):
        m = _EXERCISE.match(tag.get_text(" "))
        if m:
            numbers.add(int(m.group(1)))
    if numbers and sorted(numbers) != list(range(1, max(numbers) + 1)):
        return [Problem(page, "exercise-numbers",
                        f"exercises are not numbered 1..N within the chapter: {sorted(numbers)}")]
    return []


def _links(article) -> set[str]:
    return {a["href"].split("#")[0] for a in article.select("a[href]")}


def check_overview(html: str, notebooks: list[str], page: str = "index") -> list[Problem]:
    """A chapter's overview page lists each of its notebook pages (hrefs relative to it, e.g. ``derive.html``)."""
    article = _article(_soup(html))
    listed = set()
    for wrapper in article.select(".toctree-wrapper, table.notebook-runtimes"):
        listed |= _links(wrapper)
    missing = [nb for nb in notebooks if nb not in listed]
    if missing:
        return [Problem(page, "overview", f"the overview page does not list its notebooks: {', '.join(missing)}")]
    return []


def check_front_page(html: str, chapters: list[str], page: str = "index") -> list[Problem]:
    """The front page links to every chapter's overview page (hrefs relative to it)."""
    article = _article(_soup(html))
    missing = [c for c in chapters if c not in _links(article)]
    if missing:
        return [Problem(page, "overview", f"the front page does not list every chapter: {', '.join(missing)}")]
    return []


# -- the scoreboard ---------------------------------------------------------------------------------
def parse_claims_html(text: str) -> list[dict] | None:
    """The rows of the last claims table shown in ``text``, or None when the page shows none: the JSON that
    :class:`companion_lib.common.ClaimTable` embeds in the HTML it displays (:mod:`bookkit.claims`)."""
    return rows_from_html(text)


def _counts(rows) -> dict[str, int]:
    return {o: sum(r["outcome"] == o for r in rows) for o in OUTCOMES}


def scoreboard_counts(html: str) -> dict[str, dict[str, int] | None]:
    """Per chapter, the counts the scoreboard shows (None for a chapter listed as missing)."""
    soup = _soup(html)
    counts = {}
    for tr in soup.select("table.claims-summary tr[data-chapter]"):
        if tr.get("data-missing"):
            counts[tr["data-chapter"]] = None
        else:
            counts[tr["data-chapter"]] = {o: int(tr.get(f"data-{o.replace(' ', '-')}", 0)) for o in OUTCOMES}
    return counts


def check_scoreboard(scoreboard_html: str, reproduce_pages: dict[str, str],
                     exported: dict[str, dict] | None = None, page: str = "book/scoreboard") -> list[Problem]:
    """The scoreboard's counts equal those of the claims tables the reproduce pages show.

    ``reproduce_pages`` maps a chapter id to its reproduce page's HTML (or a list, one per reproduce
    page); ``exported`` (optional) maps a
    chapter id to the JSON that :meth:`ClaimTable.export` wrote when the notebook ran.
    """
    shown = scoreboard_counts(scoreboard_html)
    if not shown and reproduce_pages:
        return [Problem(page, "scoreboard", "the scoreboard has no per-chapter summary")]
    problems = []
    for chapter, html in sorted(reproduce_pages.items()):
        pages = [html] if isinstance(html, str) else list(html)
        found = [parse_claims_html(h) for h in pages]
        rows = [r for part in found if part for r in part] if all(found) else None
        on_page = _counts(rows) if rows else None
        if chapter not in shown:
            problems.append(Problem(page, "scoreboard", f"{chapter} is not on the scoreboard"))
            continue
        if shown[chapter] != on_page:
            problems.append(Problem(page, "scoreboard", f"{chapter}: the scoreboard shows {shown[chapter]}, "
                                    f"its reproduce page {on_page}"))
        if exported is not None and chapter in exported:
            notebook = {o: int(exported[chapter].get("counts", {}).get(o, 0)) for o in OUTCOMES}
            if shown[chapter] != notebook:
                problems.append(Problem(page, "scoreboard", f"{chapter}: the scoreboard shows {shown[chapter]}, "
                                        f"the executed notebook exported {notebook}"))
    for chapter in sorted(set(shown) - set(reproduce_pages)):
        problems.append(Problem(page, "scoreboard", f"{chapter} is on the scoreboard but has no reproduce page"))
    return problems


def check_stylesheets(static: Path) -> list[Problem]:
    """No stylesheet under ``_static`` imports a font or another stylesheet from another host."""
    problems = []
    for css in sorted(Path(static).rglob("*.css")):
        if _CSS_REMOTE.search(css.read_text(encoding="utf-8", errors="replace")):
            problems.append(Problem(css.relative_to(static.parent).as_posix(), "remote-asset",
                                    "stylesheet loads a font or stylesheet from another host"))
    return problems


# -- the whole site ---------------------------------------------------------------------------------
def check_site(root: Path, claims: Path | None = None) -> list[Problem]:
    """Every check on every page of a built website (``_build/html``)."""
    root = Path(root)
    if not (root / "index.html").is_file():
        raise FileNotFoundError(f"{root} holds no built website (no index.html)")
    problems: list[Problem] = []
    skip = {"genindex.html", "search.html", "prf-prf.html"}
    for path in sorted(root.rglob("*.html")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("_static/", "_sources/", "_images/", "reports/")) or rel in skip:
            continue
        html = path.read_text(encoding="utf-8")
        problems += check_page(html, rel)
        if rel.startswith("chapters/") and rel.endswith("/exercises.html"):
            problems += check_exercise_numbers(html, rel)
    chapters = sorted(p.parent for p in (root / "chapters").glob("*/index.html"))
    for folder in chapters:
        notebooks = [f"{n}.html" for n in NOTEBOOK_PAGES if (folder / f"{n}.html").is_file()]
        problems += check_overview((folder / "index.html").read_text(encoding="utf-8"), notebooks,
                                   (folder / "index.html").relative_to(root).as_posix())
    front = root / "book" / "intro.html"
    if front.is_file():
        problems += check_front_page(front.read_text(encoding="utf-8"),
                                     [f"../chapters/{f.name}/index.html" for f in chapters], "book/intro.html")
    scoreboard = root / "book" / "scoreboard.html"
    if scoreboard.is_file():
        pages: dict[str, list[str]] = {}
        for p in sorted((root / "chapters").glob("*/reproduce*.html")):
            pages.setdefault(p.parent.name, []).append(p.read_text(encoding="utf-8"))
        exported = None
        if claims is not None:
            exported = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in Path(claims).glob("*.json")}
        problems += check_scoreboard(scoreboard.read_text(encoding="utf-8"), pages, exported)
    if (root / "_static").is_dir():
        problems += check_stylesheets(root / "_static")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bookkit sitecheck",
                                     description="check a built website for the defects readers met")
    parser.add_argument("site", type=Path, help="the built website, e.g. _build/html")
    parser.add_argument("--claims", type=Path, default=None, help="the claims folder the notebooks exported")
    args = parser.parse_args(argv)
    problems = check_site(args.site, args.claims)
    for problem in problems:
        print(problem)
    print(f"site check: {len(problems)} problems" if problems else "site check: OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
