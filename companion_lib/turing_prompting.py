r"""Prompting is Turing-complete (Qiu, Xu, Bao and Tong, ICLR 2025).

*Ask, and it shall be given: On the Turing completeness of prompting*,
https://openreview.net/forum?id=AS8SPTyBgw (arXiv 2411.01992). Official code (MIT):
https://github.com/q-rz/ICLR25-prompting-theory (``main.ipynb``, a Decimal implementation).

The paper's objects, in the order this module builds them:

* **2-PTM** (two-tape Post--Turing machine): binary tapes :math:`A, B`, a program
  :math:`P=(\iota_0,\dots,\iota_{m-1})` over the 13 instructions ``TL TR T0 T1 T!k T?k #``
  (:math:`T\in\{A,B\}`; ``T!k`` jumps by :math:`k` if the cell under the head of :math:`T` is 0,
  ``T?k`` if it is 1).  :func:`run_ptm` is the interpreter.
* **Prompt** :math:`\pi_P = \texttt{\^{}}\,\mathrm{enc}(\iota_0)\cdots\mathrm{enc}(\iota_{m-1})\,\texttt{\$}`
  with unary jump offsets, ``enc(T!k) = T! (+^k | -^{|k|}) @`` (:func:`format_prompt`), and the input
  tokenizer :func:`tokenize` that writes :math:`x` on tape :math:`A` as (marker, bit) pairs.
* **Chain of thought** (CoT): the machine's execution trace, one record per step (``TL``.. for
  moves/writes, ``/`` for a jump not taken, ``= offset @`` for a jump taken, ``: bits $`` at the halt);
  :func:`cot_tokens` emits it and :func:`readout` reads the answer back (Theorem 3.1).
* **The fixed Transformer** :math:`\Gamma` (:class:`FixedTransformer`): hardmax attention heads with
  causal masking, ReLU features and layer normalisation without centring, listed as named operations in
  :data:`NETWORK`.  The same operations run in float64 with scores rounded to ``bits`` binary places
  (:class:`FloatBackend`) or in exact ``decimal`` arithmetic (:class:`ExactBackend`).
* **Lemma 4.2**: :func:`compile_tm` turns a two-tape Turing machine into a 2-PTM program with 27
  instructions per state (a reconstruction of the paper's layout), :func:`run_tm` runs the machine.
* :func:`random_program` samples random 2-PTM programs for the "any prompt" check.

Parity and Dyck programs (:data:`PARITY_PROGRAM`, :data:`DYCK_PROGRAM`) are the official notebook's
demo programs, Copyright (c) 2024 Ruizhong Qiu, MIT License. The rest is this book's own code; the
Transformer computes the same features as the official notebook, rewritten as a declarative list.
"""

from __future__ import annotations

import decimal
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Callable, Sequence

import numpy as np

__all__ = [
    "TOKENS", "INSTRUCTION_TOKENS", "Instruction", "parse_program", "format_prompt", "tokenize",
    "prompt_tokens", "PTMRun", "run_ptm", "cot_tokens", "readout", "input_tape",
    "PARITY_PROGRAM", "DYCK_PROGRAM", "decide_parity", "decide_dyck",
    "angle_code", "position_gap", "FloatBackend", "ExactBackend", "Head", "Norm", "Feature", "NETWORK",
    "network_size", "FixedTransformer", "first_mismatch",
    "TwoTapeTM", "run_tm", "compile_tm", "tm_not", "tm_increment", "tm_parity",
    "random_program", "precision_bound_bits",
]

# ------------------------------------------------------------------------------------------------
# 1. Alphabet and programs
# ------------------------------------------------------------------------------------------------
INSTRUCTION_TOKENS: tuple[str, ...] = (
    "AL", "AR", "A0", "A1", "A!", "A?", "BL", "BR", "B0", "B1", "B!", "B?", "#")
AUXILIARY_TOKENS: tuple[str, ...] = ("^", "$", "/", "=", "-", "+", "@", ":")
OUTPUT_TOKENS: tuple[str, ...] = ("0", "1")
#: The 23-token alphabet :math:`\Sigma`: 13 instructions, 8 auxiliaries, 2 output bits.
TOKENS: tuple[str, ...] = INSTRUCTION_TOKENS + AUXILIARY_TOKENS + OUTPUT_TOKENS

_INSTRUCTION_RE = re.compile(r"^(?:([AB])([LR01])|([AB])([!?])([+-]?\d+)|(#))$")


@dataclass(frozen=True)
class Instruction:
    """One 2-PTM instruction: ``op`` is an instruction token (``'A!'``, ``'BR'``, ``'#'``...) and
    ``offset`` the relative jump :math:`k\ne0` of a conditional jump (``None`` otherwise)."""

    op: str
    offset: int | None = None

    @property
    def is_jump(self) -> bool:
        return self.op[-1] in "!?"

    def __str__(self) -> str:
        return f"{self.op}{self.offset:+d}" if self.is_jump else self.op


def parse_program(program: Sequence[str | Instruction] | str) -> tuple[Instruction, ...]:
    """Parse and validate a 2-PTM program.

    ``program`` is a list such as ``['A!+4', 'AR', 'A?-2', '#']`` (or one space-separated string).
    Jump offsets are relative and must be non-zero and land inside the program. Raises ``ValueError``
    naming the bad instruction, ``TypeError`` for a wrong container.
    """
    if isinstance(program, str):
        program = program.split()
    if not isinstance(program, (list, tuple)):
        raise TypeError(f"program must be a list of instruction strings, got {type(program).__name__}")
    if len(program) == 0:
        raise ValueError("program must contain at least one instruction")
    parsed: list[Instruction] = []
    for i, raw in enumerate(program):
        if isinstance(raw, Instruction):
            ins = raw
        elif isinstance(raw, str):
            m = _INSTRUCTION_RE.match(raw.strip())
            if m is None:
                raise ValueError(f"program[{i}] = {raw!r} is not a 2-PTM instruction "
                                 "(expected TL, TR, T0, T1, T!k, T?k with T in A/B, or #)")
            if m.group(1):
                ins = Instruction(m.group(1) + m.group(2))
            elif m.group(3):
                ins = Instruction(m.group(3) + m.group(4), int(m.group(5)))
            else:
                ins = Instruction("#")
        else:
            raise TypeError(f"program[{i}] must be a string, got {type(raw).__name__}")
        if ins.op not in INSTRUCTION_TOKENS:
            raise ValueError(f"program[{i}] has unknown op {ins.op!r}")
        if ins.is_jump:
            if not isinstance(ins.offset, int) or ins.offset == 0:
                raise ValueError(f"program[{i}] = {ins}: a jump offset must be a non-zero integer")
            if not 0 <= i + ins.offset < len(program):
                raise ValueError(f"program[{i}] = {ins}: jump target {i + ins.offset} is outside "
                                 f"the program (0..{len(program) - 1})")
        elif ins.offset is not None:
            raise ValueError(f"program[{i}] = {ins.op}: only jumps take an offset")
        parsed.append(ins)
    return tuple(parsed)


