"""Claims tables: each reproduce notebook states the paper's claims and checks them.

Every row is one of three *kinds*, declared in the notebook before the data is seen:

``holds``
    A claim this book expects to reproduce. Its ``check`` is a boolean computed from the results;
    :meth:`ClaimTable.assert_all` fails the notebook when it is false (outcome ``failed``).
``does_not_reproduce``
    A claim the book expects *not* to reproduce at its scale, with the reason. Its ``check`` (the
    paper's statement, as a computed boolean) is still evaluated, and the notebook fails when it
    unexpectedly holds (outcome ``unexpectedly held``): the page would then say something false.
    This is pytest's ``xfail(strict=True)``.
``not_run``
    A claim the book does not test (no data, no scale), with the reason and no book value.

The outcome of a row follows from its kind and its check, never from a choice made after looking
at the data: ``held`` / ``failed`` for ``holds``, ``did not reproduce`` / ``unexpectedly held`` for
``does_not_reproduce``, ``not run`` for ``not_run``. What is true by construction belongs in a unit
test or a derive-page check, not in a claims table.

``check`` must be a ``bool`` (or ``numpy.bool_``) computed by the notebook; a literal ``True``,
``False`` or ``None`` written into the call is rejected when the call's source can be read (it can in
notebooks and scripts). :meth:`ClaimTable.export` writes the table's JSON to the claims folder, and the
table displays itself as HTML that carries the same JSON in a ``<script type="application/json"
class="claims-data">`` element: the one format in which the scoreboard, the site check and ``make
reseed`` read a claims table.
"""

from __future__ import annotations

import ast
import html
import inspect
import json
import linecache
import numbers
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .paths import claims_dir

__all__ = [
    "Claim", "ClaimTable", "ClaimsFailed", "CLAIMS_DATA_CLASS", "KINDS", "OUTCOMES",
    "HOLDS", "DOES_NOT_REPRODUCE", "NOT_RUN",
    "HELD", "FAILED", "DID_NOT_REPRODUCE", "UNEXPECTEDLY_HELD", "NOT_RUN_OUTCOME",
]

# kinds (declared before the data)
HOLDS = "holds"
DOES_NOT_REPRODUCE = "does_not_reproduce"
NOT_RUN = "not_run"
KINDS = (HOLDS, DOES_NOT_REPRODUCE, NOT_RUN)

# outcomes (computed from the kind and the check)
HELD = "held"
FAILED = "failed"
DID_NOT_REPRODUCE = "did not reproduce"
UNEXPECTEDLY_HELD = "unexpectedly held"
NOT_RUN_OUTCOME = "not run"
OUTCOMES = (HELD, FAILED, DID_NOT_REPRODUCE, UNEXPECTEDLY_HELD, NOT_RUN_OUTCOME)
#: Outcomes that fail the notebook.
BAD_OUTCOMES = (FAILED, UNEXPECTEDLY_HELD)

#: Class of the ``<script type="application/json">`` element in which a displayed table carries its JSON, so
#: the book's scoreboard, site check and reseed read exactly what the page shows.
CLAIMS_DATA_CLASS = "claims-data"
SCHEMA_VERSION = 2
_CHAPTER_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


class ClaimsFailed(AssertionError):
    """Raised by :meth:`ClaimTable.assert_all`; its message lists every failing row."""


@dataclass(frozen=True)
class Claim:
    """One row of a claims table.

    ``check`` is the computed boolean (``None`` for rows not run); ``outcome`` follows from ``kind``
    and ``check``.
    """

    claim: str
    paper: str
    book: str
    criterion: str
    kind: str
    check: bool | None
    outcome: str
    reason: str = ""

    @property
    def ok(self) -> bool:
        """False when this row fails the notebook (a claim that failed or unexpectedly held)."""
        return self.outcome not in BAD_OUTCOMES


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


