r"""Graded synthetic players, game generation and position tables (the stand-in for ranked human games).

The paper trains on human Go games from eleven ranks (Fox Weiqi) and chess games from eight Elo bins
(Lichess). Offline, this book replaces people by *synthetic ranks* :math:`r = 0, \dots, 7`:

* rank 0 plays a uniformly random legal move;
* rank :math:`r \ge 1` scores each legal column :math:`a` with a one-ply heuristic

  .. math:: h_r(s, a) = \text{lines}(s \cdot a) + \text{centre}(a)
            + \text{HABIT}_r\,[\,|a - a_{\text{opp}}| \le 1\,] + \tfrac12 \text{HABIT}_r\,[a \in \{0, 6\}]

  (open-line counts after the move, a centre bonus and two *habits* of weak players: answering next to
  the opponent's last stone and playing on the edges), checks tactics (take an immediate win, avoid a
  move that lets the opponent win at once) with probability :math:`p_r`, and samples
  :math:`a \sim \mathrm{softmax}(h_r / \tau_r)`.

Temperature falls, tactical care rises and habits fade with the rank, so stronger ranks win more often
and also play *differently*, the two properties of human ranks that the method relies on. Both players
of a training game have the same rank, as on Fox Weiqi.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .connect4 import COLS, WINNING_LINES, Board, _bits, after_features, before_features, is_win, new_board, play

__all__ = [
    "RANK_TEMPERATURE", "RANK_TACTICS", "RANK_HABIT", "N_RANKS", "RankedPlayer", "heuristic_scores",
    "move_probabilities", "self_play_batch",
    "play_game", "GameRecords", "generate_games", "Positions", "game_positions", "split_by_rank", "boards_before",
]

#: softmax temperature tau_r of ranks 1..7 (index 0 unused: rank 0 is uniform)
RANK_TEMPERATURE = (np.inf, 12.0, 6.0, 3.5, 2.2, 1.4, 0.8, 0.4)
#: probability p_r of checking tactics (win now / do not allow a win)
RANK_TACTICS = (0.0, 0.25, 0.45, 0.6, 0.75, 0.85, 0.93, 1.0)
#: habit strength HABIT_r (answer next to the opponent's last stone; play on the edge)
RANK_HABIT = (0.0, 9.0, 7.0, 5.5, 4.0, 2.5, 1.0, 0.0)
N_RANKS = 8

_W_OWN = np.array([0.0, 0.5, 2.0, 6.0, 1000.0])
_W_OPP = np.array([0.0, 0.5, 2.0, 7.0, 0.0])
_CENTRE = np.array([0.0, 1.0, 2.0, 3.0, 2.0, 1.0, 0.0])
_U = np.uint64
_BOTTOM_NP = np.array([1 << (7 * c) for c in range(COLS)], dtype=_U)
_TOP_NP = np.array([1 << (7 * c + 5) for c in range(COLS)], dtype=_U)
_COLUMN_NP = np.array([((1 << 6) - 1) << (7 * c) for c in range(COLS)], dtype=_U)


def _lines_through_cells() -> tuple[np.ndarray, np.ndarray]:
    """For each of the 42 cells, the (padded) indices of the winning lines through it and a validity mask."""
    through = [[i for i, line in enumerate(WINNING_LINES) if cell in line] for cell in range(42)]
    width = max(len(t) for t in through)
    idx = np.zeros((42, width), dtype=np.int64)
    valid = np.zeros((42, width))
    for cell, t in enumerate(through):
        idx[cell, :len(t)] = t
        valid[cell, :len(t)] = 1.0
    return idx, valid


_THROUGH, _THROUGH_VALID = _lines_through_cells()


def _has_four_np(bits: np.ndarray) -> np.ndarray:
    """Vectorised four-in-a-row test on an array of uint64 bitboards."""
    out = np.zeros(bits.shape, dtype=bool)
    for s in (1, 7, 6, 8):
        m = bits & (bits >> _U(s))
        out |= (m & (m >> _U(2 * s))) != 0
    return out


def _arrays(own, mask, last_col) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    own = np.atleast_1d(np.asarray(own, dtype=_U))
    mask = np.atleast_1d(np.asarray(mask, dtype=_U))
    last_col = np.atleast_1d(np.asarray(last_col, dtype=np.int64))
    if not own.shape == mask.shape == last_col.shape or own.ndim != 1:
        raise ValueError("own, mask and last_col must be 1-D arrays of the same length")
    return own, mask, last_col


def heuristic_scores(own, mask, last_col, habit: float = 0.0) -> np.ndarray:
    r"""The one-ply score :math:`h_r(s, a)` of every column for a batch of positions, shape (G, 7).

    ``own``/``mask`` are uint64 bitboards (stones of the player to move / all stones) and ``last_col`` the
    opponent's last column (-1 if none). After the move, a line (of the 69 winning lines) holding only
    the mover's :math:`k` stones adds ``_W_OWN[k]`` (1000 for four, a win), a line holding only the
    opponent's :math:`k` stones subtracts ``_W_OPP[k]``. Only lines through the new stone change, so the
    score is the change on those lines, which differs from the after-move total by a constant shared by
    all moves of a position (softmax ignores it). Full columns get ``-inf``.
    """
    own, mask, last_col = _arrays(own, mask, last_col)
    cells_own = _bits(own)
    cells_opp = _bits(mask ^ own)
    own_line = cells_own[:, WINNING_LINES].sum(-1).astype(np.int64)     # (G, 69)
    opp_line = cells_opp[:, WINNING_LINES].sum(-1).astype(np.int64)
    heights = np.bitwise_count(mask[:, None] & _COLUMN_NP[None, :]).astype(np.int64)   # (G, 7)
    legal = heights < 6
    cols = np.arange(COLS)
    cells = np.minimum(heights, 5) * COLS + cols                           # (G, 7)
    t, v = _THROUGH[cells], _THROUGH_VALID[cells]                           # (G, 7, 16)
    g = np.arange(len(own))[:, None, None]
    o, p = own_line[g, t], opp_line[g, t]
    gain = np.where(p == 0, _W_OWN[np.minimum(o + 1, 4)] - _W_OWN[o], 0.0) + np.where(o == 0, _W_OPP[p], 0.0)
    h = (v * gain).sum(-1) + _CENTRE[None, :]
    if habit:
        near = (np.abs(cols[None, :] - last_col[:, None]) <= 1) & (last_col[:, None] >= 0)
        h = h + habit * near + 0.5 * habit * ((cols == 0) | (cols == COLS - 1))[None, :]
    return np.where(legal, h, -np.inf)


def _softmax_masked(logits: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    z = np.where(allowed, logits, -np.inf)
    z = z - z.max(1, keepdims=True)
    e = np.where(allowed, np.exp(z), 0.0)
    return e / e.sum(1, keepdims=True)


def move_probabilities(own, mask, last_col, rank: int, habits: bool = True) -> np.ndarray:
    r"""The synthetic rank-``rank`` player's move distribution for a batch of positions, shape (G, 7).

    With probability :math:`p_r` the player checks tactics (plays an immediate win if there is one,
    otherwise keeps only moves after which the opponent cannot win at once, when any exist), then
    samples :math:`\mathrm{softmax}(h_r/\tau_r)` over the remaining moves; rank 0 is uniform.
    """
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < N_RANKS:
        raise ValueError(f"rank must be an int in 0..{N_RANKS - 1}, got {rank!r}")
    own, mask, last_col = _arrays(own, mask, last_col)
    legal = (mask[:, None] & _TOP_NP[None, :]) == 0
    if not legal.any(1).all():
        raise ValueError("every position must have a legal move")
    if rank == 0:
        return legal / legal.sum(1, keepdims=True)
    h = heuristic_scores(own, mask, last_col, RANK_HABIT[rank] if habits else 0.0)
    plain = _softmax_masked(h / RANK_TEMPERATURE[rank], legal)
    # tactics: immediate wins, and moves that leave the opponent no immediate win
    bit = (mask[:, None] + _BOTTOM_NP[None, :]) & _COLUMN_NP[None, :]            # (G, 7)
    win = legal & _has_four_np(own[:, None] | bit)
    mask2 = mask[:, None] | bit                                                   # (G, 7)
    opp = (mask ^ own)[:, None, None]
    bit2 = (mask2[:, :, None] + _BOTTOM_NP[None, None, :]) & _COLUMN_NP[None, None, :]  # (G, 7, 7)
    legal2 = (mask2[:, :, None] & _TOP_NP[None, None, :]) == 0
    unsafe = (legal2 & _has_four_np(opp | bit2)).any(-1)
    safe = legal & ~unsafe
    has_win, has_safe = win.any(1, keepdims=True), safe.any(1, keepdims=True)
    careful = np.where(has_win, win / np.maximum(win.sum(1, keepdims=True), 1),
                       np.where(has_safe, _softmax_masked(h / RANK_TEMPERATURE[rank], safe | ~has_safe), plain))
    p = RANK_TACTICS[rank] * careful + (1 - RANK_TACTICS[rank]) * plain
    return p / p.sum(1, keepdims=True)


def _col_of(bit: int) -> int:
    return (bit.bit_length() - 1) // 7 if bit else -1


@dataclass(frozen=True)
class RankedPlayer:
    """A synthetic player of rank ``rank`` (0 = random ... 7 = strongest); see the module docstring.

    ``habits=False`` removes the habit bonus (an ablation used in the exercises).
    """

    rank: int
    habits: bool = True

    def __post_init__(self):
        if isinstance(self.rank, bool) or not isinstance(self.rank, (int, np.integer)):
            raise TypeError(f"rank must be an int, got {type(self.rank).__name__}")
        if not 0 <= self.rank < N_RANKS:
            raise ValueError(f"rank must be in 0..{N_RANKS - 1}, got {self.rank}")

    def probabilities(self, board: Board) -> np.ndarray:
        """The move distribution (7,) at ``board``."""
        return move_probabilities([board.own], [board.mask], [_col_of(board.last)], self.rank, self.habits)[0]

    def __call__(self, board: Board, rng: np.random.Generator) -> int:
        p = self.probabilities(board)
        return int(rng.choice(COLS, p=p))

    def moves(self, boards: list[Board], rng: np.random.Generator) -> np.ndarray:
        """A move for each of ``boards`` at once (one vectorised :func:`move_probabilities` call and one
        uniform draw per board), as in :func:`self_play_batch`."""
        p = move_probabilities([b.own for b in boards], [b.mask for b in boards],
                               [_col_of(b.last) for b in boards], self.rank, self.habits)
        return _sample_columns(p, rng)


def play_game(first, second, rng: np.random.Generator) -> tuple[list[int], int]:
    """Play one game; ``first``/``second`` map ``(board, rng)`` to a column.

    Returns the list of columns and the winner: 0 (first player), 1 (second) or -1 (draw).
    """
    board = new_board()
    players = (first, second)
    moves: list[int] = []
    while True:
        col = players[board.ply % 2](board, rng)
        board = play(board, col)
        moves.append(col)
        if is_win(board):
            return moves, (board.ply - 1) % 2
        if board.ply == 42:
            return moves, -1


@dataclass
class GameRecords:
    """Games as arrays: ``moves`` (G, 42) columns padded with -1, ``length`` (G,), ``winner`` (G,)
    in {0, 1, -1}, ``rank`` (G,) the rank tag of both players."""

    moves: np.ndarray
    length: np.ndarray
    winner: np.ndarray
    rank: np.ndarray

    def __len__(self) -> int:
        return len(self.length)

    def subset(self, idx) -> "GameRecords":
        return GameRecords(self.moves[idx], self.length[idx], self.winner[idx], self.rank[idx])

    @staticmethod
    def concat(parts: list["GameRecords"]) -> "GameRecords":
        return GameRecords(*(np.concatenate([getattr(p, f) for p in parts])
                             for f in ("moves", "length", "winner", "rank")))


def _sample_columns(p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One column per row of the move distributions ``p`` (G, 7), from one uniform draw per row."""
    col = (p.cumsum(1) < rng.random((len(p), 1))).sum(1).clip(0, COLS - 1)
    return np.where(p[np.arange(len(p)), col] > 0, col, p.argmax(1))   # guard against round-off


