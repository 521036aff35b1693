"""Sphinx extension for the book's own pages and conventions.

Directives
----------
``{claims-scoreboard}``
    Every chapter's claims, read from the claims table that its ``reproduce`` page *renders* in this
    build (executed or served from the execution cache alike): when a reproduce page is read, the
    claims JSON embedded in its notebook's table output (:mod:`bookkit.claims`) is kept in the build environment, so a page
    that is not re-read keeps its claims and a cache hit counts exactly what the page shows. The page
    opens with a per-chapter summary (the five outcomes: reproduced as expected, not reproduced as
    expected, undecided, contradicted, not run; run time, link, a small bar per chapter), then shows each
    chapter's forest plot (every row's 95% interval against its margin) and its rows. A chapter whose page shows no claims
    table is listed as missing, never skipped.
``{runtime-table}``
    ``runtime.json`` (written by ``make test``: wall seconds, kernel CPU seconds and peak memory per
    notebook and chapter) plus the execution time of each notebook in this build.
``{notebook-runtimes}``
    On a chapter's overview page: its notebooks with their measured run times.
``{part-chapters}``
    On a part page: the part's planned chapters, one per line as ``NN | title | authors``; a chapter
    whose folder is in the book links to it ("ready"), the others say "in preparation". Adding a
    chapter to ``_toc.yml`` is all it takes to update the part page.

Conventions applied to every page
---------------------------------
* Exercises are numbered per chapter: an ``{exercise}`` box takes the number of the "Exercise N"
  heading (or bold "Exercise N" paragraph) it sits under, else the next number after the previous
  exercise; references and "Solution to Exercise N" titles follow.
* nbgrader's ``### BEGIN/END SOLUTION`` and ``### BEGIN/END HIDDEN TESTS`` marker lines are removed
  from the code shown on the page (the code itself stays).
* MathJax is served from the build itself (the ``sphinx-mathjax-offline`` package's copy), never from
  a CDN: the website works offline. A build without that copy stops with a message saying so.
* ``bookpages.css``: long equations and wide outputs scroll instead of running off the page.

The ``{paper}`` role marks a number quoted from the paper, the ``{n}`` role a number of the text itself
(not a result); see :mod:`bookkit.prose`.
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
import shutil
from pathlib import Path

from docutils import nodes
from sphinx.errors import ExtensionError
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from bookkit.claims import rows_from_html
from companion_lib.common.claims import OUTCOME_COLORS, forest_svg
from companion_lib.common.claims import OUTCOMES as CLAIM_OUTCOMES

logger = logging.getLogger(__name__)

SUMMARY_PAGES = ("book/scoreboard", "book/runtimes")
_REPRODUCE = re.compile(r"^chapters/([^/]+)/reproduce[\w-]*$")  # reproduce.md, or reproduce-*.md
_EXERCISE_TEXT = re.compile(r"^\s*Exercise\s+(\d+)\b")
_NBGRADER_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) (SOLUTION|HIDDEN TESTS)[ \t]*\n?", re.M)
MATHJAX_PACKAGE = "sphinx-mathjax-offline"
MATHJAX_FILE = "mathjax/tex-chtml.js"
_STATIC = Path(__file__).resolve().parent / "static"

# the five outcomes of a claim (companion_lib.common.claims), in the order of the scoreboard's columns
OUTCOMES = CLAIM_OUTCOMES
OUTCOME_STYLE = {o: (o, OUTCOME_COLORS[o]) for o in OUTCOMES}


def _build_root(app) -> Path:
    return Path(app.outdir).parent


def _runtime_report(app) -> dict | None:
    candidates = [Path(app.config.bookpages_runtime_report)] if app.config.bookpages_runtime_report else []
    candidates.append(_build_root(app) / "runtime.json")
    for path in candidates:
        if path.is_file():
            try:
                return json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                logger.warning(f"bookpages: {path} is not valid JSON; run times are not shown")
    return None


def _table(headers, rows, cls, row_attrs=None) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        attrs = row_attrs[i] if row_attrs else ""
        body.append(f"<tr{attrs}>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>")
    return f'<table class="table {cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


# -- claims, as the reproduce pages render them ------------------------------------------------------
def _collect_claims(app, doctree) -> None:
    env = app.env
    match = _REPRODUCE.match(env.docname)
    if not match:
        return
    rows = None
    for node in doctree.findall(nodes.raw):
        found = rows_from_html(node.astext())
        rows = found if found is not None else rows
    if not hasattr(env, "bookpages_claims"):
        env.bookpages_claims = {}
    env.bookpages_claims[env.docname] = rows


def _purge(app, env, docname) -> None:
    for attr in ("bookpages_claims", "bookpages_exercises"):
        getattr(env, attr, {}).pop(docname, None)


def _merge(app, env, docnames, other) -> None:
    for attr in ("bookpages_claims", "bookpages_exercises"):
        if hasattr(other, attr):
            mine = getattr(env, attr, None)
            if mine is None:
                setattr(env, attr, mine := {})
            mine.update({d: v for d, v in getattr(other, attr).items() if d in docnames})


def _chapter_docnames(env) -> list[str]:
    return sorted(d for d in env.found_docs if _REPRODUCE.match(d))


def _counts(rows) -> dict[str, int]:
    return {o: sum(r["outcome"] == o for r in rows) for o in OUTCOMES}


def _bar_svg(counts: dict[str, int], width: int = 160, height: int = 14) -> str:
    total = sum(counts.values())
    if not total:
        return ""
    x, parts = 0.0, []
    for outcome, (label, colour) in OUTCOME_STYLE.items():
        n = counts.get(outcome, 0)
        if not n:
            continue
        w = width * n / total
        parts.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="{height}" fill="{colour}">'
                     f"<title>{n} {html.escape(label)}</title></rect>")
        x += w
    return (f'<svg class="claims-bar" width="{width}" height="{height}" role="img" '
            f'aria-label="claims by outcome">{"".join(parts)}</svg>')


class ClaimsScoreboard(SphinxDirective):
    has_content = False

    def run(self):
        app, env = self.env.app, self.env
        claims = getattr(env, "bookpages_claims", {})
        report = _runtime_report(app) or {}
        runtimes = report.get("chapters", {})
        summary_rows, summary_attrs, sections = [], [], []
        totals = dict.fromkeys(OUTCOMES, 0)
        missing = 0
        by_chapter: dict[str, list[str]] = {}
        for docname in _chapter_docnames(env):
            by_chapter.setdefault(docname.split("/")[1], []).append(docname)
        for chapter, docnames in sorted(by_chapter.items()):
            docname = docnames[0]
            overview = f"chapters/{chapter}/index"
            title = env.titles[overview].astext() if overview in env.titles else chapter
            link_doc = overview if overview in env.found_docs else docname
            link = (f'<a href="{app.builder.get_relative_uri(env.docname, link_doc)}">{html.escape(chapter)}</a>')
            page = ", ".join(f'<a href="{app.builder.get_relative_uri(env.docname, d)}">{html.escape(d.split("/")[-1])} page</a>'
                             for d in docnames)
            found = [claims.get(d) for d in docnames]
            rows = [r for part in found if part for r in part] if all(found) else None
            rt = runtimes.get(chapter)
            runtime = (f"{rt.get('cpu_seconds', 0):.0f} s CPU, {rt['seconds']:.0f} s wall" if rt else "—")
            anchor = f"claims-{chapter}"
            if not rows:
                missing += 1
                summary_rows.append([link] + ["—"] * len(OUTCOMES) + [runtime,
                                     f"<em>claims missing</em>: the {page} shows no claims table in this build"])
                summary_attrs.append(f' data-chapter="{html.escape(chapter)}" data-missing="1"')
                continue
            counts = _counts(rows)
            for o in OUTCOMES:
                totals[o] += counts[o]
            summary_rows.append([link] + [str(counts[o]) for o in OUTCOMES]
                                + [runtime, _bar_svg(counts) + f' <a href="#{anchor}">rows</a>'])
            summary_attrs.append(f' data-chapter="{html.escape(chapter)}" '
                                 + " ".join(f'data-{o.replace(" ", "-")}="{counts[o]}"' for o in OUTCOMES))
            table_rows = []
            for r in rows:
                colour = OUTCOME_COLORS.get(r["outcome"], "#000000")
                mark = f'<span style="color:{colour}">{html.escape(r["outcome"])}</span>'
                if r.get("reason"):
                    mark += f"<br><small>{html.escape(r['reason'])}</small>"
                table_rows.append([html.escape(r["claim"]), html.escape(r["paper"]), html.escape(r.get("book", "")),
                                   html.escape(r.get("criterion", "")), html.escape(r.get("expect", "") or "—"),
                                   f'<span class="outcome">{mark}</span>'])
            sections.append(f'<h3 id="{anchor}">{html.escape(title)} <small>({link}, {page})</small></h3>'
                            + f'<div class="claims-forest">{forest_svg(rows)}</div>'
                            + _table(["Claim", "Paper", "This book: estimate [95% CI]", "Criterion", "Expected",
                                      "Outcome"], table_rows, "claims-scoreboard"))
        n_claims = sum(totals.values())
        intro = (f'<p class="scoreboard-totals" data-claims="{n_claims}" data-missing="{missing}">'
                 f"<strong>{n_claims}</strong> claims in {len(summary_rows) - missing} "
                 + ("chapter" if len(summary_rows) - missing == 1 else "chapters") + ": "
                 + ", ".join(f"<strong>{totals[o]}</strong> {html.escape(o)}" for o in OUTCOMES)
                 + f"; claims of <strong>{missing}</strong> "
                 + ("chapter" if missing == 1 else "chapters") + " missing from this build.</p>"
                 + f"<p>{_bar_svg(totals, width=480, height=18)}</p>"
                 + '<p class="scoreboard-legend">'
                 + " ".join(f'<span style="color:{c}">■</span> {html.escape(label)}' for label, c in OUTCOME_STYLE.values())
                 + "</p>")
        summary = _table(["Chapter", "Reproduced as expected", "Not reproduced as expected", "Undecided",
                          "Contradicted", "Not run", "Run time (make test)", "Outcomes"], summary_rows,
                         "claims-summary", summary_attrs)
        body = intro + summary + "<h2>The claims, chapter by chapter</h2>" + "".join(sections)
        return [nodes.raw("", body, format="html")]


# -- run times --------------------------------------------------------------------------------------
def _build_exec_rows(env, docnames) -> list[list[str]]:
    from myst_nb.sphinx_ import NbMetadataCollector

    rows = []
    for docname in docnames:
        exec_data = NbMetadataCollector.get_exec_data(env, docname)
        if exec_data and exec_data.get("runtime") is not None:
            rows.append([html.escape(docname), f"{exec_data['runtime']:.1f}", html.escape(str(exec_data.get("method", "")))])
    return rows


def _runtime_svg(data: dict) -> str:
    """Wall and CPU seconds per chapter as horizontal bars, with the budget line (inline SVG)."""
    import io

    import matplotlib
    import matplotlib.pyplot as plt

    from bookkit.pytest_notebooks import BUDGET_SECONDS

    chapters = list(data.get("chapters", {}).items())
    with matplotlib.rc_context({"svg.hashsalt": "runtimes", "svg.fonttype": "none", "figure.dpi": 72}):
        fig, ax = plt.subplots(figsize=(7.0, 0.28 * max(len(chapters), 1) + 1.0))
        ys = range(len(chapters) - 1, -1, -1)
        wall = [r["seconds"] for _, r in chapters]
        cpu = [r.get("cpu_seconds", 0.0) for _, r in chapters]
        colours = ["#c62828" if w > BUDGET_SECONDS else "#0173b2" for w in wall]
        ax.barh(list(ys), wall, color=colours, height=0.7, label="wall s (red: over the budget)")
        ax.barh(list(ys), cpu, color="#de8f05", height=0.3, label="CPU s")
        ax.axvline(BUDGET_SECONDS, color="#444444", ls="--", lw=1)
        ax.text(BUDGET_SECONDS, len(chapters) - 0.4, f" budget {BUDGET_SECONDS:.0f} s", fontsize=8, va="bottom")
        ax.set_yticks(list(ys), [c for c, _ in chapters], fontsize=8)
        ax.set_xlabel("seconds (make test, two notebooks at a time)", fontsize=8)
        ax.legend(fontsize=8, loc="lower right", frameon=False)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
        plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


class RuntimeTable(SphinxDirective):
    has_content = False

    def run(self):
        app, env = self.env.app, self.env
        parts = []
        data = _runtime_report(app)
        if data:
            m = data.get("machine", {})
            parts.append(f"<p>Measured by <code>make test</code> on {html.escape(data.get('generated', '?'))}: "
                         f"{html.escape(str(m.get('cpu_count', '?')))} CPU cores ({html.escape(m.get('processor', '?'))}), "
                         f"{m.get('memory_gib', '?')} GiB of memory, Python {html.escape(m.get('python', '?'))}, "
                         f"{html.escape(m.get('platform', '?'))}. Two notebooks ran at a time; "
                         "<em>CPU s</em> is the kernel's own CPU time.</p>")
            parts.append(f'<div class="runtime-chart">{_runtime_svg(data)}</div>')
            rows = [[html.escape(ch), f"{r['seconds']:.1f}", f"{r.get('cpu_seconds', 0):.1f}", f"{r['peak_mib']:.0f}",
                     str(r["notebooks"]), "✅" if r["passed"] else "❌"] for ch, r in data.get("chapters", {}).items()]
            parts.append(_table(["Chapter", "Wall s", "CPU s", "Peak MiB", "Notebooks", "Passed"], rows, "runtime-chapters"))
            rows = [[html.escape(nb), f"{r['seconds']:.1f}", f"{r.get('cpu_seconds', 0):.1f}", f"{r['peak_mib']:.0f}"]
                    for nb, r in data.get("notebooks", {}).items()]
            parts.append("<p>Per notebook:</p>" + _table(["Notebook", "Wall s", "CPU s", "Peak MiB"], rows, "runtime-notebooks"))
        else:
            parts.append("<p><em>No run-time report in this build folder: run <code>make test</code>, which writes "
                         "<code>_build/runtime.json</code>, then build the book.</em></p>")
        rows = _build_exec_rows(env, sorted(d for d in env.found_docs if d.startswith("chapters/")))
        if rows:
            parts.append("<p>Execution time of each notebook in the build of this website "
                         "('cache' means the outputs came from the execution cache, filled by the run that "
                         "executed the notebook):</p>"
                         + _table(["Notebook", "Seconds", "Executed by"], rows, "runtime-build"))
        return [nodes.raw("", "".join(parts), format="html")]


# -- pages resolved once every page has been read -------------------------------------------------
class pending_bookpage(nodes.General, nodes.Element):
    """Placeholder replaced at ``doctree-resolved``, when every page's title and run time is known."""


