r"""2-PTM programs, prompts and chains of thought.

The 23-token alphabet, the instructions and their parser, the prompt :math:`\pi_P` (:func:`format_prompt`)
and the input tokenizer (:func:`tokenize`), the interpreter (:func:`run_ptm`), the chain of thought it
emits and the answer read back from it (:func:`cot_tokens`, :func:`readout`; Theorem 3.1), the official
demo programs, and random programs for the "any prompt" check (:func:`random_program`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

__all__ = [
    "TOKENS", "INSTRUCTION_TOKENS", "Instruction", "parse_program", "format_prompt", "tokenize", "prompt_tokens",
    "PTMRun", "run_ptm", "cot_tokens", "readout", "input_tape", "PARITY_PROGRAM", "DYCK_PROGRAM", "decide_parity",
    "decide_dyck", "random_program", "AUXILIARY_TOKENS", "OUTPUT_TOKENS",
]


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
