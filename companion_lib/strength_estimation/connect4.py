r"""A small, fast Connect Four engine on bitboards (the stand-in for Go in this chapter).

Board layout (the classic 7-bits-per-column bitboard): column :math:`c` uses bits
:math:`7c, \dots, 7c+5` from bottom to top; bit :math:`7c+6` stays empty as a sentinel so that shifts
never wrap from one column into the next. A position is the tuple

``Board(own, mask, ply, last, prev)``

* ``own``  -- stones of the player to move, ``mask`` -- all stones, ``ply`` -- stones on the board;
* ``last`` / ``prev`` -- single-bit masks of the last and the second-to-last stone played (0 if none):
  the *history planes* of the networks, like the move-history planes of the paper's Go networks.

Four in a row is detected with four shift-and tests (vertical 1, horizontal 7, diagonals 6 and 8).
Features for the networks are planes of shape ``(planes, 6, 7)`` flattened to vectors, built for many
positions at once with NumPy bit arithmetic.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

__all__ = [
    "ROWS", "COLS", "Board", "new_board", "play", "legal_moves", "is_legal", "has_four",
    "mover_stones", "is_win", "winning_moves", "play_sequence", "to_array", "WINNING_LINES",
    "before_features", "after_features", "N_BEFORE", "N_AFTER",
]

ROWS, COLS = 6, 7
_H1 = ROWS + 1
_BOTTOM = [1 << (_H1 * c) for c in range(COLS)]
_TOP = [1 << (_H1 * c + ROWS - 1) for c in range(COLS)]
_COLUMN = [((1 << ROWS) - 1) << (_H1 * c) for c in range(COLS)]
#: bit index of cell (row, col), row 0 at the bottom; shape (6, 7)
BIT_INDEX = np.array([[_H1 * c + r for c in range(COLS)] for r in range(ROWS)], dtype=np.uint64)
N_BEFORE = 3 * ROWS * COLS   # own stones, opponent stones, opponent's last stone
N_AFTER = 4 * ROWS * COLS    # mover's stones, opponent's stones, the stone just played, opponent's last stone


class Board(NamedTuple):
    """A Connect Four position (see the module docstring for the fields)."""

    own: int
    mask: int
    ply: int
    last: int = 0
    prev: int = 0


def new_board() -> Board:
    """The empty board, first player to move."""
    return Board(0, 0, 0, 0, 0)


def _check_col(col) -> int:
    if isinstance(col, bool) or not isinstance(col, (int, np.integer)):
        raise TypeError(f"col must be an int in 0..6, got {type(col).__name__}")
    col = int(col)
    if not 0 <= col < COLS:
        raise ValueError(f"col must be in 0..6, got {col}")
    return col


def is_legal(board: Board, col: int) -> bool:
    """True if column ``col`` still has a free cell (and the game is not over)."""
    col = _check_col(col)
    return (board.mask & _TOP[col]) == 0


def legal_moves(board: Board) -> list[int]:
    """Columns with a free cell, in increasing order."""
    mask = board.mask
    return [c for c in range(COLS) if not mask & _TOP[c]]


def has_four(bits: int) -> bool:
    """True if the stones ``bits`` contain four in a row (any direction)."""
    for s in (1, _H1, _H1 - 1, _H1 + 1):
        m = bits & (bits >> s)
        if m & (m >> (2 * s)):
            return True
    return False


def play(board: Board, col: int) -> Board:
    """The position after the player to move drops a stone in ``col``.

    Raises ``ValueError`` for a full column or a column outside 0..6.
    """
    col = _check_col(col)
    mask = board.mask
    if mask & _TOP[col]:
        raise ValueError(f"col {col} is full: illegal move")
    new_mask = mask | (mask + _BOTTOM[col])
    bit = new_mask ^ mask
    mover = board.own | bit
    return Board(new_mask ^ mover, new_mask, board.ply + 1, bit, board.last)


def mover_stones(board: Board) -> int:
    """Stones of the player who made the last move (the opponent of the player to move)."""
    return board.mask ^ board.own


def is_win(board: Board) -> bool:
    """True if the last move of ``board`` completed four in a row."""
    return has_four(board.mask ^ board.own)


def winning_moves(board: Board) -> list[int]:
    """Columns where the player to move wins at once."""
    own, mask = board.own, board.mask
    out = []
    for c in range(COLS):
        if mask & _TOP[c]:
            continue
        bit = (mask + _BOTTOM[c]) & _COLUMN[c]
        if has_four(own | bit):
            out.append(c)
    return out


def play_sequence(cols: Sequence[int]) -> Board:
    """Play a sequence of columns from the empty board; raises ``ValueError`` after a finished game."""
    board = new_board()
    for i, c in enumerate(cols):
        if board.ply and is_win(board):
            raise ValueError(f"cols[{i}]: the game was already won")
        board = play(board, c)
    return board


def to_array(board: Board) -> np.ndarray:
    """The board as a (6, 7) int array, row 0 at the bottom: 1 = first player, 2 = second, 0 = empty."""
    first = board.own if board.ply % 2 == 0 else board.mask ^ board.own
    second = board.mask ^ first
    out = np.zeros((ROWS, COLS), dtype=np.int8)
    out[_bits(np.array([first], dtype=np.uint64))[0].reshape(ROWS, COLS) == 1] = 1
    out[_bits(np.array([second], dtype=np.uint64))[0].reshape(ROWS, COLS) == 1] = 2
    return out


def _lines() -> np.ndarray:
    """The 69 winning lines of the board as (69, 4) indices into the row-major (6*7) grid."""
    lines = []
    for r in range(ROWS):
        for c in range(COLS):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(r + k * dr, c + k * dc) for k in range(4)]
                if all(0 <= rr < ROWS and 0 <= cc < COLS for rr, cc in cells):
                    lines.append([rr * COLS + cc for rr, cc in cells])
    return np.array(lines, dtype=np.int64)


WINNING_LINES = _lines()
_FLAT_BITS = BIT_INDEX.reshape(-1)


def _bits(x: np.ndarray) -> np.ndarray:
    """(n,) uint64 bitboards -> (n, 42) {0,1} float32 cells in row-major (row, col) order."""
    return ((x[:, None] >> _FLAT_BITS[None, :]) & np.uint64(1)).astype(np.float32)


def _as_uint(values) -> np.ndarray:
    return np.fromiter((int(v) for v in values), dtype=np.uint64)


def before_features(boards: Sequence[Board]) -> np.ndarray:
    """Input planes of the policy/value network for positions *before* a move, shape (n, 126).

    Planes (each 6x7, row-major): stones of the player to move, the opponent's stones, the opponent's
    last stone.
    """
    own = _as_uint(b.own for b in boards)
    opp = _as_uint(b.mask ^ b.own for b in boards)
    last = _as_uint(b.last for b in boards)
    return np.concatenate([_bits(own), _bits(opp), _bits(last)], axis=1)


def after_features(boards: Sequence[Board]) -> np.ndarray:
    r"""Input planes of the strength estimator for a state-action pair :math:`(s, a)`, shape (n, 168).

    ``boards`` are the positions *after* the move :math:`a` (as in the paper, a state-action pair is
    encoded as the board after the action). Planes, seen from the player who moved: their stones, the
    opponent's stones, the stone just played, the opponent's previous stone.
    """
    mover = _as_uint(b.mask ^ b.own for b in boards)
    opp = _as_uint(b.own for b in boards)
    last = _as_uint(b.last for b in boards)
    prev = _as_uint(b.prev for b in boards)
    return np.concatenate([_bits(mover), _bits(opp), _bits(last), _bits(prev)], axis=1)