def _check_bits(x: str, name: str = "x") -> str:
    if not isinstance(x, str):
        raise TypeError(f"{name} must be a bit string such as '0110', got {type(x).__name__}")
    if set(x) - {"0", "1"}:
        raise ValueError(f"{name} must contain only '0' and '1', got {x!r}")
    return x


def format_prompt(program) -> list[str]:
    r"""The prompt :math:`\pi_P` of a program: ``^``, each instruction with its offset in unary
    (``A!+3`` becomes ``A! + + + @``), then ``$``. Its length depends on the program only."""
    tokens = ["^"]
    for ins in parse_program(program):
        tokens.append(ins.op)
        if ins.is_jump:
            tokens += ["+" if ins.offset > 0 else "-"] * abs(ins.offset) + ["@"]
    return tokens + ["$"]


def tokenize(x: str) -> list[str]:
    r"""The input tokenizer: CoT-like tokens that write :math:`x` on tape :math:`A` as pairs
    :math:`A[2i]=1` (marker), :math:`A[2i+1]=x_i`, return the head to cell 0, and jump back to
    instruction 0 with ``= -^c @`` (:math:`c` = number of move/write tokens). Length :math:`O(n)`."""
    x = _check_bits(x)
    if not x:
        return []
    tokens = ["AR"] * (2 * len(x))
    for bit in reversed(x):
        tokens += ["AL"] + (["A1"] if bit == "1" else []) + ["AL", "A1"]
    return tokens + ["="] + ["-"] * len(tokens) + ["@"]


def prompt_tokens(program, x: str) -> list[str]:
    """Everything the Transformer reads before it starts generating: prompt + tokenized input."""
    return format_prompt(program) + tokenize(x)


def input_tape(x: str) -> dict[int, int]:
    """Tape :math:`A` holding :math:`x` in the (marker, bit) convention (cells not listed are 0)."""
    x = _check_bits(x)
    tape: dict[int, int] = {}
    for i, bit in enumerate(x):
        tape[2 * i] = 1
        tape[2 * i + 1] = int(bit)
    return tape


def _read_output(tape: dict[int, int]) -> str:
    bits, r = [], 0
    while tape.get(2 * r, 0) == 1:
        bits.append(str(tape.get(2 * r + 1, 0)))
        r += 1
    return "".join(bits)


@dataclass
class PTMRun:
    """Result of :func:`run_ptm`: the CoT tokens, the number of executed instructions (``steps``,
    the halt not counted), whether the machine halted, its output (``None`` if it did not halt)."""

    cot: list[str]
    steps: int
    halted: bool
    output: str | None
    tape_a: dict[int, int] = field(repr=False)
    tape_b: dict[int, int] = field(repr=False)


def run_ptm(program, x: str, max_steps: int = 100_000, max_cot: int | None = None) -> PTMRun:
    """Interpret a 2-PTM program on input ``x`` and emit its chain of thought.

    One CoT record per executed instruction: a move/write emits its own token, a conditional jump not
    taken emits ``/``, a jump taken emits ``=`` + the unary offset + ``@``; ``#`` emits ``:``, the
    output bits read pairwise from tape :math:`A`, and ``$``. Stops after ``max_steps`` instructions
    or once ``max_cot`` CoT tokens exist (then ``halted`` is False). Raises ``RuntimeError`` if a
    jump leaves the program.
    """
    prog = parse_program(program)
    x = _check_bits(x)
    if max_steps < 0:
        raise ValueError(f"max_steps must be >= 0, got {max_steps}")
    tapes = {"A": input_tape(x), "B": {}}
    heads = {"A": 0, "B": 0}
    cot: list[str] = []
    j, steps, halted = 0, 0, False
    while steps < max_steps and (max_cot is None or len(cot) < max_cot):
        ins = prog[j]
        if ins.op == "#":
            halted = True
            break
        t, kind = ins.op[0], ins.op[1]
        if kind in "LR":
            heads[t] += 1 if kind == "R" else -1
            cot.append(ins.op)
            j += 1
        elif kind in "01":
            tapes[t][heads[t]] = int(kind)
            cot.append(ins.op)
            j += 1
        else:
            bit = tapes[t].get(heads[t], 0)
            if (kind == "!" and bit == 0) or (kind == "?" and bit == 1):
                cot += ["="] + ["+" if ins.offset > 0 else "-"] * abs(ins.offset) + ["@"]
                j += ins.offset
            else:
                cot.append("/")
                j += 1
        steps += 1
        if not 0 <= j < len(prog):
            raise RuntimeError(f"the instruction pointer left the program (j={j}) after {steps} steps")
    output = None
    if halted:
        output = _read_output(tapes["A"])
        cot += [":"] + list(output) + ["$"]
    if max_cot is not None:
        cot = cot[:max_cot]
    return PTMRun(cot, steps, halted, output, tapes["A"], tapes["B"])


def cot_tokens(program, x: str, max_steps: int = 100_000) -> list[str]:
    """Just the CoT of :func:`run_ptm`."""
    return run_ptm(program, x, max_steps=max_steps).cot


def readout(tokens: Sequence[str] | str) -> str:
    """The answer in a generated sequence: the bits between the last ``:`` and the final ``$``."""
    seq = list(tokens) if not isinstance(tokens, str) else list(tokens)
    if not seq or seq[-1] != "$" or ":" not in seq:
        raise ValueError("tokens must end with '$' and contain ':' (a halted chain of thought)")
    last = len(seq) - 1 - seq[::-1].index(":")
    return "".join(seq[last + 1:-1])


# Official demo programs (q-rz/ICLR25-prompting-theory, main.ipynb; Copyright (c) 2024 Ruizhong Qiu,
# MIT License). Parity outputs 1 - (number of ones mod 2); Dyck decides balanced strings with 0 = '('.
PARITY_PROGRAM: tuple[str, ...] = (
    "A!+4", "AR", "AR", "A?-2", "A1", "AR", "A1", "A?+3",   # 0-7: find the end, initialise parity cell
    "AL", "AL", "AL", "AL", "AL", "A?+2", "#",              # 8-14: halt if no cell remains
    "AR", "AR", "A0", "AR", "A!-11",                        # 15-19: parity 0: move on
    "A0", "AL", "AL", "A?+3", "A1", "A?+2", "A0", "AL", "A?-17")  # 20-28: parity 1: flip, move on
