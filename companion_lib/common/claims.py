r"""Claims tables: each reproduce notebook declares the paper's claims, then decides them by one rule.

A row is **declared before its data** (:meth:`ClaimTable.declare`): the paper's statement, the statistic
measured on each replicate (a seed, a world, a prompt, a model), the competitor that could win, the
statement as an inequality against a margin (``direction`` ``">"`` or ``"<"``), the number of replicates,
and the expected verdict (``"reproduced"`` or ``"not reproduced"`` at this scale, with the reason), or it is
declared :meth:`~ClaimTable.not_run` with its reason.

A row is **decided by one rule** (:meth:`ClaimTable.decide`): the estimate and its two-sided 95% confidence
interval over the replicates (Student's :math:`t` on the per-replicate statistics, or on paired
differences against the competitor's values; :func:`companion_lib.common.replicates.mean_interval`), or
the exact value of a deterministic quantity (:meth:`ClaimTable.decide_exact`, with the reason it is
exact). For a statement :math:`\theta > m`:

* **reproduced** when the whole interval clears the margin (:math:`\ell > m`);
* **not reproduced** when the whole interval lies on the other side (:math:`u \le m`);
* **undecided** when it straddles the margin.

(mirrored for :math:`\theta < m`). The notebook fails (:meth:`ClaimTable.assert_all`) only when the verdict is
the *opposite decided verdict* of the declaration: the row is **contradicted**. An undecided row never
fails; it is shown as undecided with its interval, and more replicates (bought by faster code) are the way
to decide it, never a new rule or a new margin. Each row's outcome is one of five: ``reproduced as
expected``, ``not reproduced as expected``, ``undecided``, ``contradicted``, ``not run``.

**Power is designed**: :meth:`ClaimTable.design` applies
:func:`~companion_lib.common.replicates.replicates_needed` to a pilot's spread and effect and records how many
replicates the row needs, which the table shows beside the number the run has.

Values passed to :meth:`~ClaimTable.decide` must be computed by the notebook: a literal number or list
written into the call is rejected when the call's source can be read (it can in notebooks and scripts).
:meth:`ClaimTable.export` writes the table's JSON to the claims folder; the table displays itself as HTML
(the table and a forest plot of every row's interval against its margin) that carries the same JSON in a
``<script type="application/json" class="claims-data">`` element: the one format in which the scoreboard,
the site check and ``make reseed`` read a claims table.
"""

from __future__ import annotations

import ast
import html
import inspect
import io
import json
import linecache
import math
import numbers
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from .paths import claims_dir

__all__ = [
    "Claim", "ClaimTable", "ClaimsFailed", "CLAIMS_DATA_CLASS", "OUTCOMES", "VERDICTS", "OUTCOME_COLORS",
    "REPRODUCED", "NOT_REPRODUCED", "UNDECIDED", "verdict_of", "forest_plot",
]

# verdicts (computed from the interval and the margin)
REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
UNDECIDED = "undecided"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, UNDECIDED)

# outcomes (the verdict held against the declaration)
AS_EXPECTED = {REPRODUCED: "reproduced as expected", NOT_REPRODUCED: "not reproduced as expected"}
CONTRADICTED = "contradicted"
NOT_RUN = "not run"
DECLARED = "declared"   # a row not decided yet (assert_all refuses it)
OUTCOMES = ("reproduced as expected", "not reproduced as expected", UNDECIDED, CONTRADICTED, NOT_RUN)
#: Colours of the five outcomes (and of the three verdicts) on pages, forest plots and the scoreboard.
OUTCOME_COLORS = {"reproduced as expected": "#2e7d32", "not reproduced as expected": "#ef6c00",
                  UNDECIDED: "#1565c0", CONTRADICTED: "#c62828", NOT_RUN: "#9e9e9e"}
VERDICT_COLORS = {REPRODUCED: "#2e7d32", NOT_REPRODUCED: "#ef6c00", UNDECIDED: "#1565c0"}
DIRECTIONS = (">", "<")
LEVEL = 0.95

#: Class of the ``<script type="application/json">`` element in which a displayed table carries its JSON, so
#: the book's scoreboard, site check and reseed read exactly what the page shows.
CLAIMS_DATA_CLASS = "claims-data"
SCHEMA_VERSION = 3
_CHAPTER_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
_KEY = re.compile(r"^[a-z][a-z0-9_]*$")