def _skip(self, node):
    raise nodes.SkipNode


class NotebookRuntimes(SphinxDirective):
    """The notebooks of this chapter with their measured run times (on its overview page)."""

    has_content = False

    def run(self):
        return [pending_bookpage(kind="notebook-runtimes")]


class PartChapters(SphinxDirective):
    """The planned chapters of a part: ``NN | title | authors`` per line."""

    has_content = True

    def run(self):
        planned = []
        for line in self.content:
            if not line.strip():
                continue
            fields = [f.strip() for f in line.split("|")]
            if len(fields) != 3 or not fields[0].isdigit():
                raise self.error(f"part-chapters: expected 'NN | title | authors', got {line!r}")
            planned.append(fields)
        return [pending_bookpage(kind="part-chapters", planned=planned)]


def _chapter_folder(env, number: str) -> str | None:
    for docname in sorted(env.found_docs):
        parts = docname.split("/")
        if len(parts) == 3 and parts[0] == "chapters" and parts[2] == "index" and parts[1].startswith(number + "-"):
            return docname
    return None


def _render_pending(app, node, fromdoc) -> str:
    env = app.env
    if node["kind"] == "part-chapters":
        rows = []
        for number, title, authors in node["planned"]:
            docname = _chapter_folder(env, number)
            if docname:
                shown = env.titles[docname].astext() if docname in env.titles else title
                link = f'<a href="{app.builder.get_relative_uri(fromdoc, docname)}">{html.escape(shown)}</a>'
                rows.append([number, link, html.escape(authors), "ready"])
            else:
                rows.append([number, html.escape(title), html.escape(authors), "<em>in preparation</em>"])
        coming = [r for r in node["planned"] if not _chapter_folder(env, r[0])]
        note = ""
        if coming and len(coming) == len(node["planned"]):
            note = ("<p><em>No chapter of this part is in the book yet; the chapters below are in preparation "
                    "and will appear here as they land.</em></p>")
        return note + _table(["", "Chapter", "Paper by", "Status"], rows, "part-chapters")
    if node["kind"] == "notebook-runtimes":
        children = env.toctree_includes.get(fromdoc, [])
        report = (_runtime_report(app) or {}).get("notebooks", {})
        from myst_nb.sphinx_ import NbMetadataCollector

        rows = []
        for docname in children:
            title = env.titles[docname].astext() if docname in env.titles else docname
            link = f'<a href="{app.builder.get_relative_uri(fromdoc, docname)}">{html.escape(title)}</a>'
            measured = report.get(env.doc2path(docname, False)) or report.get(f"{docname}.md")
            exec_data = NbMetadataCollector.get_exec_data(env, docname) or {}
            rows.append([link,
                         f"{measured['cpu_seconds']:.0f}" if measured else "—",
                         f"{measured['seconds']:.0f}" if measured else "—",
                         f"{measured['peak_mib']:.0f}" if measured else "—",
                         f"{exec_data['runtime']:.0f} ({html.escape(str(exec_data.get('method', '')))})"
                         if exec_data.get("runtime") is not None else "—"])
        if not rows:
            return ""
        note = ("<p>Run times measured by <code>make test</code> (two CPU cores, two notebooks at a time); "
                "see the run-time page for the machine.</p>" if report else
                "<p><em>Run times appear here after <code>make test</code> has written "
                "<code>_build/runtime.json</code>.</em></p>")
        return note + _table(["Notebook", "CPU s", "Wall s", "Peak MiB", "This build s"], rows, "notebook-runtimes")
    return ""  # pragma: no cover


