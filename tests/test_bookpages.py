"""The book's Sphinx extension (bookkit/bookpages.py) on a tiny synthetic book built with Jupyter Book:
the scoreboard counts what the reproduce page renders, after an execution and after a cache hit alike;
a failing notebook stops the build naming the page and the cell; a build without the offline MathJax
stops with a message that says so."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from bookkit.sitecheck import check_page, scoreboard_counts

ROOT = Path(__file__).resolve().parents[1]
JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"
from bookkit import bookpages  # noqa: E402

HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""

REPRODUCE = HEADER + """
# Reproduce

```{code-cell} ipython3
import numpy as np
from companion_lib.common import ClaimTable

gain = np.array([4.0, 7.5, 5.5, 6.0])
noisy = np.array([-2.0, 3.0, -1.0, 2.5])
claims = ClaimTable("01-tiny")
common = dict(statistic="gain per seed", competitor="the teacher", replicates=4)
_ = claims.declare("grows", "gain grows", paper="Fig. 2", margin=0.0, expect="reproduced", **common)
_ = claims.declare("above", "gain above 20", paper="Fig. 2: +24", margin=20.0, expect="not reproduced",
                   reason="tiny data", **common)
_ = claims.declare("noisy", "a noisy effect", paper="Fig. 3", margin=0.0, expect="reproduced", **common)
_ = claims.not_run("imagenet", "the ImageNet result", paper="Table 3", reason="no ImageNet here")
_ = claims.decide("grows", gain), claims.decide("above", gain), claims.decide("noisy", noisy)
claims
```
"""

FAILING = HEADER + """
# Reproduce

```{code-cell} ipython3
x = 1
```

```{code-cell} ipython3
raise ValueError("the tiny notebook fails here")
```
"""


def _book(folder: Path, reproduce: str) -> Path:
    (folder / "book").mkdir(parents=True)
    (folder / "chapters" / "01-tiny").mkdir(parents=True)
    (folder / "_config.yml").write_text(textwrap.dedent(f"""\
        title: Tiny
        only_build_toc_files: true
        exclude_patterns: [".*", "**/.*", "_build"]
        execute:
          execute_notebooks: cache
          timeout: 300
        sphinx:
          local_extensions:
            bookkit.bookpages: {ROOT}
          config:
            nb_execution_raise_on_error: true
            nb_execution_show_tb: true
        """))
    (folder / "_toc.yml").write_text(textwrap.dedent("""\
        format: jb-book
        root: book/intro
        chapters:
          - file: chapters/01-tiny/reproduce
          - file: book/scoreboard
        """))
    (folder / "book" / "intro.md").write_text("# Tiny\n\nA tiny book with math $a^2$.\n")
    (folder / "book" / "scoreboard.md").write_text("# Scoreboard\n\n```{claims-scoreboard}\n```\n")
    (folder / "chapters" / "01-tiny" / "reproduce.md").write_text(reproduce)
    return folder


def _build(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(JUPYTER_BOOK), "build", str(folder), "--warningiserror", "--keep-going"],
                          capture_output=True, text=True, timeout=600, cwd=folder)


@pytest.mark.slow
def test_scoreboard_counts_what_the_page_renders_after_execution_and_after_a_cache_hit(tmp_path):
    book = _book(tmp_path / "tiny", REPRODUCE)
    expected = {"reproduced as expected": 1, "not reproduced as expected": 1, "undecided": 1, "contradicted": 0,
                "not run": 1}
    first = _build(book)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    html = book / "_build" / "html"
    assert scoreboard_counts((html / "book" / "scoreboard.html").read_text()) == {"01-tiny": expected}
    # the defect: after a cache hit the scoreboard read an output-less copy ("1 chapter missing")
    (book / "chapters" / "01-tiny" / "reproduce.md").touch()
    second = _build(book)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "Using cached notebook" in second.stdout + second.stderr or "cache" in second.stdout
    assert scoreboard_counts((html / "book" / "scoreboard.html").read_text()) == {"01-tiny": expected}
    # the site is offline: MathJax comes with the build
    intro = (html / "book" / "intro.html").read_text()
    assert check_page(intro, "intro") == [] and "_static/mathjax/tex-chtml.js" in intro
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file()


@pytest.mark.slow
def test_a_failing_notebook_fails_the_build_naming_the_page_and_the_cell(tmp_path):
    book = _book(tmp_path / "failing", FAILING)
    result = _build(book)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "chapters/01-tiny/reproduce" in output
    assert 'raise ValueError("the tiny notebook fails here")' in output


def test_a_build_without_the_offline_mathjax_stops_with_a_clear_message(monkeypatch):
    monkeypatch.setattr(bookpages, "_mathjax_dir", lambda: None)
    config = SimpleNamespace(html_static_path=[], mathjax_path="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js")
    with pytest.raises(Exception, match="offline copy of MathJax is missing"):
        bookpages._config_inited(None, config)


def test_the_offline_mathjax_replaces_the_cdn():
    config = SimpleNamespace(html_static_path=[], mathjax_path="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js")
    bookpages._config_inited(None, config)
    assert config.mathjax_path == bookpages.MATHJAX_FILE and config.html_static_path
    assert bookpages._mathjax_dir() is not None