def _call_source_node(frame) -> ast.Call | None:
    """The AST of the call being executed in ``frame`` (Python >= 3.11 positions), or None."""
    try:
        positions = list(frame.f_code.co_positions())[frame.f_lasti // 2]
    except (AttributeError, IndexError):
        return None
    lineno, end_lineno, col, end_col = positions
    if None in (lineno, end_lineno, col, end_col):
        return None
    lines = linecache.getlines(frame.f_code.co_filename, frame.f_globals)
    if not lines or end_lineno > len(lines):
        return None
    chunk = lines[lineno - 1:end_lineno]
    if len(chunk) == 1:
        segment = chunk[0][col:end_col]
    else:
        segment = chunk[0][col:] + "".join(chunk[1:-1]) + chunk[-1][:end_col]
    try:
        tree = ast.parse(segment, mode="eval")
    except SyntaxError:
        return None
    return tree.body if isinstance(tree.body, ast.Call) else None


def _reject_literal_check(method: str, position: int) -> None:
    """Raise TypeError when the caller wrote ``check=True``/``False``/``None`` literally."""
    frame = inspect.currentframe()
    try:
        caller = frame.f_back.f_back  # _reject_literal_check <- ClaimTable.method <- caller
        node = _call_source_node(caller) if caller is not None else None
    finally:
        del frame
    if node is None:
        return
    arg = next((k.value for k in node.keywords if k.arg == "check"), None)
    if arg is None and len(node.args) > position:
        arg = node.args[position]
    if isinstance(arg, ast.Constant) and (arg.value is None or isinstance(arg.value, bool)):
        raise TypeError(f"{method}: check must be computed from the results, not the literal {arg.value!r}; "
                        "a claim that cannot be checked is a not_run row")


def _check(value: object, method: str) -> bool:
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype == bool:
        value = value.item()
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{method}: check must be a bool computed from the results, got {type(value).__name__}"
                        " (use all(...)/any(...) or bool(np.all(...)) for arrays)")
    return bool(value)


