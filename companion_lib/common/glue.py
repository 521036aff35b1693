r"""Numbers in prose, computed: glue a formatted value from a notebook into its Markdown.

The book never types a result into prose. A notebook computes the value, glues it under a name, and
the Markdown shows it with myst-nb's role, e.g. ``the gain is {glue:text}`sd_gain` points``. A re-run
under other seeds or sizes changes the page with it. :func:`glue` glues the *formatted* text, so
the page shows exactly the digits the notebook chose (no quotes, no repr)::

    from companion_lib.common import glue
    glue("sd_gain", gain, "+.1f")        # prose: {glue:text}`sd_gain`
    glue("n_seeds", len(seeds))          # integers print as integers

Where the text goes depends on where the notebook runs:

* in the book's build (a kernel with ``myst_nb``), the value is glued for myst-nb, which writes it into
  the page's prose;
* everywhere (Colab, plain Jupyter, a script, a unit test) the text is also recorded in this kernel
  (:func:`glued`); the Colab copies of the notebooks (written by the book's ``bookkit.colab``) show
  the Markdown with a marker ``⟨name⟩`` where a number goes, followed by a small cell that calls
  :func:`show_glued` to display those paragraphs again with this run's numbers.

``myst_nb`` is never required: without it ``glue`` records the value and displays nothing.
"""

from __future__ import annotations

import numbers
import re

import numpy as np

__all__ = ["GluedText", "format_value", "glue", "glue_all", "glued", "render_glued", "show_glued"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
#: the marker of a glued number in the Colab copies' Markdown (and in :func:`show_glued`'s template)
MARKER = re.compile(r"⟨([A-Za-z_][A-Za-z0-9_.-]*)⟩")

_GLUED: dict[str, str] = {}
#: paragraphs shown before all their numbers existed: (display handle, template, names still missing)
_PENDING: list[tuple[object, str, set[str]]] = []


class GluedText:
    """A piece of text whose plain-text representation is the text itself (no quotes)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def __str__(self) -> str:
        return self.text


def format_value(value: object, fmt: str | None = None) -> str:
    """The text :func:`glue` glues for ``value`` (see there for the defaults)."""
    if isinstance(value, str):
        if fmt:
            raise ValueError("fmt applies to numbers only; format the string yourself")
        return value
    if isinstance(value, (bool, np.bool_)):
        raise TypeError("glue a number or a string, not a bool: write the sentence that the check supports")
    if isinstance(value, (numbers.Integral, np.integer)) and not fmt:
        return f"{int(value):,}" if abs(int(value)) >= 10_000 else str(int(value))
    if isinstance(value, (numbers.Real, np.floating)):
        if not np.isfinite(float(value)):
            raise ValueError(f"cannot glue a non-finite number ({value})")
        return format(float(value), fmt or ".3g")
    raise TypeError(f"glue a number or a string, got {type(value).__name__}")


def _myst_glue():
    """myst-nb's ``glue`` when this is a kernel that has myst-nb (the book's build), else None."""
    try:
        from IPython import get_ipython
    except ImportError:  # a plain Python without IPython
        return None
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return None
    try:
        from myst_nb import glue as myst_glue
    except ImportError:  # Colab, plain Jupyter: the value is recorded only
        return None
    return myst_glue


def glue(name: str, value: object, fmt: str | None = None) -> None:
    """Glue ``value`` (formatted with ``fmt``, a :func:`format` spec) as ``name``.

    In the Markdown: ``{glue:text}`name```. Numbers default to 3 significant digits, integers to
    themselves (thousands separated from 10,000 on). Returns None, so that a cell ending with a glue
    shows no output; :func:`format_value` gives the text. The text is recorded in this kernel
    (:func:`glued`) and, in a kernel with myst-nb (the book's build), glued for the page.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name must be an identifier-like string, got {name!r}")
    text = format_value(value, fmt)
    _GLUED[name] = text
    myst_glue = _myst_glue()
    if myst_glue is not None:
        myst_glue(name, GluedText(text), display=False)
    _update_pending(name)


def glue_all(fmt: str | None = None, **values: object) -> None:
    """Glue several values with one format: ``glue_all(".2f", acc_sd=0.91, acc_pll=0.93)``."""
    for name, value in values.items():
        glue(name, value, fmt)


def glued() -> dict[str, str]:
    """The texts glued so far in this kernel, by name (a copy)."""
    return dict(_GLUED)


def render_glued(template: str) -> str:
    """``template`` with every marker ``⟨name⟩`` replaced by the text glued as ``name`` in this kernel.

    A name not glued yet (its value is computed further down the notebook) keeps its marker, in bold,
    and a note at the end says so.
    """
    if not isinstance(template, str):
        raise TypeError(f"template must be a str, got {type(template).__name__}")
    missing: list[str] = []

    def value(match: re.Match) -> str:
        name = match.group(1)
        if name in _GLUED:
            return _GLUED[name]
        missing.append(name)
        return f"**⟨{name}⟩**"

    text = MARKER.sub(value, template)
    if missing:
        text += ("\n\n*Computed further down the notebook: " + ", ".join(dict.fromkeys(missing))
                 + " (filled in here when the run gets there).*")
    return text


def _missing(template: str) -> set[str]:
    return {name for name in MARKER.findall(template) if name not in _GLUED}


def show_glued(template: str) -> None:
    """Display ``template`` as Markdown with this run's glued numbers (:func:`render_glued`).

    The Colab copies call it in a small cell after each paragraph that quotes computed numbers. A number
    that the notebook computes further down is filled into this display when :func:`glue` records it.
    """
    from IPython.display import Markdown, display

    missing = _missing(template)
    handle = display(Markdown(render_glued(template)), display_id=bool(missing) or None)
    if missing and handle is not None:
        _PENDING.append((handle, template, missing))


def _update_pending(name: str) -> None:
    for entry in list(_PENDING):
        handle, template, missing = entry
        if name not in missing:
            continue
        missing.discard(name)
        from IPython.display import Markdown

        try:
            handle.update(Markdown(render_glued(template)))
        except Exception:   # no frontend to update (a plain script): the values are recorded anyway
            pass
        if not missing:
            _PENDING.remove(entry)
