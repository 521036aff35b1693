"""Sphinx extension for the book-wide pages: the claims scoreboard and the run-time table.

``{claims-scoreboard}`` collects the claims table of every chapter's ``reproduce`` notebook from the
notebook as executed (or served from the execution cache) *in the same build*: myst-nb writes each
executed notebook to ``<build>/jupyter_execute``, and :class:`companion_lib.common.ClaimTable`
displays itself with a machine-readable mime type next to its HTML. A chapter whose claims cannot
be found is listed as missing, never skipped.

``{runtime-table}`` renders ``<build>/runtime.json`` (written by ``make test``: wall seconds, kernel
CPU seconds and peak memory per notebook and chapter, and the machine), plus the execution time of
each notebook in this build when the build executed notebooks.

Both pages are read last and re-read on every build, after the chapters they summarise.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

CLAIMS_MIME = "application/vnd.iclr2025-reproduced.claims+json"
SUMMARY_PAGES = ("book/scoreboard", "book/runtimes")
MARK = {"passed": "✅ passed", "failed": "❌ failed", "not reproduced at this scale": "⚠️ not reproduced at this scale"}


def _build_root(app) -> Path:
    return Path(app.outdir).parent


def _chapter_docnames(env) -> list[str]:
    return sorted(d for d in env.found_docs if d.startswith("chapters/") and d.endswith("/reproduce"))


def _claims_from_executed(app, docname: str) -> dict | None:
    path = _build_root(app) / "jupyter_execute" / f"{docname}.ipynb"
    if not path.exists():
        return None
    nb = json.loads(path.read_text(encoding="utf-8"))
    found = None
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if CLAIMS_MIME in data:
                payload = data[CLAIMS_MIME]
                found = json.loads(payload) if isinstance(payload, str) else payload
    return found


def _table(headers, rows, cls) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="table {cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


class ClaimsScoreboard(SphinxDirective):
    has_content = False

    def run(self):
        app, env = self.env.app, self.env
        rows, totals = [], {"passed": 0, "failed": 0, "not reproduced at this scale": 0, "missing": 0}
        for docname in _chapter_docnames(env):
            chapter = docname.split("/")[1]
            link = f'<a href="{app.builder.get_relative_uri(env.docname, docname)}">{html.escape(chapter)}</a>'
            data = _claims_from_executed(app, docname)
            if not data or not data.get("claims"):
                totals["missing"] += 1
                rows.append([link, "<em>claims missing: the notebook did not run in this build</em>",
                             "", "", "", "❔ missing"])
                continue
            for claim in data["claims"]:
                totals[claim["status"]] = totals.get(claim["status"], 0) + 1
                result = MARK.get(claim["status"], html.escape(claim["status"]))
                if claim.get("reason"):
                    result += f"<br><small>{html.escape(claim['reason'])}</small>"
                rows.append([link, html.escape(claim["claim"]), html.escape(claim["paper"]),
                             html.escape(claim["book"]), html.escape(claim["criterion"]), result])
        summary = (f"<p><strong>{totals['passed']}</strong> claims passed, <strong>{totals['failed']}</strong> failed, "
                   f"<strong>{totals['not reproduced at this scale']}</strong> not reproduced at this scale; "
                   f"claims of <strong>{totals['missing']}</strong> chapters missing from this build.</p>")
        table = _table(["Chapter", "Claim", "Paper", "This book", "Criterion", "Result"], rows, "claims-scoreboard")
        return [nodes.raw("", summary + table, format="html")]


class RuntimeTable(SphinxDirective):
    has_content = False

    def run(self):
        from myst_nb.sphinx_ import NbMetadataCollector

        app, env = self.env.app, self.env
        parts = []
        report = _build_root(app) / "runtime.json"
        if report.exists():
            data = json.loads(report.read_text(encoding="utf-8"))
            m = data.get("machine", {})
            parts.append(f"<p>Measured by <code>make test</code> on {html.escape(data.get('generated', '?'))}: "
                         f"{html.escape(str(m.get('cpu_count', '?')))} CPU cores ({html.escape(m.get('processor', '?'))}), "
                         f"{m.get('memory_gib', '?')} GiB of memory, Python {html.escape(m.get('python', '?'))}, "
                         f"{html.escape(m.get('platform', '?'))}. Two notebooks ran at a time; "
                         "<em>CPU s</em> is the kernel's own CPU time.</p>")
            rows = [[html.escape(ch), f"{r['seconds']:.1f}", f"{r.get('cpu_seconds', 0):.1f}", f"{r['peak_mib']:.0f}",
                     str(r["notebooks"]), "✅" if r["passed"] else "❌"] for ch, r in data.get("chapters", {}).items()]
            parts.append(_table(["Chapter", "Wall s", "CPU s", "Peak MiB", "Notebooks", "Passed"], rows, "runtime-chapters"))
            rows = [[html.escape(nb), f"{r['seconds']:.1f}", f"{r.get('cpu_seconds', 0):.1f}", f"{r['peak_mib']:.0f}"]
                    for nb, r in data.get("notebooks", {}).items()]
            parts.append("<p>Per notebook:</p>" + _table(["Notebook", "Wall s", "CPU s", "Peak MiB"], rows, "runtime-notebooks"))
        else:
            parts.append("<p><em>No run-time report in this build folder: run <code>make test</code>, which writes "
                         "<code>_build/runtime.json</code>, then build the book.</em></p>")
        rows = []
        for docname in sorted(d for d in env.found_docs if d.startswith("chapters/")):
            exec_data = NbMetadataCollector.get_exec_data(env, docname)
            if exec_data and exec_data.get("runtime") is not None:
                rows.append([html.escape(docname), f"{exec_data['runtime']:.1f}", html.escape(str(exec_data.get("method", "")))])
        if rows:
            parts.append("<p>Execution time of each notebook in the build of this website "
                         "(one notebook at a time; 'cache' means the result came from the execution cache):</p>"
                         + _table(["Notebook", "Seconds", "Executed by"], rows, "runtime-build"))
        return [nodes.raw("", "".join(parts), format="html")]


def _read_summaries_last(app, env, docnames):
    for name in SUMMARY_PAGES:
        if name in docnames:
            docnames.remove(name)
            docnames.append(name)


def _always_reread(app, env, added, changed, removed):
    return [name for name in SUMMARY_PAGES if name in env.found_docs]


def paper_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{paper}`0.81 (Table 2)```: a number quoted from the paper, shown as written.

    The role marks the number as the paper's (with its source) for the book's check that every other
    number in a reproduce page's prose is computed and glued.
    """
    node = nodes.inline(rawtext, text, classes=["paper-number"])
    return [node], []


def setup(app):
    app.add_role("paper", paper_role)
    app.add_directive("claims-scoreboard", ClaimsScoreboard)
    app.add_directive("runtime-table", RuntimeTable)
    app.connect("env-get-outdated", _always_reread)
    app.connect("env-before-read-docs", _read_summaries_last)
    return {"version": "0.1", "parallel_read_safe": False, "parallel_write_safe": True}
