"""Claims tables: each reproduce notebook states the paper's claims and checks them.

A row holds the claim in words, the paper's value, the book's value, the criterion that decides it
and whether it passed. A row the book cannot reproduce at its scale is marked so, with the reason; it
is shown (never hidden) but not asserted. :meth:`ClaimTable.export` writes JSON that the book's
scoreboard collects; :meth:`ClaimTable.assert_all` fails the notebook if any checked claim fails.
"""

from __future__ import annotations

import html
import json
import numbers
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .paths import claims_dir

__all__ = ["Claim", "ClaimTable", "ClaimsFailed", "PASSED", "FAILED", "NOT_REPRODUCED", "CLAIMS_MIME"]

PASSED = "passed"
FAILED = "failed"
NOT_REPRODUCED = "not reproduced at this scale"
#: Mime type under which a displayed table carries its rows, so the book's scoreboard can collect them
#: from the executed notebooks of the same build.
CLAIMS_MIME = "application/vnd.iclr2025-reproduced.claims+json"
_CHAPTER_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


class ClaimsFailed(AssertionError):
    """Raised by :meth:`ClaimTable.assert_all`; its message lists every failing claim."""


@dataclass(frozen=True)
class Claim:
    """One row of a claims table."""

    claim: str
    paper: str
    book: str
    criterion: str
    status: str
    reason: str = ""

    @property
    def passed(self) -> bool | None:
        """True/False for checked claims, None for claims not reproduced at this scale."""
        return None if self.status == NOT_REPRODUCED else self.status == PASSED


def _text(value: object, name: str) -> str:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"{name} must be a non-empty string")
        return value
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a string or a number, got a bool")
    if isinstance(value, numbers.Real):
        if not np.isfinite(float(value)):
            raise ValueError(f"{name} must be finite, got {value}")
        return f"{float(value):.4g}"
    raise TypeError(f"{name} must be a string or a number, got {type(value).__name__}")


class ClaimTable:
    """The claims of one chapter, checked by the code that computed the book's values.

    Example
    -------
    >>> claims = ClaimTable("01-self-distillation")
    >>> _ = claims.add("gain grows with noise", paper="Fig. 2", book=f"{7.5:+.1f}",
    ...                criterion="gain(0.7) > gain(0.5)", passed=7.5 > 4.0)
    >>> claims.assert_all()
    """

    def __init__(self, chapter: str) -> None:
        if not isinstance(chapter, str) or not _CHAPTER_ID.match(chapter):
            raise ValueError(f"chapter must be a folder-like id such as '01-self-distillation', got {chapter!r}")
        self.chapter = chapter
        self._rows: list[Claim] = []

    # -- building ---------------------------------------------------------------------------------
    def add(self, claim: str, paper: object, book: object, criterion: str, passed: bool) -> Claim:
        """Add a checked claim. ``passed`` must be the outcome of a comparison computed in the notebook."""
        if not isinstance(passed, (bool, np.bool_)):
            raise TypeError(f"passed must be a bool (the result of the check), got {type(passed).__name__}")
        row = Claim(
            claim=_text(claim, "claim"),
            paper=_text(paper, "paper"),
            book=_text(book, "book"),
            criterion=_text(criterion, "criterion"),
            status=PASSED if bool(passed) else FAILED,
        )
        self._rows.append(row)
        return row

    def add_not_reproduced(self, claim: str, paper: object, book: object, reason: str,
                           criterion: str = "not asserted") -> Claim:
        """Add a claim that does not reproduce at the book's scale; ``reason`` says why. Not asserted."""
        row = Claim(
            claim=_text(claim, "claim"),
            paper=_text(paper, "paper"),
            book=_text(book, "book"),
            criterion=_text(criterion, "criterion"),
            status=NOT_REPRODUCED,
            reason=_text(reason, "reason"),
        )
        self._rows.append(row)
        return row

    # -- reading ----------------------------------------------------------------------------------
    @property
    def rows(self) -> tuple[Claim, ...]:
        return tuple(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def failures(self) -> tuple[Claim, ...]:
        return tuple(r for r in self._rows if r.status == FAILED)

    def to_dict(self) -> dict:
        counts = {s: sum(r.status == s for r in self._rows) for s in (PASSED, FAILED, NOT_REPRODUCED)}
        return {"chapter": self.chapter, "counts": counts, "claims": [asdict(r) for r in self._rows]}

    def to_frame(self):
        """The table as a :class:`pandas.DataFrame` (one row per claim)."""
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self._rows],
                            columns=["claim", "paper", "book", "criterion", "status", "reason"])

    # -- output -----------------------------------------------------------------------------------
    def export(self, directory: str | Path | None = None) -> Path:
        """Write ``<directory>/<chapter>.json`` (default :func:`~companion_lib.common.paths.claims_dir`)."""
        folder = Path(directory) if directory is not None else claims_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.chapter}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)
        return path

    def assert_all(self) -> None:
        """Raise :class:`ClaimsFailed` listing every failing claim; rows not reproduced are skipped."""
        if not self._rows:
            raise ClaimsFailed(f"{self.chapter}: the claims table is empty")
        bad = self.failures
        if bad:
            lines = [f"- {r.claim}: book {r.book} vs criterion {r.criterion} (paper: {r.paper})" for r in bad]
            raise ClaimsFailed(f"{self.chapter}: {len(bad)} of {len(self._rows)} claims failed:\n" + "\n".join(lines))

    _MARK = {PASSED: "✅ passed", FAILED: "❌ failed", NOT_REPRODUCED: "⚠️ not reproduced at this scale"}

    def _repr_html_(self) -> str:
        esc = html.escape
        head = "".join(f"<th>{h}</th>" for h in ("Claim", "Paper", "This book", "Criterion", "Result"))
        body = []
        for r in self._rows:
            result = self._MARK[r.status] + (f"<br><small>{esc(r.reason)}</small>" if r.reason else "")
            cells = (esc(r.claim), esc(r.paper), esc(r.book), esc(r.criterion), result)
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        return (f'<table class="claims-table"><thead><tr>{head}</tr></thead>'
                f"<tbody>{''.join(body)}</tbody></table>")

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/html": self._repr_html_(), "text/plain": repr(self), CLAIMS_MIME: self.to_dict()}

    def __repr__(self) -> str:
        lines = [f"ClaimTable({self.chapter!r}, {len(self._rows)} claims)"]
        lines += [f"  [{r.status}] {r.claim}: paper {r.paper} | book {r.book} | {r.criterion}" for r in self._rows]
        return "\n".join(lines)