def self_play_batch(rank: int, n_games: int, rng: np.random.Generator, habits: bool = True):
    """``n_games`` same-rank games played in lockstep with :func:`move_probabilities` (vectorised).

    Returns ``moves`` (n, 42) padded with -1, ``length`` (n,) and ``winner`` (n,) in {0, 1, -1}.
    """
    own = np.zeros(n_games, dtype=_U)
    mask = np.zeros(n_games, dtype=_U)
    last = np.full(n_games, -1, dtype=np.int64)
    moves = np.full((n_games, 42), -1, dtype=np.int8)
    length = np.zeros(n_games, dtype=np.int16)
    winner = np.full(n_games, -1, dtype=np.int8)
    active = np.arange(n_games)
    for ply in range(42):
        p = move_probabilities(own[active], mask[active], last[active], rank, habits)
        col = _sample_columns(p, rng)
        bit = (mask[active] + _BOTTOM_NP[col]) & _COLUMN_NP[col]
        mover = own[active] | bit
        mask[active] |= bit
        own[active] = mask[active] ^ mover
        last[active] = col
        moves[active, ply] = col
        length[active] = ply + 1
        won = _has_four_np(mover)
        winner[active[won]] = ply % 2
        active = active[~won]
        if not len(active):
            break
    return moves, length, winner


