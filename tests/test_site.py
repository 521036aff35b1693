"""The site check (bookkit.sitecheck): one synthetic page per defect class, so the checker
itself is tested, and the check of the real website when it has been built.

``make test`` builds the website from the outputs of its own notebook run and then runs this file
with ``BOOK_REQUIRE_SITE=1``: the real-site tests fail instead of skipping when ``_build/html`` is
missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from companion_lib.common import ClaimTable
from bookkit.sitecheck import (check_exercise_numbers, check_front_page, check_overview, check_page,
                                            check_scoreboard, check_site, check_stylesheets, parse_claims_html)

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("BOOK_SITE", ROOT / "_build" / "html"))
CLAIMS = os.environ.get("BOOK_SITE_CLAIMS")


def page(body: str, head: str = "") -> str:
    return (f"<html><head>{head}</head><body><nav>sidebar \\alpha $x$</nav>"
            f'<article class="bd-article">{body}</article></body></html>')


def cell(output: str, tags: tuple[str, ...] = ()) -> str:
    classes = " ".join(["cell"] + [f"tag_{t}" for t in tags] + ["docutils", "container"])
    return (f'<div class="{classes}"><div class="cell_input docutils container"><div class="highlight"><pre>'
            'x = 1  # \\alpha $ in code is fine</pre></div></div>'
            f'<div class="cell_output docutils container">{output}</div></div>')


def kinds(problems) -> set[str]:
    return {p.kind for p in problems}


# -- one page -----------------------------------------------------------------------------------------
def test_a_clean_page_passes():
    body = ('<p>The gain is <span class="math notranslate nohighlight">\\(\\alpha^2\\)</span> and costs $5.</p>'
            '<div class="math notranslate nohighlight">\\[\\sum_j \\mu_j\\]</div>'
            + cell('<div class="output text_plain"><pre>0.93</pre></div>'))
    assert check_page(page(body, '<script src="../_static/mathjax/tex-chtml.js"></script>')) == []


def test_raw_tex_and_stray_dollar_outside_math():
    broken = page('<div class="theorem"><p>where$G=\\sum_j\\mu_jv_jv_j^\\top$ is the Gram matrix</p></div>')
    assert kinds(check_page(broken)) == {"raw-tex", "stray-dollar"}
    assert kinds(check_page(page("<p>a lone $ sign before text</p>"))) == {"stray-dollar"}


@pytest.mark.parametrize("output", [
    '<div class="output text_plain"><pre>&lt;matplotlib.lines.Line2D at 0x7f3a2c1d9e50&gt;</pre></div>',
    '<div class="output text_plain"><pre>Generator(PCG64) at 0x7F00DEADBEEF</pre></div>',
    '<div class="output text_plain"><pre>&lt;Figure size 640x480 with 1 Axes&gt; &lt;object at 0x1f&gt;</pre></div>',
])
def test_object_reprs_in_outputs(output):
    assert "object-repr" in kinds(check_page(page(cell(output))))


def test_warnings_in_outputs():
    stderr = ('<div class="output stderr"><pre>/x/y.py:3: UserWarning: FigureCanvasAgg is non-interactive'
              "</pre></div>")
    assert kinds(check_page(page(cell(stderr)))) == {"warning"}
    progress = '<div class="output stderr"><pre>100%|##########| 40/40 [00:01&lt;00:00]</pre></div>'
    assert check_page(page(cell(progress))) == []


def test_tracebacks_only_in_cells_tagged_raises_exception():
    tb = ('<div class="output traceback highlight-ipythontb"><pre>Traceback (most recent call last):\n'
          "ValueError: bad</pre></div>")
    assert kinds(check_page(page(cell(tb)))) == {"traceback"}
    assert check_page(page(cell(tb, tags=("raises-exception",)))) == []


@pytest.mark.parametrize("head", [
    '<script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>',
    '<link rel="stylesheet" href="//fonts.googleapis.com/css?family=Lato">',
    '<link rel="preload" as="font" href="https://example.org/font.woff2">',
    "<style>@import url('https://fonts.googleapis.com/css2?family=Inter');</style>",
])
def test_remote_scripts_stylesheets_and_fonts(head):
    assert kinds(check_page(page("<p>text</p>", head))) == {"remote-asset"}


def test_links_to_other_hosts_are_fine():
    body = '<p><a href="https://openreview.net/forum?id=1">the paper</a></p>'
    assert check_page(page(body, '<link rel="canonical" href="https://example.org/">')) == []


def test_remote_fonts_in_stylesheets(tmp_path):
    static = tmp_path / "_static"
    static.mkdir()
    (static / "ok.css").write_text("body { font-family: serif; } @font-face { src: url(fonts/a.woff2); }")
    assert check_stylesheets(static) == []
    (static / "bad.css").write_text("@font-face { src: url('https://fonts.gstatic.com/a.woff2'); }")
    assert kinds(check_stylesheets(static)) == {"remote-asset"}


def test_nbgrader_markers():
    code = '<div class="highlight"><pre>x = 1\n### BEGIN HIDDEN TESTS\nassert x\n</pre></div>'
    assert kinds(check_page(page(code))) == {"nbgrader-marker"}


def test_exercise_numbers_per_chapter():
    good = page('<h2>Exercise 1: a</h2><div class="admonition"><p class="admonition-title">'
                '<span class="caption-number">Exercise 1 </span></p></div><h2>Exercise 2: b</h2>'
                "<p><strong>Exercise 3 (code).</strong> Write it.</p>")
    assert check_exercise_numbers(good) == []
    bookwide = page('<h2>Exercise 1: a</h2><div class="admonition"><p class="admonition-title">'
                    '<span class="caption-number">Exercise 11 </span></p></div><h2>Exercise 2: b</h2>')
    assert kinds(check_exercise_numbers(bookwide)) == {"exercise-numbers"}


def test_overview_pages_list_their_notebooks():
    listed = page('<div class="toctree-wrapper compound"><ul><li><a href="derive.html">D</a></li>'
                  '<li><a href="reproduce.html">R</a></li></ul></div>')
    assert check_overview(listed, ["derive.html", "reproduce.html"]) == []
    empty = page('<div class="toctree-wrapper compound"></div><p>no list</p>')
    assert kinds(check_overview(empty, ["derive.html", "reproduce.html"])) == {"overview"}
    front = page('<a href="../chapters/01-a/index.html">01</a>')
    assert kinds(check_front_page(front, ["../chapters/01-a/index.html", "../chapters/02-b/index.html"])) == {"overview"}


# -- the scoreboard -------------------------------------------------------------------------------
def _claims_page() -> tuple[str, dict]:
    import numpy as np

    table = ClaimTable("01-a")
    gain = np.array([4.0, 7.5, 6.0])
    common = dict(statistic="gain per seed", competitor="the teacher", replicates=3)
    table.declare("grows", "gain grows", paper="Fig. 2", margin=0.0, expect="reproduced", **common)
    table.declare("big", "big gain", paper="+24 (Fig. 2)", margin=20.0, expect="not reproduced", reason="small data",
                  **common)
    table.not_run("imagenet", "ImageNet", paper="Table 3", reason="no ImageNet")
    table.decide("grows", gain), table.decide("big", gain)
    return page(f'<div class="output text_html">{table._repr_html_()}</div>'), table.to_dict()


def _scoreboard(chapter: str, counts: dict | None) -> str:
    if counts is None:
        return page(f'<table class="claims-summary"><tbody><tr data-chapter="{chapter}" data-missing="1"></tr>'
                    "</tbody></table>")
    attrs = " ".join(f'data-{k.replace(" ", "-")}="{v}"' for k, v in counts.items())
    return page(f'<table class="claims-summary"><tbody><tr data-chapter="{chapter}" {attrs}></tr></tbody></table>')


def test_claims_are_read_back_from_the_rendered_table():
    html, data = _claims_page()
    rows = parse_claims_html(html)
    assert [(r["key"], r["outcome"]) for r in rows] == [("grows", "reproduced as expected"),
                                                      ("big", "not reproduced as expected"), ("imagenet", "not run")]
    assert rows[1]["reason"] == "small data" and rows[0]["criterion"] == "> 0" and rows == data["claims"]
    assert parse_claims_html(page("<p>no table</p>")) is None


def test_scoreboard_counts_must_match_the_pages_and_the_notebooks():
    html, data = _claims_page()
    counts = data["counts"]
    assert check_scoreboard(_scoreboard("01-a", counts), {"01-a": html}, {"01-a": data}) == []
    wrong = dict(counts, **{"undecided": counts["undecided"] + 1})
    assert kinds(check_scoreboard(_scoreboard("01-a", wrong), {"01-a": html})) == {"scoreboard"}
    # listed as missing although the page shows its claims (the cache-hit defect)
    assert kinds(check_scoreboard(_scoreboard("01-a", None), {"01-a": html})) == {"scoreboard"}
    # a chapter that is not on the scoreboard at all
    assert kinds(check_scoreboard(_scoreboard("01-a", counts), {"01-a": html, "02-b": html})) == {"scoreboard"}
    # the page and the scoreboard agree, but not with what the notebook exported
    exported = dict(data, counts=dict(counts, **{"not run": 2}))
    assert kinds(check_scoreboard(_scoreboard("01-a", counts), {"01-a": html}, {"01-a": exported})) == {"scoreboard"}


# -- the real website -----------------------------------------------------------------------------------
def _site() -> Path:
    if not (SITE / "index.html").is_file() or not os.environ.get("BOOK_REQUIRE_SITE"):
        if os.environ.get("BOOK_REQUIRE_SITE"):
            pytest.fail(f"{SITE} was not built")
        pytest.skip("the website is checked after `make test` builds it (BOOK_REQUIRE_SITE=1)")
    return SITE


def test_the_built_website_passes_every_check():
    site = _site()
    problems = check_site(site, Path(CLAIMS) if CLAIMS else None)
    assert not problems, "\n".join(map(str, problems[:60])) + (f"\n... {len(problems)} in all" if len(problems) > 60 else "")


def test_the_built_website_has_every_chapter_on_the_scoreboard():
    site = _site()
    text = (site / "book" / "scoreboard.html").read_text(encoding="utf-8")
    assert 'data-missing="0"' in text, "the scoreboard lists chapters whose claims are missing"
    chapters = {p.parent.name for p in (site / "chapters").glob("*/reproduce.html")}
    assert chapters and all(f'data-chapter="{c}"' in text for c in chapters)


def test_every_notebook_page_links_to_colab_and_a_notebook_download():
    import re

    import yaml

    from bookkit.colab import chapter_notebooks

    site = _site()
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    repo = config["repository"]["url"].rstrip("/").removeprefix("https://github.com/")
    prefix = f"https://colab.research.google.com/github/{repo}/blob/{config['repository']['branch']}/"
    for md in chapter_notebooks(ROOT):
        page = site / md.relative_to(ROOT).with_suffix(".html")
        html = page.read_text(encoding="utf-8")
        colab = re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', html)
        assert colab, f"{page}: no Colab link"
        for link in colab:
            assert link.startswith(prefix), link
            target = ROOT / link.removeprefix(prefix)
            assert target.suffix == ".ipynb" and target.exists(), f"{page}: Colab link to missing {target}"
        downloads = re.findall(r'href="([^"]*_sources/[^"]+\.ipynb)"', html)
        assert downloads, f"{page}: no notebook download"
        for link in downloads:
            assert (page.parent / link).resolve().exists(), f"{page}: download link to missing {link}"
