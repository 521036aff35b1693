"""The book's one plotting style."""

from __future__ import annotations

import matplotlib as mpl
import seaborn as sns

__all__ = ["use_book_style", "BOOK_COLORS"]

#: Named colours used consistently across chapters (colour-blind safe, from seaborn's palette).
BOOK_COLORS = {
    "teacher": "#7f7f7f",
    "method": "#de8f05",  # the paper's method
    "baseline": "#0173b2",
    "oracle": "#029e73",
    "reference": "#d55e00",
    "muted": "#cccccc",
}


def use_book_style(context: str = "notebook") -> None:
    """Apply the book's matplotlib/seaborn theme (white grid, colour-blind palette, compact figures).

    Parameters
    ----------
    context:
        A seaborn context: ``"paper"``, ``"notebook"``, ``"talk"`` or ``"poster"``.
    """
    allowed = ("paper", "notebook", "talk", "poster")
    if context not in allowed:
        raise ValueError(f"context must be one of {allowed}, got {context!r}")
    sns.set_theme(context=context, style="whitegrid", palette="colorblind")
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 3.8),
            "figure.dpi": 110,
            "savefig.dpi": 150,
            "savefig.bbox": "tight",
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.titlesize": "medium",
            "axes.titleweight": "bold",
            "legend.frameon": False,
            "figure.constrained_layout.use": True,
        }
    )