def generate_games(ranks, n_games: int, seed: int, habits: bool = True) -> GameRecords:
    """``n_games`` same-rank games for every rank in ``ranks`` (the training/candidate/query sets)."""
    if isinstance(n_games, bool) or not isinstance(n_games, (int, np.integer)) or n_games < 1:
        raise ValueError(f"n_games must be a positive int, got {n_games!r}")
    ranks = [int(r) for r in np.atleast_1d(ranks)]
    rng = np.random.default_rng(seed)
    parts = []
    for r in ranks:
        moves, length, winner = self_play_batch(r, n_games, rng, habits)
        parts.append(GameRecords(moves, length, winner, np.full(n_games, r, dtype=np.int8)))
    return GameRecords.concat(parts)


@dataclass
class Positions:
    """Every move of a set of games as one row.

    ``after`` (N, 168) strength-estimator input (board after the move), ``before`` (N, 126) policy
    input (board before the move), ``move`` column played, ``ply`` move number (1-based), ``game``
    index into the records, ``side`` 0/1 (who moved), ``rank`` the mover's rank, ``outcome`` +1/0/-1
    from the mover's point of view.
    """

    after: np.ndarray
    before: np.ndarray
    move: np.ndarray
    ply: np.ndarray
    game: np.ndarray
    side: np.ndarray
    rank: np.ndarray
    outcome: np.ndarray

    def __len__(self) -> int:
        return len(self.move)

    def subset(self, idx) -> "Positions":
        return Positions(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))


