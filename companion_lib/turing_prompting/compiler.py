r"""Lemma 4.2: two-tape Turing machines (:class:`TwoTapeTM`, :func:`run_tm`), the compiler into 2-PTM
programs with 27 instructions per state (:func:`compile_tm`), and three small machines to compile.
"""

from __future__ import annotations

from dataclasses import dataclass

from .programs import _read_output, input_tape

__all__ = ["TwoTapeTM", "run_tm", "compile_tm", "tm_not", "tm_increment", "tm_parity"]


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
