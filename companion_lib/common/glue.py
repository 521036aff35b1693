"""Numbers in prose, computed: glue a formatted value from a notebook into its Markdown.

The book never types a result into prose. A notebook computes the value, glues it under a name, and
the Markdown shows it with myst-nb's role, e.g. ``the gain is {glue:text}`sd_gain` points``. A re-run
under other seeds or sizes changes the page with it. :func:`glue` glues the *formatted* text, so
the page shows exactly the digits the notebook chose (no quotes, no repr)::

    from companion_lib.common import glue
    glue("sd_gain", gain, "+.1f")        # prose: {glue:text}`sd_gain`
    glue("n_seeds", len(seeds))          # integers print as integers

Outside a running notebook (a plain script, a unit test) the glue is skipped.
"""

from __future__ import annotations

import numbers
import re

import numpy as np

__all__ = ["GluedText", "format_value", "glue", "glue_all"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


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


def glue(name: str, value: object, fmt: str | None = None) -> None:
    """Glue ``value`` (formatted with ``fmt``, a :func:`format` spec) as ``name``.

    In the Markdown: ``{glue:text}`name```. Numbers default to 3 significant digits, integers to
    themselves (thousands separated from 10,000 on). Returns None, so that a cell ending with a glue
    shows no output; :func:`format_value` gives the text.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"name must be an identifier-like string, got {name!r}")
    text = format_value(value, fmt)
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:  # pragma: no cover - IPython ships with the book's toolchain
        shell = None
    if shell is not None and getattr(shell, "kernel", None) is not None:
        from myst_nb import glue as myst_glue

        myst_glue(name, GluedText(text), display=False)


def glue_all(fmt: str | None = None, **values: object) -> None:
    """Glue several values with one format: ``glue_all(".2f", acc_sd=0.91, acc_pll=0.93)``."""
    for name, value in values.items():
        glue(name, value, fmt)