def game_positions(games: GameRecords) -> Positions:
    """Replay every game and tabulate its moves (see :class:`Positions`)."""
    befores, afters, rows = [], [], []
    for g in range(len(games)):
        board = new_board()
        w = int(games.winner[g])
        for k in range(int(games.length[g])):
            col = int(games.moves[g, k])
            befores.append(board)
            board = play(board, col)
            afters.append(board)
            side = k % 2
            outcome = 0 if w < 0 else (1 if w == side else -1)
            rows.append((col, k + 1, g, side, int(games.rank[g]), outcome))
    if not rows:
        raise ValueError("games must contain at least one move")
    cols = np.array(rows, dtype=np.int64).T
    return Positions(after_features(afters), before_features(befores), cols[0], cols[1], cols[2],
                     cols[3], cols[4], cols[5].astype(np.float32))


def split_by_rank(games: GameRecords, sizes: dict[str, int], seed: int = 0) -> dict[str, GameRecords]:
    """Split each rank's games into disjoint named parts, e.g. ``{"train": 200, "candidate": 40}``."""
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {k: [] for k in sizes}
    for r in np.unique(games.rank):
        idx = rng.permutation(np.flatnonzero(games.rank == r))
        if sum(sizes.values()) > len(idx):
            raise ValueError(f"sizes ask for {sum(sizes.values())} games of rank {r}, only {len(idx)} exist")
        start = 0
        for k, n in sizes.items():
            out[k].append(idx[start:start + n])
            start += n
    return {k: games.subset(np.sort(np.concatenate(v))) for k, v in out.items()}


def boards_before(games: GameRecords, positions: Positions) -> list[Board]:
    """The board *before* each move of ``positions`` (which must come from ``games``)."""
    if len(positions) and positions.game.max() >= len(games):
        raise ValueError("positions refer to games that are not in games")
    out = []
    for g, k in zip(positions.game, positions.ply):
        board = new_board()
        for col in games.moves[g, :k - 1]:
            board = play(board, int(col))
        out.append(board)
    return out