def _resolve_pending(app, doctree, fromdoc) -> None:
    for node in list(doctree.findall(pending_bookpage)):
        if app.builder.format == "html":
            node.replace_self(nodes.raw("", _render_pending(app, node, fromdoc), format="html"))
        else:
            node.parent.remove(node)


# -- exercises numbered per chapter ------------------------------------------------------------------
def _number_exercises(app, doctree) -> None:
    try:
        from sphinx_exercise.nodes import exercise_enumerable_node
    except ImportError:  # pragma: no cover
        return
    env = app.env
    if not any(True for _ in doctree.findall(exercise_enumerable_node)):
        getattr(env, "bookpages_exercises", {}).pop(env.docname, None)
        return

    def is_marker(node):
        if isinstance(node, exercise_enumerable_node):
            return True
        if isinstance(node, nodes.title) and isinstance(node.parent, nodes.section):
            return True
        return isinstance(node, nodes.paragraph) and bool(node.children) and isinstance(node.children[0], nodes.strong)

    def number_of(node):
        text = node.children[0].astext() if isinstance(node, nodes.paragraph) else node.astext()
        match = _EXERCISE_TEXT.match(text)
        return int(match.group(1)) if match else None

    def own_number(box):
        """The number written next to the box: its section's heading, or a bold paragraph right before it."""
        section = box.parent
        if isinstance(section, nodes.section) and section.children and isinstance(section[0], nodes.title):
            n = number_of(section[0])
            if n is not None:
                return n
        index = box.parent.index(box)
        previous = box.parent[index - 1] if index > 0 else None
        if is_marker(previous) and isinstance(previous, nodes.paragraph):
            return number_of(previous)
        return None

    numbers, used, current = {}, set(), 0
    for node in doctree.findall(is_marker):
        if isinstance(node, exercise_enumerable_node):
            n = own_number(node)
            if n is None or n in used:
                n = current + 1
            used.add(n)
            current = max(current, n)
            if node.get("ids"):
                numbers[node["ids"][0]] = n
        else:
            n = number_of(node)
            if n is not None:
                current = n
    if not hasattr(env, "bookpages_exercises"):
        env.bookpages_exercises = {}
    env.bookpages_exercises[env.docname] = numbers