class ClaimsFailed(AssertionError):
    """Raised by :meth:`ClaimTable.assert_all`; its message lists every contradicted or undecided-yet row."""


@dataclass(frozen=True)
class Claim:
    """One row of a claims table: its declaration, and (once decided) its evidence, verdict and outcome."""

    key: str
    claim: str
    paper: str
    statistic: str = ""
    competitor: str = ""
    direction: str = ">"
    margin: float | None = None
    replicates: int | None = None
    expect: str = ""
    reason: str = ""
    fmt: str = ".3g"
    bounds: tuple | None = None
    # design (a pilot's spread and the replicates it needs)
    pilot_n: int | None = None
    pilot_estimate: float | None = None
    pilot_spread: float | None = None
    needed: int | None = None
    # evidence
    method: str = ""
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    n: int | None = None
    values: tuple = ()
    verdict: str | None = None
    outcome: str = DECLARED

    @property
    def ok(self) -> bool:
        """False when this row fails the notebook (contradicted, or declared and never decided)."""
        return self.outcome not in (CONTRADICTED, DECLARED)

    @property
    def criterion(self) -> str:
        """The statement as an inequality, e.g. ``"> 0.05"``."""
        return "" if self.margin is None else f"{self.direction} {format(self.margin, self.fmt)}"

    def interval_text(self) -> str:
        """``"0.12 [0.05, 0.19], n = 8"``; for an exact value, ``"0.12 (exact)"``."""
        if self.estimate is None:
            return "—"
        f = self.fmt
        if self.method == "exact":
            return f"{format(self.estimate, f)} (exact)"
        return f"{format(self.estimate, f)} [{format(self.low, f)}, {format(self.high, f)}], n = {self.n}"


# -- the rule -----------------------------------------------------------------------------------------
def verdict_of(low: float, high: float, margin: float, direction: str = ">") -> str:
    r"""The verdict of an interval :math:`[\ell, u]` for the statement :math:`\theta > m` (``direction=">"``):
    reproduced when :math:`\ell > m`, not reproduced when :math:`u \le m`, undecided otherwise; mirrored for
    ``"<"``. An exact value is the interval :math:`[v, v]`."""
    for name, v in (("low", low), ("high", high), ("margin", margin)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
    if low > high:
        raise ValueError(f"low must not exceed high, got [{low}, {high}]")
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if direction == ">":
        return REPRODUCED if low > margin else NOT_REPRODUCED if high <= margin else UNDECIDED
    return REPRODUCED if high < margin else NOT_REPRODUCED if low >= margin else UNDECIDED


def _outcome(verdict: str, expect: str) -> str:
    if verdict == UNDECIDED:
        return UNDECIDED
    return AS_EXPECTED[verdict] if verdict == expect else CONTRADICTED


# -- input checks ---------------------------------------------------------------------------------------
def _text(value: object, name: str, allow_empty: bool = False) -> str:
    if isinstance(value, str):
        if not value.strip() and not allow_empty:
            raise ValueError(f"{name} must be a non-empty string")
        return value
    raise TypeError(f"{name} must be a string, got {type(value).__name__}")


def _number(value: object, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


def _values(values: object, name: str) -> np.ndarray:
    if isinstance(values, (str, bytes)) or isinstance(values, (bool, np.bool_)):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
    try:
        v = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a sequence of numbers ({exc})") from None
    if v.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one value per replicate), got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite (no NaN or infinity), got {v.tolist()}")
    return v


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


def _is_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant):
        return True
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_is_literal(e) for e in node.elts)
    return False


def _reject_literal(method: str, names: dict) -> None:
    """Raise TypeError when the caller wrote one of the arguments ``names`` ({keyword: position}) as a literal."""
    frame = inspect.currentframe()
    try:
        caller = frame.f_back.f_back  # _reject_literal <- ClaimTable.method <- caller
        node = _call_source_node(caller) if caller is not None else None
    finally:
        del frame
    if node is None:
        return
    for name, position in names.items():
        arg = next((k.value for k in node.keywords if k.arg == name), None)
        if arg is None and len(node.args) > position:
            arg = node.args[position]
        if arg is not None and _is_literal(arg):
            raise TypeError(f"{method}: {name} must be computed from the results, not written as a literal; "
                            "a claim that cannot be measured is a not_run row")