DYCK_PROGRAM: tuple[str, ...] = (
    "A?+14", "A0", "AL", "A0", "AL", "A?-4", "AR", "AR", "A1", "AR", "BL", "B?+2", "A1", "#",
    "AR", "A?+4", "B1", "BR", "B!+3", "BL", "B!+4", "B0", "AR", "B!-23",
    "AL", "AR", "AR", "A?-2", "A0", "AL", "A0", "AL", "A?-4", "AR", "AR", "A1", "#")


def decide_parity(x: str) -> str:
    """What :data:`PARITY_PROGRAM` computes: ``'1'`` if ``x`` has an even number of ones."""
    return str(1 - _check_bits(x).count("1") % 2)


def decide_dyck(x: str) -> str:
    """What :data:`DYCK_PROGRAM` computes: ``'1'`` iff ``x`` is balanced with 0 = '(' and 1 = ')'."""
    depth = 0
    for bit in _check_bits(x):
        depth += 1 if bit == "0" else -1
        if depth < 0:
            return "0"
    return str(int(depth == 0))


# ------------------------------------------------------------------------------------------------
# 2. Numbers: angle codes, positional gaps, two arithmetic backends
# ------------------------------------------------------------------------------------------------
def angle_code(h) -> np.ndarray:
    r"""The "angle code" :math:`u(h) = (h, 1)/\sqrt{h^2+1}` that LN makes out of a prefix mean
    :math:`(h/p, 1/p)`. :math:`u(h)^\top u(h') = 1` iff :math:`h=h'`. Shape ``(..., 2)``."""
    h = np.asarray(h, dtype=float)
    r = np.sqrt(h * h + 1.0)
    return np.stack([h / r, 1.0 / r], axis=-1)


def position_gap(p) -> np.ndarray:
    r"""Positional feature :math:`1-u(p)^\top u(p+1) = 1-\frac{p(p+1)+1}{\sqrt{(p^2+1)((p+1)^2+1)}}`,
    the smallest similarity gap between neighbouring codes, computed stably as
    :math:`1/(\sqrt{a^2+1}(\sqrt{a^2+1}+a))` with :math:`a=p(p+1)+1` (it is :math:`\approx 1/(2p^4)`)."""
    p = np.asarray(p, dtype=float)
    if np.any(p < 0):
        raise ValueError("p must be non-negative")
    a = p * (p + 1.0) + 1.0
    r = np.sqrt(a * a + 1.0)
    return 1.0 / (r * (r + a))


class FloatBackend:
    """Hardware floating point (``float64``, or ``longdouble`` = 64-bit mantissa on x86).

    Attention scores are rounded to multiples of :math:`2^{-\\text{bits}}` before the hardmax compares
    them, and LN treats a vector as zero when it rounds to zero (the official code does the same with
    ``fp_round`` decimal places). ``bits`` must stay a few bits below the format's own resolution:
    about 46 for float64 and 58 for longdouble, else the format's rounding noise decides ties.
    """

    def __init__(self, bits: int = 46, dtype=np.float64) -> None:
        if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)):
            raise TypeError(f"bits must be an int, got {type(bits).__name__}")
        if np.dtype(dtype) not in (np.dtype(np.float64), np.dtype(np.longdouble)):
            raise ValueError(f"dtype must be float64 or longdouble, got {dtype}")
        self.dtype = np.dtype(dtype).type
        limit = np.finfo(self.dtype).nmant
        if not 1 <= bits <= limit:
            raise ValueError(f"bits must be in 1..{limit} for {np.dtype(dtype).name}, got {bits}")
        self.bits = int(bits)
        self._scale = self.dtype(2) ** self.bits
        self.step = self.dtype(1) / self._scale

    def __repr__(self) -> str:
        return f"FloatBackend(bits={self.bits}, dtype={np.dtype(self.dtype).name})"

    def const(self, v):
        return self.dtype(v)

    def zeros(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=self.dtype)

    def from_ints(self, v) -> np.ndarray:
        return np.asarray(v).astype(self.dtype)

    def quantize(self, s: np.ndarray) -> np.ndarray:
        return np.round(s * self._scale) / self._scale

    def sqrt(self, v: np.ndarray) -> np.ndarray:
        return np.sqrt(v)

    def position_features(self, p: np.ndarray):
        p = p.astype(self.dtype)
        one = self.dtype(1)
        r = np.sqrt(p * p + one)
        a = p * (p + one) + one
        ra = np.sqrt(a * a + one)
        return one / p, one / (ra * (ra + a)), p / r, one / r

    def context(self):
        import contextlib
        return contextlib.nullcontext()