def _apply_exercise_numbers(app, env):
    changed = []
    for docname, numbers in getattr(env, "bookpages_exercises", {}).items():
        table = env.toc_fignumbers.setdefault(docname, {}).setdefault("exercise", {})
        for node_id, n in numbers.items():
            if table.get(node_id) != (n,):
                table[node_id] = (n,)
        changed.append(docname)
    return changed


# -- nbgrader markers are not shown -------------------------------------------------------------------
def _strip_nbgrader_markers(app, doctree) -> None:
    for node in list(doctree.findall(nodes.literal_block)):
        text = node.astext()
        if "### BEGIN" not in text and "### END" not in text:
            continue
        cleaned = _NBGRADER_MARKER.sub("", text)
        if cleaned != text:
            node.children = []
            node += nodes.Text(cleaned)
            node.rawsource = cleaned


# -- offline MathJax and the book's CSS -------------------------------------------------------------------
def _mathjax_dir() -> Path | None:
    spec = importlib.util.find_spec(MATHJAX_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "static" / "mathjax"
    return folder if (folder / "tex-chtml.js").is_file() else None


def _config_inited(app, config) -> None:
    config.html_static_path = list(config.html_static_path) + [str(_STATIC)]
    if not str(config.mathjax_path).startswith(("http://", "https://", "//")):
        return  # a local MathJax was configured explicitly
    if _mathjax_dir() is None:
        raise ExtensionError(
            "bookpages: the offline copy of MathJax is missing (package 'sphinx-mathjax-offline', pinned in "
            "requirements.txt). The website must render its formulas without the internet; install the "
            "pinned requirements (`make venv`) or set `mathjax_path` to a local copy.")
    config.mathjax_path = MATHJAX_FILE


def _copy_mathjax(app, exception) -> None:
    if app.builder.format != "html" or app.config.mathjax_path != MATHJAX_FILE:
        return
    source = _mathjax_dir()
    target = Path(app.outdir) / "_static" / "mathjax"
    if source is not None and not (target / "tex-chtml.js").is_file():
        shutil.copytree(source, target, dirs_exist_ok=True)


# -- re-reading -------------------------------------------------------------------------------------
_DYNAMIC_DIRECTIVES = re.compile(r"^[`:]{3,}\{(notebook-runtimes|part-chapters)\}", re.M)


def _read_summaries_last(app, env, docnames):
    for name in SUMMARY_PAGES:
        if name in docnames:
            docnames.remove(name)
            docnames.append(name)


def _always_reread(app, env, added, changed, removed):
    """The summary pages, and pages whose tables depend on other pages (cheap plain pages)."""
    again = [name for name in SUMMARY_PAGES if name in env.found_docs]
    for docname in env.found_docs:
        if docname.startswith("book/parts/") or docname.endswith("/index"):
            try:
                text = Path(env.doc2path(docname)).read_text(encoding="utf-8")
            except OSError:
                continue
            if _DYNAMIC_DIRECTIVES.search(text):
                again.append(docname)
    return again


def paper_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{paper}`0.81 (Table 2)```: a number quoted from the paper, shown as written.

    The role marks the number as the paper's (with its source) for the book's check that every other
    number in a reproduce page's prose is computed and glued.
    """
    node = nodes.inline(rawtext, text, classes=["paper-number"])
    return [node], []


def text_number_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{n}`four```: a number of the text itself (a definition, the steps of an argument, the size of a toy
    input shown in code beside it), not a result; shown as written. The prose check accepts it outside
    reproduce pages (:mod:`bookkit.prose`)."""
    return [nodes.inline(rawtext, text, classes=["text-number"])], []


def setup(app):
    app.add_config_value("bookpages_runtime_report", "", "env")
    app.add_role("paper", paper_role)
    app.add_role("n", text_number_role)
    app.add_directive("claims-scoreboard", ClaimsScoreboard)
    app.add_directive("runtime-table", RuntimeTable)
    app.add_directive("notebook-runtimes", NotebookRuntimes)
    app.add_directive("part-chapters", PartChapters)
    app.add_node(pending_bookpage, html=(_skip, None), latex=(_skip, None), text=(_skip, None))
    app.add_css_file("bookpages.css")
    app.connect("config-inited", _config_inited)
    app.connect("doctree-read", _collect_claims)
    app.connect("doctree-read", _number_exercises)
    app.connect("doctree-read", _strip_nbgrader_markers)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("env-get-updated", _apply_exercise_numbers, priority=900)
    app.connect("doctree-resolved", _resolve_pending)
    app.connect("env-get-outdated", _always_reread)
    app.connect("env-before-read-docs", _read_summaries_last)
    app.connect("build-finished", _copy_mathjax)
    return {"version": "0.2", "parallel_read_safe": False, "parallel_write_safe": True}