# -- the table ------------------------------------------------------------------------------------------
class ClaimTable:
    """The claims of one chapter: declared before the data, decided by one rule, shown with a forest plot.

    Example
    -------
    >>> claims = ClaimTable("01-self-distillation")
    >>> _ = claims.declare("gain", "Self-distillation beats the teacher under label noise",
    ...                    paper="Fig. 2: +12.6 points", statistic="accuracy gain over the teacher, per seed",
    ...                    competitor="the teacher", margin=0.0, replicates=4, expect="reproduced")
    >>> gains = np.array([3.1, 2.4, 4.0, 3.3])
    >>> claims.decide("gain", gains).verdict
    'reproduced'
    >>> _ = claims.not_run("imagenet", "The ImageNet result", paper="Table 3", reason="no ImageNet here")
    >>> claims.assert_all()
    """

    def __init__(self, chapter: str) -> None:
        if not isinstance(chapter, str) or not _CHAPTER_ID.match(chapter):
            raise ValueError(f"chapter must be a folder-like id such as '01-self-distillation', got {chapter!r}")
        self.chapter = chapter
        self._rows: dict[str, Claim] = {}

    # -- declaring (before the data) ---------------------------------------------------------------------
    def _new(self, row: Claim) -> Claim:
        if row.key in self._rows:
            raise ValueError(f"a row with key {row.key!r} is already declared: give each row its own key")
        if any(r.claim == row.claim for r in self._rows.values()):
            raise ValueError(f"claim {row.claim!r} is already in the table: give each row its own words")
        self._rows[row.key] = row
        return row

    def declare(self, key: str, claim: str, *, paper: str, statistic: str, competitor: str, margin: float,
                replicates: int, expect: str, direction: str = ">", reason: str = "", fmt: str = ".3g",
                bounds: tuple | None = None) -> Claim:
        """Declare a row before its data.

        ``statistic`` is what is measured on each replicate; the statement is ``mean(statistic) <direction>
        margin`` (for a paired comparison, the statistic is the difference to ``competitor``). ``replicates``
        is the number of values :meth:`decide` will receive (or 1 for an exact quantity). ``expect`` is
        ``"reproduced"`` or ``"not reproduced"``; the latter needs a ``reason``. ``bounds`` (optional) is the
        statistic's range, e.g. ``(0, 1)`` for an accuracy: a margin or a value outside it is an error (a
        margin on the wrong scale). ``fmt`` formats the numbers in the table and in glued text.
        """
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValueError(f"key must be a short identifier of [a-z0-9_], got {key!r}")
        if expect not in (REPRODUCED, NOT_REPRODUCED):
            raise ValueError(f"expect must be {REPRODUCED!r} or {NOT_REPRODUCED!r}, got {expect!r}")
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        if isinstance(replicates, (bool, np.bool_)) or not isinstance(replicates, (int, np.integer)) or replicates < 1:
            raise ValueError(f"replicates must be a positive int, got {replicates!r}")
        margin = _number(margin, "margin")
        if bounds is not None:
            if len(bounds) != 2 or not bounds[0] < bounds[1]:
                raise ValueError(f"bounds must be (low, high) with low < high, got {bounds!r}")
            bounds = (_number(bounds[0], "bounds[0]"), _number(bounds[1], "bounds[1]"))
            if not bounds[0] <= margin <= bounds[1]:
                raise ValueError(f"margin {margin} lies outside the statistic's range {list(bounds)}: a margin on "
                                 "the wrong scale (percent against a fraction?)")
        if expect == NOT_REPRODUCED and not reason.strip():
            raise ValueError("a row expected not to reproduce needs a reason")
        format(1.0, fmt)
        return self._new(Claim(key=key, claim=_text(claim, "claim"), paper=_text(paper, "paper"),
                               statistic=_text(statistic, "statistic"), competitor=_text(competitor, "competitor"),
                               direction=direction, margin=margin, replicates=int(replicates), expect=expect,
                               reason=_text(reason, "reason", allow_empty=True), fmt=fmt, bounds=bounds))

    def not_run(self, key: str, claim: str, *, paper: str, reason: str) -> Claim:
        """A claim the book does not test (no data, no scale): shown with its reason, no evidence."""
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValueError(f"key must be a short identifier of [a-z0-9_], got {key!r}")
        return self._new(Claim(key=key, claim=_text(claim, "claim"), paper=_text(paper, "paper"),
                               reason=_text(reason, "reason"), outcome=NOT_RUN, margin=None))

    def _row(self, key: str) -> Claim:
        if key not in self._rows:
            raise KeyError(f"no row {key!r} is declared (declare every row before its data)")
        return self._rows[key]

    # -- power design (a pilot) ----------------------------------------------------------------------------
    def design(self, key: str, pilot: object, baseline: object = None, power: float = 0.8) -> Claim:
        """Record how many replicates ``key`` needs: :func:`~companion_lib.common.replicates.replicates_needed`
        applied to the pilot's spread and estimate (paired differences when ``baseline`` is given)."""
        from .replicates import replicates_needed

        row = self._row(key)
        if row.outcome != DECLARED:
            raise ValueError(f"row {key!r} is already decided: design it before its main run")
        v = _values(pilot, "pilot")
        if baseline is not None:
            b = _values(baseline, "baseline")
            if b.shape != v.shape:
                raise ValueError(f"pilot and baseline must be paired (same length), got {v.size} and {b.size}")
            v = v - b
        if v.size < 2:
            raise ValueError(f"a pilot needs at least 2 replicates to estimate a spread, got {v.size}")
        spread, estimate = float(v.std(ddof=1)), float(v.mean())
        needed = replicates_needed(spread, estimate, row.margin, power=power)
        self._rows[key] = row = replace(row, pilot_n=int(v.size), pilot_estimate=estimate, pilot_spread=spread,
                                        needed=needed)
        return row

    # -- deciding (after the data) ------------------------------------------------------------------------
    def decide(self, key: str, values: object, baseline: object = None) -> Claim:
        """Decide ``key`` from its per-replicate ``values`` (and the competitor's paired ``baseline``): the
        estimate and its two-sided 95% Student-t interval, and the verdict against the declared margin."""
        _reject_literal("decide", {"values": 1, "baseline": 2})
        from .replicates import mean_interval

        row = self._row(key)
        if row.outcome == NOT_RUN:
            raise ValueError(f"row {key!r} is declared not run")
        if row.outcome != DECLARED:
            raise ValueError(f"row {key!r} is already decided")
        v = _values(values, "values")
        method = "t"
        if baseline is not None:
            b = _values(baseline, "baseline")
            if b.shape != v.shape:
                raise ValueError(f"values and baseline must be paired (same length), got {v.size} and {b.size}")
            v, method = v - b, "paired t"
        elif row.bounds is not None and (v.min() < row.bounds[0] or v.max() > row.bounds[1]):
            raise ValueError(f"values of {key!r} lie outside the statistic's declared range {list(row.bounds)}")
        if v.size != row.replicates:
            raise ValueError(f"row {key!r} was declared with {row.replicates} replicates, got {v.size} values")
        if v.size < 2:
            raise ValueError(f"an interval needs at least 2 replicates, got {v.size} (use decide_exact for a "
                             "deterministic quantity)")
        low, high = mean_interval(v, LEVEL)
        verdict = verdict_of(low, high, row.margin, row.direction)
        self._rows[key] = row = replace(row, method=method, estimate=float(v.mean()), low=float(low),
                                        high=float(high), n=int(v.size), values=tuple(float(x) for x in v),
                                        verdict=verdict, outcome=_outcome(verdict, row.expect))
        return row

    def decide_exact(self, key: str, value: object, why: str) -> Claim:
        """Decide ``key`` from a deterministic ``value`` (no sampling: its interval is the value itself);
        ``why`` says why it is exact (e.g. "exact quadrature: no randomness")."""
        _reject_literal("decide_exact", {"value": 1})
        row = self._row(key)
        if row.outcome == NOT_RUN:
            raise ValueError(f"row {key!r} is declared not run")
        if row.outcome != DECLARED:
            raise ValueError(f"row {key!r} is already decided")
        if row.replicates != 1:
            raise ValueError(f"row {key!r} was declared with {row.replicates} replicates; an exact row declares 1")
        v = _number(value, "value")
        if row.bounds is not None and not row.bounds[0] <= v <= row.bounds[1]:
            raise ValueError(f"value of {key!r} lies outside the statistic's declared range {list(row.bounds)}")
        verdict = verdict_of(v, v, row.margin, row.direction)
        reason = row.reason + ("; " if row.reason else "") + "exact: " + _text(why, "why")
        self._rows[key] = row = replace(row, method="exact", estimate=v, low=v, high=v, n=1, values=(v,),
                                        verdict=verdict, outcome=_outcome(verdict, row.expect), reason=reason)
        return row

    # -- reading ---------------------------------------------------------------------------------------
    @property
    def rows(self) -> tuple[Claim, ...]:
        return tuple(self._rows.values())

    def __getitem__(self, key: str) -> Claim:
        return self._row(key)

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def failures(self) -> tuple[Claim, ...]:
        """Rows that fail the notebook: contradicted ones, and rows declared but never decided."""
        return tuple(r for r in self._rows.values() if not r.ok)

    def counts(self) -> dict[str, int]:
        """Number of rows per outcome (every outcome present, zeros included)."""
        return {o: sum(r.outcome == o for r in self._rows.values()) for o in OUTCOMES}

    def to_dict(self) -> dict:
        rows = []
        for r in self._rows.values():
            d = asdict(r)
            d["values"] = list(r.values)
            d["bounds"] = list(r.bounds) if r.bounds is not None else None
            d["criterion"] = r.criterion
            d["book"] = r.interval_text()
            rows.append(d)
        return {"chapter": self.chapter, "schema": SCHEMA_VERSION, "level": LEVEL, "counts": self.counts(),
                "claims": rows}

    def to_frame(self):
        """The table as a :class:`pandas.DataFrame` (one row per claim)."""
        import pandas as pd

        cols = ["key", "claim", "paper", "statistic", "competitor", "criterion", "replicates", "needed",
                "estimate", "low", "high", "n", "expect", "verdict", "outcome", "reason"]
        return pd.DataFrame([{c: getattr(r, c) for c in cols} for r in self._rows.values()], columns=cols)

    # -- glue ------------------------------------------------------------------------------------------
    def glue(self, prefix: str = "") -> None:
        """Glue every decided row's words and numbers for the prose: ``<prefix><key>_verdict`` ("reproduced",
        "not reproduced" or "undecided"), ``_outcome``, ``_estimate``, ``_low``, ``_high``, ``_interval``
        ("[low, high]"), ``_n`` and ``_needed`` (when designed). A re-run that changes a verdict changes the
        words of every sentence that uses them."""
        from .glue import glue

        for r in self._rows.values():
            name = f"{prefix}{r.key}"
            if r.outcome == NOT_RUN:
                glue(f"{name}_outcome", NOT_RUN)
                continue
            if r.verdict is None:
                raise ValueError(f"row {r.key!r} is not decided yet: glue after deciding every row")
            glue(f"{name}_verdict", r.verdict)
            glue(f"{name}_outcome", r.outcome)
            glue(f"{name}_estimate", r.estimate, r.fmt)
            glue(f"{name}_low", r.low, r.fmt)
            glue(f"{name}_high", r.high, r.fmt)
            glue(f"{name}_interval", f"[{format(r.low, r.fmt)}, {format(r.high, r.fmt)}]")
            glue(f"{name}_n", r.n)
            if r.needed is not None:
                glue(f"{name}_needed", r.needed)

    # -- output ----------------------------------------------------------------------------------------
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
        """Raise :class:`ClaimsFailed` listing every contradicted row and every row never decided."""
        if not self._rows:
            raise ClaimsFailed(f"{self.chapter}: the claims table is empty")
        bad = self.failures
        if bad:
            lines = [f"- [{r.outcome}] {r.key}: {r.claim}: {r.interval_text()} against {r.criterion} "
                     f"(declared {r.expect}; paper: {r.paper})" for r in bad]
            raise ClaimsFailed(f"{self.chapter}: {len(bad)} of {len(self._rows)} claims are contradicted or were "
                               "never decided:\n" + "\n".join(lines))

    def forest(self, ax=None):
        """The forest plot of this table (:func:`forest_plot`)."""
        return forest_plot(self.to_dict()["claims"], ax=ax)

    def _repr_html_(self) -> str:
        esc = html.escape
        heads = ("Claim", "Paper", "Statistic (competitor)", "Criterion", "This book: estimate [95% CI]",
                 "Replicates", "Expected", "Verdict")
        head = "".join(f"<th>{h}</th>" for h in heads)
        body = []
        for r in self._rows.values():
            colour = OUTCOME_COLORS.get(r.outcome, "#000000")
            if r.outcome == NOT_RUN:
                cells = (esc(r.claim), esc(r.paper), "—", "—", "—", "—", "—",
                         f'<span style="color:{colour}">not run</span><br><small>{esc(r.reason)}</small>')
            else:
                reps = str(r.replicates) + (f"<br><small>pilot needs {r.needed}</small>" if r.needed else "")
                verdict = (f'<strong style="color:{colour}">{esc(r.verdict or "not decided")}</strong>'
                           f"<br><small>{esc(r.outcome)}</small>"
                           + (f"<br><small>{esc(r.reason)}</small>" if r.reason else ""))
                cells = (esc(r.claim), esc(r.paper), f"{esc(r.statistic)} <small>({esc(r.competitor)})</small>",
                         esc(r.criterion), esc(r.interval_text()), reps, esc(r.expect), verdict)
            body.append(f'<tr class="claim-{r.outcome.replace(" ", "-")}">'
                        + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        data = json.dumps(self.to_dict(), ensure_ascii=False).replace("</", "<\\/")  # safe inside <script>
        return (f'<table class="claims-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
                f'<div class="claims-forest">{forest_svg(self.to_dict()["claims"])}</div>'
                f'<script type="application/json" class="{CLAIMS_DATA_CLASS}">{data}</script>')

    def __repr__(self) -> str:
        lines = [f"ClaimTable({self.chapter!r}, {len(self._rows)} claims)"]
        lines += [f"  [{r.outcome}] {r.key}: {r.interval_text()} {r.criterion}" for r in self._rows.values()]
        return "\n".join(lines)


# -- the forest plot ------------------------------------------------------------------------------------
def forest_plot(rows: list, ax=None, title: str | None = None):
    """Each row's estimate and 95% interval against its margin, one line per row, coloured by outcome.

    Rows measure different statistics on different scales, so every line is drawn in units of its own
    margin's distance: a line's interval is shifted by the margin and divided by the largest absolute
    end of the row's interval and margin gap, so that the margin sits at 0 and the side where the paper's
    statement holds is always to the right (rows with ``"<"`` are mirrored). Rows not run are listed, grey.
    ``rows`` are the dicts of :meth:`ClaimTable.to_dict` (or of the exported JSON). Returns the figure.
    """
    import matplotlib.pyplot as plt

    rows = list(rows)
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 0.42 * max(len(rows), 1) + 0.9))
    else:
        fig = ax.figure
    labels = []
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        labels.append(_short(r.get("claim", ""), 46))
        outcome = r.get("outcome", NOT_RUN)
        colour = OUTCOME_COLORS.get(outcome, "#000000")
        if r.get("estimate") is None or r.get("margin") is None:
            ax.text(0, y, outcome, ha="center", va="center", fontsize=8, color=colour)
            continue
        sign = 1.0 if r.get("direction", ">") == ">" else -1.0
        lo, hi, est = (sign * (r[k] - r["margin"]) for k in ("low", "high", "estimate"))
        lo, hi = min(lo, hi), max(lo, hi)
        scale = max(abs(lo), abs(hi), 1e-12)
        ax.plot([lo / scale, hi / scale], [y, y], color=colour, lw=2.2, solid_capstyle="butt")
        ax.plot([est / scale], [y], marker="D" if r.get("method") == "exact" else "o", color=colour, ms=5)
        ax.text(1.2, y, f'{r.get("book", "")}  vs {r.get("criterion", "")}', va="center", fontsize=7, color=colour,
                clip_on=False)
    ax.axvline(0, color="#444444", lw=1, ls="--")
    ax.set_yticks(range(len(rows) - 1, -1, -1), labels, fontsize=8)
    ax.set_xlim(-1.15, 1.15)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xticks([-1, 0, 1], ["against the paper", "margin", "for the paper"], fontsize=8)
    ax.grid(False)
    if title:
        ax.set_title(title, fontsize=9)
    return fig


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1].rstrip() + "…"


def forest_svg(rows: list, title: str | None = None) -> str:
    """:func:`forest_plot` as an inline SVG string (for the table's HTML and the scoreboard)."""
    import matplotlib
    import matplotlib.pyplot as plt

    with matplotlib.rc_context({"svg.hashsalt": "claims", "svg.fonttype": "none", "figure.dpi": 72}):
        fig = forest_plot(rows, title=title)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
        plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]