class ClaimTable:
    """The claims of one chapter, each declared with its kind and checked by the code that computed it.

    Example
    -------
    >>> claims = ClaimTable("01-self-distillation")
    >>> gain = {0.5: 4.0, 0.7: 7.5}
    >>> _ = claims.holds("The gain grows with noise", paper="Fig. 2", book=f"{gain[0.7]:+.1f}",
    ...                  criterion="gain(0.7) > gain(0.5)", check=gain[0.7] > gain[0.5])
    >>> _ = claims.does_not_reproduce("Gain above 20 points", paper="Fig. 2: +24", book=f"{gain[0.7]:+.1f}",
    ...                               criterion="gain(0.7) >= 20", check=gain[0.7] >= 20,
    ...                               reason="1,797 digits instead of CIFAR-100")
    >>> _ = claims.not_run("The ImageNet result", paper="Table 3", reason="no ImageNet here")
    >>> claims.assert_all()
    """

    def __init__(self, chapter: str) -> None:
        if not isinstance(chapter, str) or not _CHAPTER_ID.match(chapter):
            raise ValueError(f"chapter must be a folder-like id such as '01-self-distillation', got {chapter!r}")
        self.chapter = chapter
        self._rows: list[Claim] = []

    # -- building ---------------------------------------------------------------------------------
    def _append(self, row: Claim) -> Claim:
        if any(r.claim == row.claim for r in self._rows):
            raise ValueError(f"claim {row.claim!r} is already in the table: give each row its own words")
        self._rows.append(row)
        return row

    def holds(self, claim: str, *, paper: object, book: object, criterion: str, check: bool) -> Claim:
        """A claim expected to hold: the notebook fails if ``check`` (computed) is false."""
        _reject_literal_check("holds", 4)
        ok = _check(check, "holds")
        return self._append(Claim(claim=_text(claim, "claim"), paper=_text(paper, "paper"),
                                  book=_text(book, "book"), criterion=_text(criterion, "criterion"),
                                  kind=HOLDS, check=ok, outcome=HELD if ok else FAILED))

    def does_not_reproduce(self, claim: str, *, paper: object, book: object, criterion: str,
                           check: bool, reason: str) -> Claim:
        """A claim expected not to reproduce at this scale (strict): the notebook fails if ``check`` holds.

        ``check`` is the paper's statement evaluated on the book's results, exactly as a ``holds`` row
        would evaluate it; ``reason`` says why the book expects it to fail here.
        """
        _reject_literal_check("does_not_reproduce", 4)
        ok = _check(check, "does_not_reproduce")
        return self._append(Claim(claim=_text(claim, "claim"), paper=_text(paper, "paper"),
                                  book=_text(book, "book"), criterion=_text(criterion, "criterion"),
                                  kind=DOES_NOT_REPRODUCE, check=ok,
                                  outcome=UNEXPECTEDLY_HELD if ok else DID_NOT_REPRODUCE,
                                  reason=_text(reason, "reason")))

    def not_run(self, claim: str, *, paper: object, reason: str) -> Claim:
        """A claim the book does not test (no data, no scale): shown with its reason, no book value."""
        return self._append(Claim(claim=_text(claim, "claim"), paper=_text(paper, "paper"), book="—",
                                  criterion="—", kind=NOT_RUN, check=None, outcome=NOT_RUN_OUTCOME,
                                  reason=_text(reason, "reason")))

    # -- reading ----------------------------------------------------------------------------------
    @property
    def rows(self) -> tuple[Claim, ...]:
        return tuple(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def failures(self) -> tuple[Claim, ...]:
        """Rows that fail the notebook: ``holds`` rows whose check is false and strict rows that held."""
        return tuple(r for r in self._rows if not r.ok)

    def counts(self) -> dict[str, int]:
        """Number of rows per outcome (every outcome present, zeros included)."""
        return {o: sum(r.outcome == o for r in self._rows) for o in OUTCOMES}

    def to_dict(self) -> dict:
        return {"chapter": self.chapter, "schema": SCHEMA_VERSION, "counts": self.counts(),
                "claims": [asdict(r) for r in self._rows]}

    def to_frame(self):
        """The table as a :class:`pandas.DataFrame` (one row per claim)."""
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self._rows],
                            columns=["claim", "paper", "book", "criterion", "kind", "check", "outcome", "reason"])

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
        """Raise :class:`ClaimsFailed` listing every row that failed or unexpectedly held."""
        if not self._rows:
            raise ClaimsFailed(f"{self.chapter}: the claims table is empty")
        bad = self.failures
        if bad:
            lines = [f"- [{r.outcome}] {r.claim}: book {r.book} vs criterion {r.criterion} (paper: {r.paper})"
                     for r in bad]
            raise ClaimsFailed(f"{self.chapter}: {len(bad)} of {len(self._rows)} claims went against their "
                               "declared kind:\n" + "\n".join(lines))

    MARK = {HELD: "✅ held", FAILED: "❌ failed", DID_NOT_REPRODUCE: "⚠️ did not reproduce",
            UNEXPECTEDLY_HELD: "❌ unexpectedly held", NOT_RUN_OUTCOME: "⏸️ not run"}

    def _repr_html_(self) -> str:
        esc = html.escape
        head = "".join(f"<th>{h}</th>" for h in ("Claim", "Paper", "This book", "Criterion", "Outcome"))
        body = []
        for r in self._rows:
            result = self.MARK[r.outcome] + (f"<br><small>{esc(r.reason)}</small>" if r.reason else "")
            cells = (esc(r.claim), esc(r.paper), esc(r.book), esc(r.criterion), result)
            body.append(f'<tr class="claim-{r.kind}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        data = json.dumps(self.to_dict(), ensure_ascii=False).replace("</", "<\\/")  # safe inside <script>
        return (f'<table class="claims-table"><thead><tr>{head}</tr></thead>'
                f"<tbody>{''.join(body)}</tbody></table>"
                f'<script type="application/json" class="{CLAIMS_DATA_CLASS}">{data}</script>')

    def __repr__(self) -> str:
        lines = [f"ClaimTable({self.chapter!r}, {len(self._rows)} claims)"]
        lines += [f"  [{r.outcome}] {r.claim}: paper {r.paper} | book {r.book} | {r.criterion}" for r in self._rows]
        return "\n".join(lines)