class ExactBackend:
    """Arbitrary-precision arithmetic with :mod:`decimal` (``digits`` significant digits, like the
    official ``fp_round + fp_guard``); scores are rounded to multiples of :math:`2^{-\\text{bits}}`.
    Slow (Python objects), exact enough to cross-check the float64 backend."""

    dtype = object

    def __init__(self, bits: int = 96, digits: int = 60) -> None:
        for name, v in (("bits", bits), ("digits", digits)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if bits < 1:
            raise ValueError(f"bits must be >= 1, got {bits}")
        if digits < int(bits * 0.302) + 10:
            raise ValueError(f"digits={digits} is too few to round exactly at bits={bits}; "
                             f"use digits >= {int(bits * 0.302) + 10}")
        self.bits, self.digits = int(bits), int(digits)
        self._ctx = decimal.Context(prec=self.digits, rounding=decimal.ROUND_HALF_EVEN)
        with decimal.localcontext(self._ctx):
            self._scale = Decimal(2) ** self.bits
            self.step = Decimal(1) / self._scale
        self._q = np.frompyfunc(self._quantize_one, 1, 1)
        self._sqrt = np.frompyfunc(lambda v: Decimal(v).sqrt(), 1, 1)

    def __repr__(self) -> str:
        return f"ExactBackend(bits={self.bits}, digits={self.digits})"

    def _quantize_one(self, v):
        return (Decimal(v) * self._scale).to_integral_value(decimal.ROUND_HALF_EVEN) / self._scale

    def const(self, v) -> Decimal:
        return Decimal(v)

    def zeros(self, n: int) -> np.ndarray:
        out = np.empty(n, dtype=object)
        out[:] = Decimal(0)
        return out

    def from_ints(self, v) -> np.ndarray:
        arr = np.asarray(v)
        out = np.empty(arr.shape, dtype=object)
        out.flat[:] = [Decimal(int(a)) for a in arr.flat]
        return out

    def quantize(self, s: np.ndarray) -> np.ndarray:
        return self._q(s)

    def sqrt(self, v: np.ndarray) -> np.ndarray:
        return self._sqrt(v)

    def position_features(self, p: np.ndarray):
        p = self.from_ints(p)
        one = Decimal(1)
        a = p * (p + one) + one
        r = self._sqrt(a * a + one)
        rp = self._sqrt(p * p + one)
        return one / p, one / (r * (r + a)), p / rp, one / rp

    def context(self):
        return decimal.localcontext(self._ctx)


# ------------------------------------------------------------------------------------------------
# 3. The fixed Transformer as a list of named operations
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Head:
    r"""A causal hardmax attention head. The score of position :math:`i` for key :math:`k\le i` is
    :math:`s_{ik}=\min(2,\sum_j q_j[i]\,k_j[k])`; after rounding, the head averages the value features
    over the positions with maximal score (ties share equally) and writes them to ``out``."""

    name: str
    query: tuple[str, ...]
    key: tuple[str, ...]
    value: tuple[str, ...]
    out: tuple[str, ...]
    role: str = ""


@dataclass(frozen=True)
class Norm:
    r"""Layer normalisation without centring: :math:`z\mapsto z/\lVert z\rVert_2`, and :math:`z` itself
    when it rounds to zero."""

    name: str
    inputs: tuple[str, ...]
    out: tuple[str, ...]
    role: str = ""


@dataclass(frozen=True)
class Feature:
    """A position-wise feature: a ReLU expression of earlier features (an MLP line)."""

    name: str
    fn: Callable[[dict], object]
    role: str = ""


def _relu(v):
    return np.maximum(v, 0)


_MOVE_WRITE = ("AL", "AR", "A0", "A1", "BL", "BR", "B0", "B1")


def _s(f, *toks):
    """Sum of token indicators."""
    total = f["is_" + toks[0]]
    for t in toks[1:]:
        total = total + f["is_" + t]
    return total


def _cot(f, v):
    """ReLU(v + after_delim - 1): the indicator v, counted only after the prompt's '$'."""
    return _relu(v + f["after_delim"] - 1)


def _features(*pairs):
    return [Feature(name, fn, role) for name, fn, role in pairs]


_LOGIT_TOKENS: tuple[str, ...] = ("AL", "AR", "A0", "A1", "BL", "BR", "B0", "B1", "/", "=", "-", "+",
                                  "@", ":", "0", "1", "$")

#: The network :math:`\Gamma`: the same list of heads, norms and features runs every prompt.
NETWORK: tuple = tuple([
    # --- where are we: uniform heads give prefix means, LN turns them into codes -------------------
    Head("start_mean", ("one",), ("one",), ("is_^",), ("start_mean",), "uniform: 1/p (p = position+1)"),
    Head("delim_mean", ("one",), ("one",), ("is_$",), ("delim_mean",), "uniform: share of '$' so far"),
    Norm("after_delim", ("delim_mean",), ("after_delim",), "1 after the prompt's '$', else 0"),
    *_features(
        ("a_write", lambda f: _cot(f, _s(f, "A0", "A1")), "CoT writes on tape A"),
        ("b_write", lambda f: _cot(f, _s(f, "B0", "B1")), "CoT writes on tape B"),
        ("a_bit", lambda f: _cot(f, f["is_A1"]), "bit written on A"),
        ("b_bit", lambda f: _cot(f, f["is_B1"]), "bit written on B"),
        ("a_move", lambda f: _cot(f, f["is_AR"]) - _cot(f, f["is_AL"]), "head move on A"),
        ("b_move", lambda f: _cot(f, f["is_BR"]) - _cot(f, f["is_BL"]), "head move on B")),
    # --- tapes: head positions as angle codes, latest-write retrieval --------------------------------
    Head("head_means", ("one",), ("one",), ("a_move", "b_move"), ("a_head_mean", "b_head_mean"),
         "uniform: h/p for both heads"),
    Norm("a_code", ("a_head_mean", "start_mean"), ("a_code0", "a_code1"), "u(h_A)"),
    Norm("b_code", ("b_head_mean", "start_mean"), ("b_code0", "b_code1"), "u(h_B)"),
    Head("a_read", ("one", "a_code0", "a_code1", "pe_gap"), ("a_write", "a_code0", "a_code1", "neg_pe_inv"),
         ("a_bit", "a_code0", "a_write"), ("a_got_bit", "a_got_code0", "a_got_write"),
         "latest write at the cell under head A"),
    Head("b_read", ("one", "b_code0", "b_code1", "pe_gap"), ("b_write", "b_code0", "b_code1", "neg_pe_inv"),
         ("b_bit", "b_code0", "b_write"), ("b_got_bit", "b_got_code0", "b_got_write"),
         "latest write at the cell under head B"),
    *_features(("a_code_diff", lambda f: f["a_code0"] - f["a_got_code0"], ""),
               ("b_code_diff", lambda f: f["b_code0"] - f["b_got_code0"], "")),
    Norm("a_miss_sign", ("a_code_diff",), ("a_miss_sign",), "sign of the code difference"),
    Norm("b_miss_sign", ("b_code_diff",), ("b_miss_sign",), "sign of the code difference"),
    *_features(
        ("a_missing", lambda f: _relu(f["a_miss_sign"]) + _relu(-f["a_miss_sign"]), "NotEqual: cell never written"),
        ("b_missing", lambda f: _relu(f["b_miss_sign"]) + _relu(-f["b_miss_sign"]), "NotEqual: cell never written"),
        ("a_val", lambda f: _relu(f["a_got_bit"] - f["a_missing"] - 1 + f["a_got_write"]), "bit under head A"),
        ("b_val", lambda f: _relu(f["b_got_bit"] - f["b_missing"] - 1 + f["b_got_write"]), "bit under head B"),
        ("is_inst", lambda f: _relu(_s(f, *INSTRUCTION_TOKENS) - f["after_delim"]), "instruction token in the prompt"),
        ("is_cond", lambda f: _s(f, "A!", "A?", "B!", "B?"), "conditional-jump token")),
    # --- the program: instruction index codes and offset-token codes ---------------------------------
    Head("inst_mean", ("one",), ("one",), ("is_inst",), ("inst_mean",), "uniform: #instructions/p"),
    Feature("inst_index", lambda f: f["inst_mean"] - f["start_mean"], "(index of latest instruction)/p"),
    Norm("idx_code", ("inst_index", "start_mean"), ("idx_code0", "idx_code1"), "u(instruction index)"),
    Head("cond_mean", ("one",), ("idx_code0",), ("is_cond",), ("cond_mean",),
         "tokens of the latest instruction: 1/(j+1) at the j-th offset token"),
    Feature("not_cond_mean", lambda f: 1 - f["cond_mean"], ""),
    Norm("off_code_raw", ("not_cond_mean", "cond_mean"), ("off_raw0", "off_raw1"), "u(j)"),
    *_features(
        ("off_code0", lambda f: f["off_raw0"] + f["is_cond"], "u(j), or (1,0) at the instruction token"),
        ("off_code1", lambda f: f["off_raw1"] - f["is_cond"], ""),
        ("rec_start", lambda f: f["is_^"] + _cot(f, _s(f, *_MOVE_WRITE, "/", "=")), "a CoT record starts"),
        ("rec_end", lambda f: _cot(f, _s(f, "$", *_MOVE_WRITE, "@")), "a CoT record ends")),
    # --- the CoT: records, offsets being copied, the instruction pointer -----------------------------
    Head("rec_mean", ("one",), ("rec_start",), ("is_^",), ("rec_mean",), "1/R, R = number of records"),
    Norm("rec_code", ("one", "rec_mean"), ("rec_code0", "rec_code1"), "u(R)"),
    *_features(("neg_rec_code0", lambda f: -f["rec_code0"], ""), ("neg_rec_code1", lambda f: -f["rec_code1"], "")),
    Head("sat_mean", ("neg_one",), ("rec_mean",), ("is_=",), ("sat_mean",),
         "current record: 1/(j+1) after j offset tokens of a taken jump"),
    Norm("copy_code_raw", ("one", "sat_mean"), ("copy_raw0", "copy_raw1"), "u(j+1)"),
    *_features(
        ("copy_code0", lambda f: _relu(f["copy_raw0"] - f["rec_end"]) + f["rec_end"], "next offset token to copy"),
        ("copy_code1", lambda f: _relu(f["copy_raw1"] - f["rec_end"]), "")),
    Head("rec_gap", ("rec_code0", "rec_code1"), ("pe_code0", "pe_code1"), ("pe_gap",), ("rec_gap",),
         "look up 1-u(R)^T u(R+1) at position R"),
    *_features(
        ("in_jump", lambda f: _cot(f, _s(f, "=", "-", "+")), "inside a taken jump"),
        ("rec_bias", lambda f: 3 - _relu(f["rec_gap"] / 2 - 1 + f["in_jump"]), "3, or 2.5-ish inside a jump"),
        ("ptr_move", lambda f: _cot(f, _s(f, *_MOVE_WRITE, "+", "/")) - _cot(f, f["is_-"]), "pointer moves")),
    Head("pointer", ("rec_bias", "neg_rec_code0", "neg_rec_code1"), ("one", "rec_code0", "rec_code1"),
         ("ptr_move", "is_^"), ("ptr_mean", "ptr_start"),
         "prefix mean of pointer moves, leaving out the current jump record"),
    Norm("ptr_code", ("ptr_mean", "ptr_start"), ("ptr_code0", "ptr_code1"), "u(j), j = instruction pointer"),
    Head("fetch", ("ptr_code0", "ptr_code1", "copy_code0", "copy_code1", "pe_gap", "neg_one"),
         ("idx_code0", "idx_code1", "off_code0", "off_code1", "pe_inv", "one"),
         ("is_AL", "is_AR", "is_A0", "is_A1", "is_A!", "is_A?", "is_BL", "is_BR", "is_B0", "is_B1",
          "is_B!", "is_B?", "is_-", "is_+", "is_@", "is_#"),
         ("f_AL", "f_AR", "f_A0", "f_A1", "f_A!", "f_A?", "f_BL", "f_BR", "f_B0", "f_B1",
          "f_B!", "f_B?", "f_-", "f_+", "f_@", "f_#"),
         "fetch instruction j (or its next offset token)"),
    *_features(
        ("jump_taken", lambda f: (_relu(f["f_A!"] - f["a_val"]) + _relu(f["f_A?"] + f["a_val"] - 1)
                                  + _relu(f["f_B!"] - f["b_val"]) + _relu(f["f_B?"] + f["b_val"] - 1)),
         "T! and cell 0, or T? and cell 1"),
        ("jump_not_taken", lambda f: f["f_A!"] + f["f_A?"] + f["f_B!"] + f["f_B?"] - f["jump_taken"], ""),
        # --- readout after '#': cells 2r and 2r+1 of tape A ------------------------------------------
        ("is_read", lambda f: _s(f, ":", "0", "1"), "readout phase"),
        ("read_shift0", lambda f: 2 * _s(f, "0", "1"), ""),
        ("read_shift1", lambda f: f["is_:"] + 2 * _s(f, "0", "1"), "")),
    Head("read_means", ("one",), ("is_read",), ("read_shift0", "read_shift1", "is_:"),
         ("read_mean0", "read_mean1", "read_start"), "2r/(r+1), (2r+1)/(r+1), 1/(r+1)"),
    Norm("read_code0", ("read_mean0", "read_start"), ("rc0_0", "rc0_1"), "u(2r)"),
    Norm("read_code1", ("read_mean1", "read_start"), ("rc1_0", "rc1_1"), "u(2r+1)"),
    Head("read_marker", ("one", "rc0_0", "rc0_1", "pe_gap"), ("a_write", "a_code0", "a_code1", "neg_pe_inv"),
         ("a_bit", "a_code0", "a_write"), ("m_got_bit", "m_got_code0", "m_got_write"), "A[2r]"),
    Head("read_value", ("one", "rc1_0", "rc1_1", "pe_gap"), ("a_write", "a_code0", "a_code1", "neg_pe_inv"),
         ("a_bit", "a_code0", "a_write"), ("v_got_bit", "v_got_code0", "v_got_write"), "A[2r+1]"),
    *_features(("m_code_diff", lambda f: f["rc0_0"] - f["m_got_code0"], ""),
               ("v_code_diff", lambda f: f["rc1_0"] - f["v_got_code0"], "")),
    Norm("m_miss_sign", ("m_code_diff",), ("m_miss_sign",), ""),
    Norm("v_miss_sign", ("v_code_diff",), ("v_miss_sign",), ""),
    *_features(
        ("m_val", lambda f: _relu(f["m_got_bit"] - _relu(f["m_miss_sign"]) - _relu(-f["m_miss_sign"]) - 1
                                  + f["m_got_write"]), "marker bit A[2r]"),
        ("v_val", lambda f: _relu(f["v_got_bit"] - _relu(f["v_miss_sign"]) - _relu(-f["v_miss_sign"]) - 1
                                  + f["v_got_write"]), "value bit A[2r+1]"),
        # --- next-token logits ------------------------------------------------------------------------
        ("logit_/", lambda f: f["jump_not_taken"], ""),
        ("logit_=", lambda f: f["jump_taken"], ""),
        ("logit_:", lambda f: f["f_#"], ""),
        ("logit_0", lambda f: 2 * _relu(f["is_read"] + f["m_val"] - f["v_val"] - 1), ""),
        ("logit_1", lambda f: 2 * _relu(f["is_read"] + f["m_val"] + f["v_val"] - 2), ""),
        ("logit_$", lambda f: 2 * _relu(f["is_read"] - f["m_val"]), "")),
])


def network_size(network: Sequence = NETWORK) -> dict[str, int]:
    """Counts of heads, norms and ReLU features of the network; none depends on the program."""
    return {"heads": sum(isinstance(o, Head) for o in network),
            "norms": sum(isinstance(o, Norm) for o in network),
            "features": sum(isinstance(o, Feature) for o in network),
            "tokens": len(TOKENS)}


def _logit_name(tok: str) -> str:
    return f"f_{tok}" if tok in _MOVE_WRITE or tok in "-+@" else f"logit_{tok}"


class FixedTransformer:
    r"""The Transformer :math:`\Gamma` of Theorem 3.1: one fixed network (:data:`NETWORK`) that
    executes whatever 2-PTM program its prompt holds.

    ``predict(tokens)`` runs the whole sequence in parallel (causal masking) and returns the greedy
    next token at every position; ``generate(prompt)`` decodes greedily, one token at a time with a
    cache of earlier positions, until ``$``. Both share the same code path (positions are processed
    in row blocks of ``block`` queries).
    """

    def __init__(self, backend: FloatBackend | ExactBackend | None = None, block: int = 256) -> None:
        self.backend = backend if backend is not None else FloatBackend(46)
        if not isinstance(self.backend, (FloatBackend, ExactBackend)):
            raise TypeError("backend must be a FloatBackend or an ExactBackend")
        if block < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        self.block = int(block)

    # -- internals --------------------------------------------------------------------------------
    def _new_state(self) -> dict:
        return {"cols": {}, "n": 0, "cap": 0, "tokens": []}

    def _grow(self, st: dict, need: int) -> None:
        if need <= st["cap"]:
            return
        cap = max(need, 2 * st["cap"], 64)
        for name, arr in st["cols"].items():
            new = self.backend.zeros(cap)
            new[: st["n"]] = arr[: st["n"]]
            st["cols"][name] = new
        st["cap"] = cap

    def _set(self, st: dict, name: str, s: int, e: int, values) -> None:
        col = st["cols"].get(name)
        if col is None:
            col = st["cols"][name] = self.backend.zeros(st["cap"])
        col[s:e] = values

    def _attend(self, st: dict, op: Head, s: int, e: int) -> None:
        be, cols = self.backend, st["cols"]
        scores = None                                                  # (rows s..e-1, keys 0..e-1)
        for q, k in zip(op.query, op.key):
            term = np.multiply.outer(cols[q][s:e], cols[k][:e])
            scores = term if scores is None else scores + term
        scores = np.minimum(scores, be.const(2))                       # clipped similarity
        r, c = np.triu_indices(e - s, 1)                               # causal mask: the future of
        scores[r, s + c] = be.const(-(10 ** 9))                        # a row lies in columns s..e-1
        if be.dtype is object:
            # Rounding is monotone: the rounded maximum is round(max), and only scores within one
            # rounding step of the raw maximum can tie with it. Round just those (Decimal is slow).
            raw_best = scores.max(axis=1)
            best = be.quantize(raw_best)
            hit = scores >= (raw_best - 2 * be.step)[:, None]
            rr, cc = np.nonzero(hit)
            hit[rr, cc] = be.quantize(scores[rr, cc]) == best[rr]
        else:
            scores = be.quantize(scores)
            hit = scores == scores.max(axis=1)[:, None]                 # hardmax: ties share
        count = hit.sum(axis=1)
        weights = be.from_ints(hit) / be.from_ints(count)[:, None]
        for v, out in zip(op.value, op.out):
            self._set(st, out, s, e, weights.dot(cols[v][:e]))

    def _norm(self, st: dict, op: Norm, s: int, e: int) -> None:
        be, cols = self.backend, st["cols"]
        xs = [cols[name][s:e] for name in op.inputs]
        zero = np.ones(e - s, dtype=bool)
        for x in xs:
            zero &= be.quantize(x) == be.const(0)
        sq = xs[0] * xs[0]
        for x in xs[1:]:
            sq = sq + x * x
        norm = be.sqrt(np.where(zero, be.const(1), sq))
        for x, out in zip(xs, op.out):
            self._set(st, out, s, e, np.where(zero, x, x / norm))

    def _embed(self, st: dict, tokens: Sequence[str], s: int, e: int) -> None:
        be = self.backend
        toks = np.asarray(tokens[s:e], dtype=object)
        for t in TOKENS:
            self._set(st, "is_" + t, s, e, be.from_ints(toks == t))
        self._set(st, "one", s, e, be.from_ints(np.ones(e - s, dtype=int)))
        self._set(st, "neg_one", s, e, be.from_ints(-np.ones(e - s, dtype=int)))
        inv, gap, c0, c1 = be.position_features(np.arange(s + 1, e + 1))
        self._set(st, "pe_inv", s, e, inv)
        self._set(st, "neg_pe_inv", s, e, -inv)
        self._set(st, "pe_gap", s, e, gap)
        self._set(st, "pe_code0", s, e, c0)
        self._set(st, "pe_code1", s, e, c1)

    def _run(self, st: dict, new_tokens: Sequence[str]) -> None:
        bad = [t for t in new_tokens if t not in TOKENS]
        if bad:
            raise ValueError(f"tokens must come from the 23-token alphabet, got {bad[0]!r}")
        st["tokens"].extend(new_tokens)
        self._grow(st, len(st["tokens"]))
        with self.backend.context():
            while st["n"] < len(st["tokens"]):
                s = st["n"]
                e = min(len(st["tokens"]), s + self.block)
                self._embed(st, st["tokens"], s, e)
                view = _RowView(st["cols"], s, e)
                for op in NETWORK:
                    if isinstance(op, Head):
                        self._attend(st, op, s, e)
                    elif isinstance(op, Norm):
                        self._norm(st, op, s, e)
                    else:
                        self._set(st, op.name, s, e, op.fn(view))
                st["n"] = e

    def _argmax(self, st: dict, s: int, e: int) -> list[str]:
        logits = np.stack([np.asarray(st["cols"][_logit_name(t)][s:e], dtype=float)
                           if self.backend.dtype is not object else
                           np.array([float(v) for v in st["cols"][_logit_name(t)][s:e]])
                           for t in _LOGIT_TOKENS], axis=1)
        return [_LOGIT_TOKENS[i] for i in logits.argmax(axis=1)]

    # -- public -----------------------------------------------------------------------------------
    def predict(self, tokens: Sequence[str]) -> list[str]:
        """Greedy next token at every position of ``tokens`` (one parallel causal pass)."""
        tokens = list(tokens)
        if not tokens:
            raise ValueError("tokens must be non-empty")
        st = self._new_state()
        self._run(st, tokens)
        return self._argmax(st, 0, len(tokens))

    def features(self, tokens: Sequence[str], names: Sequence[str]) -> dict[str, np.ndarray]:
        """Selected internal features (e.g. ``'a_val'``, ``'ptr_code0'``) at every position, as floats."""
        st = self._new_state()
        self._run(st, list(tokens))
        n = len(tokens)
        out = {}
        for name in names:
            if name not in st["cols"]:
                raise ValueError(f"unknown feature {name!r}")
            out[name] = np.array([float(v) for v in st["cols"][name][:n]])
        return out

    def generate(self, prompt: Sequence[str], max_new: int = 10_000) -> list[str]:
        """Greedy decoding from ``prompt`` until ``$`` (or ``max_new`` tokens); returns the new tokens."""
        prompt = list(prompt)
        if not prompt:
            raise ValueError("prompt must be non-empty")
        st = self._new_state()
        self._run(st, prompt)
        out: list[str] = []
        while len(out) < max_new:
            n = st["n"]
            tok = self._argmax(st, n - 1, n)[0]
            out.append(tok)
            if tok == "$":
                break
            self._run(st, [tok])
        return out

    def run(self, program, x: str, max_new: int = 10_000) -> str:
        """Run ``program`` on input ``x``: generate from the prompt, then read the answer out."""
        cot = self.generate(prompt_tokens(program, x), max_new=max_new)
        return readout(cot)


class _RowView:
    """Dict-like access to the rows ``s:e`` of the feature columns (what a Feature's fn sees)."""

    def __init__(self, cols: dict, s: int, e: int) -> None:
        self._cols, self._s, self._e = cols, s, e

    def __getitem__(self, name: str):
        return self._cols[name][self._s:self._e]


def first_mismatch(program, x: str, backend: FloatBackend | ExactBackend | None = None,
                   max_cot: int | None = None, max_steps: int = 100_000,
                   chunk: int = 64) -> tuple[int | None, int]:
    """Compare the Transformer's greedy predictions with the interpreter's CoT, teacher-forced.

    Returns ``(position, length)``: the sequence position whose predicted next token first differs from
    the trace (``None`` if none does, i.e. greedy decoding reproduces the CoT token for token), and the
    total length prompt + compared CoT. Checking all positions in one causal pass is equivalent to
    decoding: up to the first mismatch, the decoded prefix *is* the trace. The CoT is processed in
    chunks of ``chunk`` positions and the check stops at the first mismatch.
    """
    prompt = prompt_tokens(program, x)
    cot = run_ptm(program, x, max_steps=max_steps, max_cot=max_cot).cot
    if not cot:
        raise ValueError("the program produced no CoT tokens to compare")
    seq = prompt + cot
    model = FixedTransformer(backend)
    st = model._new_state()
    start = len(prompt) - 1
    done = 0
    while done < len(seq) - 1:
        end = len(prompt) if done == 0 else min(len(seq) - 1, done + chunk)
        model._run(st, seq[done:end])
        pred = model._argmax(st, done, end)
        for i in range(max(done, start), end):
            if pred[i - done] != seq[i + 1]:
                return i, len(seq)
        done = end
    return None, len(seq)


def precision_bound_bits(length) -> np.ndarray:
    r"""Bits suggested by the :math:`\Omega(I^{-5})` score-gap statement for total length :math:`I`:
    :math:`b = 5\log_2 I + 1` (a gap :math:`\ge 1/(2I^5)` survives rounding to :math:`2^{-b}`)."""
    length = np.asarray(length, dtype=float)
    if np.any(length < 1):
        raise ValueError("length must be >= 1")
    return 5 * np.log2(length) + 1


# ------------------------------------------------------------------------------------------------
# 4. Two-tape Turing machines and the 27-instructions-per-state compiler (Lemma 4.2)
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TwoTapeTM:
    """A two-tape binary Turing machine. ``delta[(q, a, b)] = (q2, a2, b2, move_a, move_b)`` with moves
    in ``'L', 'R', 'S'``; a missing entry halts. States are ``0..n_states-1``, the start is 0. Input and
    output use the 2-PTM convention on tape A (marker/bit pairs), both heads start at cell 0."""

    n_states: int
    delta: dict
    name: str = "tm"

    def __post_init__(self) -> None:
        if self.n_states < 1:
            raise ValueError(f"n_states must be >= 1, got {self.n_states}")
        for key, val in self.delta.items():
            if len(key) != 3 or len(val) != 5:
                raise ValueError(f"delta entry {key} -> {val} must map (q, a, b) to (q2, a2, b2, mA, mB)")
            q, a, b = key
            q2, a2, b2, ma, mb = val
            if not (0 <= q < self.n_states and 0 <= q2 < self.n_states):
                raise ValueError(f"delta entry {key} -> {val}: state out of range 0..{self.n_states - 1}")
            if {a, b, a2, b2} - {0, 1}:
                raise ValueError(f"delta entry {key} -> {val}: symbols must be 0 or 1")
            if ma not in "LRS" or mb not in "LRS":
                raise ValueError(f"delta entry {key} -> {val}: moves must be 'L', 'R' or 'S'")


def run_tm(tm: TwoTapeTM, x: str, max_steps: int = 1_000_000) -> tuple[str, int]:
    """Run a :class:`TwoTapeTM` on ``x``; returns (output read from tape A, number of steps)."""
    tapes = (input_tape(x), {})
    heads = [0, 0]
    q, t = 0, 0
    step = {"L": -1, "R": 1, "S": 0}
    while t < max_steps:
        key = (q, tapes[0].get(heads[0], 0), tapes[1].get(heads[1], 0))
        if key not in tm.delta:
            return _read_output(tapes[0]), t
        q, a2, b2, ma, mb = tm.delta[key]
        tapes[0][heads[0]], tapes[1][heads[1]] = a2, b2
        heads[0] += step[ma]
        heads[1] += step[mb]
        t += 1
    raise RuntimeError(f"{tm.name} did not halt within {max_steps} steps")


def compile_tm(tm: TwoTapeTM) -> list[str]:
    r"""Lemma 4.2 (reconstructed layout): a 2-PTM program with 27 instructions per TM state.

    Block of state :math:`q` at base :math:`\beta=27q`: ``β: A?→β+14``, ``β+1: B?→β+8``, then four
    6-instruction blocks for :math:`(a,b)=(0,0),(0,1),(1,0),(1,1)` at ``β+2, β+8, β+15, β+21`` (with
    ``β+14: B?→β+21``). A block writes A, writes B, moves A, moves B (a "stay" repeats the write) and
    jumps unconditionally (``A!k, A?(k-1)``) to the base of the next state; a halting entry is ``#``.
    """
    if not isinstance(tm, TwoTapeTM):
        raise TypeError("tm must be a TwoTapeTM")
    prog: list[str] = []
    for q in range(tm.n_states):
        base = 27 * q
        sub: dict[tuple[int, int], list[str]] = {}
        for a in (0, 1):
            for b in (0, 1):
                start = base + {(0, 0): 2, (0, 1): 8, (1, 0): 15, (1, 1): 21}[(a, b)]
                if (q, a, b) not in tm.delta:
                    sub[(a, b)] = ["#"] * 6
                    continue
                q2, a2, b2, ma, mb = tm.delta[(q, a, b)]
                k = 27 * q2 - (start + 4)
                sub[(a, b)] = [f"A{a2}", f"B{b2}", f"A{ma}" if ma != "S" else f"A{a2}",
                               f"B{mb}" if mb != "S" else f"B{b2}", f"A!{k:+d}", f"A?{k - 1:+d}"]
        prog += ["A?+14", "B?+7"] + sub[(0, 0)] + sub[(0, 1)] + ["B?+7"] + sub[(1, 0)] + sub[(1, 1)]
    return prog


def tm_not() -> TwoTapeTM:
    """Flip every bit of x (2 states)."""
    return TwoTapeTM(2, {(0, 1, 0): (1, 1, 0, "R", "S"),
                         (1, 0, 0): (0, 1, 0, "R", "S"), (1, 1, 0): (0, 0, 0, "R", "S")}, "NOT")


def tm_increment() -> TwoTapeTM:
    """x + 1 for x read as a little-endian binary number (x_0 least significant); 4 states."""
    return TwoTapeTM(4, {
        (0, 1, 0): (1, 1, 0, "R", "S"),     # marker: go to the bit
        (0, 0, 0): (2, 1, 0, "R", "S"),     # end of input with a carry: new marker
        (1, 1, 0): (0, 0, 0, "R", "S"),     # 1 + carry = 0, carry on
        (1, 0, 0): (3, 1, 0, "S", "S"),     # 0 + carry = 1, done
        (2, 0, 0): (3, 1, 0, "S", "S"),     # the new most significant bit is 1
    }, "INCREMENT")


def tm_parity() -> TwoTapeTM:
    """Number of ones mod 2, accumulated on tape B, then written as the 1-bit output (9 states)."""
    d = {
        (0, 1, 0): (1, 1, 0, "R", "S"), (0, 1, 1): (1, 1, 1, "R", "S"),  # marker: read the bit
        (0, 0, 0): (2, 0, 0, "L", "S"), (0, 0, 1): (2, 0, 1, "L", "S"),  # end: rewind
        (1, 0, 0): (0, 0, 0, "R", "S"), (1, 0, 1): (0, 0, 1, "R", "S"),  # bit 0
        (1, 1, 0): (0, 1, 1, "R", "S"), (1, 1, 1): (0, 1, 0, "R", "S"),  # bit 1: toggle B
    }
    for b in (0, 1):
        for a in (0, 1):
            d[(2, a, b)] = (3, a, b, "L", "S")            # on a bit cell: step to the marker
        d[(3, 1, b)] = (2, 1, b, "L", "S")                # marker 1: keep rewinding
        d[(3, 0, b)] = (4, 0, b, "R", "S")                # cell -2: back to -1
        for a in (0, 1):
            d[(4, a, b)] = (5, a, b, "R", "S")            # cell -1 -> 0
            d[(5, a, b)] = (6, 1, b, "R", "S")            # cell 0: marker 1
            d[(6, a, b)] = (7, b, b, "R", "S")            # cell 1: the parity bit
            d[(7, a, b)] = (8, 0, b, "S", "S")            # cell 2: end marker
    return TwoTapeTM(9, d, "PARITY")


# ------------------------------------------------------------------------------------------------
# 5. Random programs
# ------------------------------------------------------------------------------------------------
def random_program(rng: np.random.Generator, n_instructions: int = 8, p_jump: float = 0.3,
                   p_halt: float = 0.05) -> list[str]:
    """A random 2-PTM program: moves/writes on both tapes, conditional jumps to random targets
    (probability ``p_jump``), an occasional ``#``, and ``#`` as the last instruction."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator")
    if n_instructions < 2:
        raise ValueError(f"n_instructions must be >= 2, got {n_instructions}")
    if not (0 <= p_jump <= 1 and 0 <= p_halt <= 1 and p_jump + p_halt <= 1):
        raise ValueError("p_jump and p_halt must be probabilities with p_jump + p_halt <= 1")
    prog: list[str] = []
    for i in range(n_instructions - 1):
        u = rng.random()
        if u < p_jump:
            target = i
            while target == i:
                target = int(rng.integers(0, n_instructions))
            prog.append(f"{rng.choice(['A', 'B'])}{rng.choice(['!', '?'])}{target - i:+d}")
        elif u < p_jump + p_halt:
            prog.append("#")
        else:
            prog.append(str(rng.choice(["AL", "AR", "A0", "A1", "BL", "BR", "B0", "B1"])))
    prog.append("#")
    parse_program(prog)
    return prog
