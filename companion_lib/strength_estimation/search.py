r"""Monte Carlo tree search with a policy/value network, SE-MCTS and the SA-MCTS baseline.

PUCT selection (AlphaZero, as in the official MiniZero-based code) at a node visited :math:`N` times,
for a child :math:`c` with visit count :math:`n_c`, prior :math:`P_c` and mean value
:math:`Q_c \in [0, 1]`:

.. math:: c_{\text{puct}} = c_{\text{init}} + \log\frac{1 + N + c_{\text{base}}}{c_{\text{base}}}, \qquad
          U_c = \frac{c_{\text{puct}} P_c \sqrt N}{1 + n_c}.                                         (6)

**SE-MCTS** (Chen, Shih and Wu, ICLR 2025, Section 3.3). Every node keeps the sum :math:`\Sigma_{\beta,c}`
and count :math:`w_c` of the strength scores :math:`\beta` of the positions evaluated in its subtree.
With the target :math:`\delta_k`, the mean score of the target rank's moves at move number :math:`k`,

.. math:: d_c = \Big|\frac{\Sigma_{\beta,c}}{w_c} - \delta_{k(c)}\Big|, \quad
          \hat d_c = \frac{d_c - d_{\min}}{d_{\max} - d_{\min}}\ \big(\times\tfrac12 \text{ if the subtree is
          weaker than the target}\big),

.. math:: \text{score}(c) = Q_c + U_c - s_w \frac{c_{\text{puct}}\, \hat d_c \sqrt N}{1 + n_c},      (7)

with :math:`d_{\min}, d_{\max}` the extremes seen during the search and :math:`s_w = 2` (paper). The
move played is the most visited child of the root. :math:`s_w = 0` is plain MCTS.

**SA-MCTS** (Wu et al., AAAI 2019): after a plain search, play child :math:`a` with probability
:math:`\propto N(a)^z` among children with :math:`N(a) \ge 0.1 \max_b N(b)`.                         (8)

Networks run in NumPy inside the search (a copy of the torch weights): for single positions this is
several times faster than calling torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .connect4 import (
    _BOTTOM, _TOP, COLS, Board, after_features, before_features, has_four, is_win, new_board, play,
)
from .estimator import mlp
from .players import Positions

__all__ = [
    "NumpyMLP", "PolicyValueNet", "train_policy_value", "MCTS", "SearchResult", "sa_mcts_probabilities",
    "target_by_move", "play_match", "move_matching",
]

C_INIT, C_BASE = 1.25, 19652.0


class NumpyMLP:
    """A ReLU MLP evaluated in NumPy from a list of ``(W, b)`` pairs (torch's ``Linear`` layout).

    :meth:`on_boards` evaluates a batch of positions and memoises each output: searches meet the same
    positions again (in the next move's search, in other games of a match, in other searches sharing the
    network), and the network is a pure function of its input. (A row evaluated in a batch may differ from
    the same row evaluated alone in the last bit of float32; the memo keeps the first value computed.)
    """

    #: memo entries kept at most (about 0.2 KB each); the memo is emptied when it is full
    MEMO_SIZE = 400_000

    def __init__(self, weights: list[tuple[np.ndarray, np.ndarray]]):
        if not weights:
            raise ValueError("weights must be a non-empty list of (W, b) pairs")
        self.layers = [(np.ascontiguousarray(W.T, dtype=np.float32), b.astype(np.float32)) for W, b in weights]
        self._memo: dict = {}

    def on_boards(self, boards: list[Board], features, then=None) -> list:
        """The output row for each board, with inputs ``features(boards)`` (a batch), or ``then(board, row)``
        when ``then`` is given; memoised by ``(board, features, then)``, the new positions evaluated in
        one batch."""
        memo = self._memo
        out = [memo.get((b, features, then)) for b in boards]
        todo: dict = {}
        for i, v in enumerate(out):
            if v is None:
                todo.setdefault(boards[i], []).append(i)
        if todo:
            if len(memo) + len(todo) > self.MEMO_SIZE:
                memo.clear()
            new = list(todo)
            rows = self(features(new))
            for b, row in zip(new, rows):
                v = row if then is None else then(b, row)
                memo[(b, features, then)] = v
                for i in todo[b]:
                    out[i] = v
        return out

    def __call__(self, x: np.ndarray) -> np.ndarray:
        h = np.asarray(x, dtype=np.float32)
        for i, (Wt, b) in enumerate(self.layers):
            h = h @ Wt + b
            if i < len(self.layers) - 1:
                h = np.maximum(h, 0.0)
        return h


class PolicyValueNet(nn.Module):
    """Policy (7 logits) and value (tanh) heads on a shared MLP trunk; input: before-move planes."""

    def __init__(self, n_in: int = 126, hidden: int = 128):
        super().__init__()
        self.trunk = mlp(n_in, hidden, hidden, 1)
        self.head = nn.Linear(hidden, COLS + 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.head(torch.relu(self.trunk(x)))
        return out[:, :COLS], torch.tanh(out[:, COLS])

    def numpy_weights(self) -> list[tuple[np.ndarray, np.ndarray]]:
        lin = [m for m in self.trunk if isinstance(m, nn.Linear)] + [self.head]
        return [(m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy()) for m in lin]


def train_policy_value(positions: Positions, steps: int = 1000, batch_size: int = 256, lr: float = 1e-3,
                       hidden: int = 128, seed: int = 0) -> PolicyValueNet:
    """Behaviour cloning (cross-entropy on the played column) plus outcome regression (MSE), the
    policy and value losses of the paper's trunk, on the moves of all ranks."""
    if not isinstance(positions, Positions) or len(positions) == 0:
        raise ValueError("positions must be a non-empty Positions table")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = PolicyValueNet(positions.before.shape[1], hidden)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    x = torch.from_numpy(positions.before)
    y = torch.from_numpy(positions.move)
    z = torch.from_numpy(positions.outcome)
    for _ in range(steps):
        idx = torch.from_numpy(rng.integers(len(y), size=batch_size))
        logits, v = net(x[idx])
        loss = nn.functional.cross_entropy(logits, y[idx]) + nn.functional.mse_loss(v, z[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net


def _play(board: Board, col: int) -> Board:
    """:func:`~.connect4.play` without the argument checks (the search only plays legal columns)."""
    mask = board.mask
    new_mask = mask | (mask + _BOTTOM[col])
    bit = new_mask ^ mask
    return Board(new_mask ^ (board.own | bit), new_mask, board.ply + 1, bit, board.last)


def _priors(board: Board, out: np.ndarray) -> tuple[list, float]:
    """Softmax priors over the legal columns and the value (tanh) from a policy/value output row."""
    logits = out[[c for c in range(COLS) if not board.mask & _TOP[c]]]
    p = np.exp(logits - logits.max())
    return (p / p.sum()).tolist(), math.tanh(float(out[COLS]))


def _score(board: Board, out: np.ndarray) -> float:
    return float(out[0])


class _Node:
    __slots__ = ("board", "ply", "moves", "P", "N", "W", "kids", "visits", "terminal", "value",
                 "se_sum", "se_cnt")

    def __init__(self, board: Board):
        self.board = board
        self.ply = ply = board.ply
        self.visits = 0
        self.se_sum = 0.0
        self.se_cnt = 0
        self.P = None
        if ply and has_four(board.mask ^ board.own):
            self.terminal, self.value = True, -1.0   # the player to move has lost
        elif ply == 42:
            self.terminal, self.value = True, 0.0
        else:
            self.terminal, self.value = False, 0.0
            mask = board.mask
            self.moves = moves = [c for c in range(COLS) if not mask & _TOP[c]]
            k = len(moves)
            self.N = [0] * k                        # plain lists: faster than NumPy for <= 7 children
            self.W = [0.0] * k
            self.kids = [None] * k                  # the child after moves[i], once expanded


@dataclass
class SearchResult:
    """Root statistics: ``moves`` (legal columns), ``visits`` and ``q`` (mean value in [-1, 1] from the
    root player's view) per move, and the ``move`` chosen (most visited)."""

    moves: np.ndarray
    visits: np.ndarray
    q: np.ndarray
    move: int


class MCTS:
    r"""PUCT search (6) with an optional strength penalty (7).

    Parameters
    ----------
    policy_value: a :class:`NumpyMLP` mapping before-move planes to 7 logits and a value logit, or
        ``None`` for uniform priors and zero values (a pure tree search, used in tests).
    strength: a :class:`NumpyMLP` strength estimator on after-move planes (needed when ``s_weight > 0``).
    target: :math:`\delta_k` indexed by move number ``k`` (array of length 43) or a scalar.
    s_weight: :math:`s_w` of (7); 0 gives plain MCTS.
    n_simulations: simulations per search.
    """

    def __init__(self, policy_value: NumpyMLP | None = None, strength: NumpyMLP | None = None,
                 target=None, s_weight: float = 0.0, n_simulations: int = 32):
        if isinstance(n_simulations, bool) or not isinstance(n_simulations, int) or n_simulations < 1:
            raise ValueError(f"n_simulations must be a positive int, got {n_simulations!r}")
        if s_weight < 0:
            raise ValueError(f"s_weight must be >= 0, got {s_weight}")
        if s_weight > 0 and (strength is None or target is None):
            raise ValueError("s_weight > 0 needs a strength network and a target")
        self.pv, self.se, self.s_weight, self.n_simulations = policy_value, strength, s_weight, n_simulations
        if target is not None:
            t = np.asarray(target, dtype=float)
            t = np.full(43, float(t)) if t.ndim == 0 else t
            if t.shape != (43,):
                raise ValueError(f"target must be a scalar or have length 43, got shape {t.shape}")
            self.target = t.tolist()
        else:
            self.target = None

    # -- network calls ------------------------------------------------------------------------------
    def _evaluate(self, nodes: list[_Node]) -> list[float]:
        """Set the priors of ``nodes`` (one batch of network calls); return their values for the player
        to move."""
        if self.pv is None:
            for node in nodes:
                k = len(node.moves)
                node.P = [1.0 / k] * k
            return [0.0] * len(nodes)
        values = []
        for node, (P, value) in zip(nodes, self.pv.on_boards([n.board for n in nodes], before_features, _priors)):
            node.P = P
            values.append(value)
        return values

    # -- search -----------------------------------------------------------------------------------
    def search(self, board: Board) -> SearchResult:
        """Run ``n_simulations`` simulations from ``board`` and return the root statistics."""
        return self.search_many([board])[0]

    def search_many(self, boards: list[Board]) -> list[SearchResult]:
        """One search per board, run in lockstep: simulation ``j`` of every search is played before
        simulation ``j + 1`` of any, so that the network evaluates the new leaves of all searches in one
        batch. Each search is the sequential PUCT search (6)-(7) of its own board."""
        boards = list(boards)
        for b in boards:
            if b.ply and is_win(b) or b.ply == 42:
                raise ValueError("board is a finished game")
        roots = [_Node(b) for b in boards]
        if not roots:
            return []
        self._evaluate(roots)
        use_se = self.s_weight > 0
        select, target, se = self._select, self.target, self.se
        K = len(roots)
        dmin, dmax = [math.inf] * K, [-math.inf] * K
        for _ in range(self.n_simulations):
            paths, acts_of, values, new = [], [], [0.0] * K, []
            for k, root in enumerate(roots):
                node, path, acts = root, [root], []
                while True:
                    if node.terminal:
                        values[k] = node.value
                        break
                    i = select(node, dmin[k], dmax[k]) if node.visits else node.P.index(max(node.P))
                    acts.append(i)
                    child = node.kids[i]
                    if child is None:
                        child = node.kids[i] = _Node(_play(node.board, node.moves[i]))
                        path.append(child)
                        if child.terminal:
                            values[k] = child.value
                        else:
                            new.append(k)
                        break
                    node = child
                    path.append(node)
                paths.append(path)
                acts_of.append(acts)
            if new:
                for k, v in zip(new, self._evaluate([paths[k][-1] for k in new])):
                    values[k] = v
            betas = se.on_boards([p[-1].board for p in paths], after_features, _score) if use_se else None
            for k in range(K):
                path, value = paths[k], values[k]
                # back up the value (negamax: each parent sees the child's value with the other sign)
                for parent, i in zip(reversed(path[:-1]), reversed(acts_of[k])):
                    value = -value
                    parent.N[i] += 1
                    parent.W[i] += value
                for n in path:
                    n.visits += 1
                if use_se:
                    beta, lo, hi = betas[k], dmin[k], dmax[k]
                    for n in path[1:]:          # the root's own score is not used
                        n.se_sum += beta
                        n.se_cnt += 1
                        d = abs(n.se_sum / n.se_cnt - target[n.ply])
                        if d < lo:
                            lo = d
                        if d > hi:
                            hi = d
                    dmin[k], dmax[k] = lo, hi
        results = []
        for root in roots:
            visits = np.array(root.N, dtype=float)
            q = np.where(visits > 0, np.array(root.W) / np.maximum(visits, 1), 0.0)
            best = int(np.lexsort((q, visits))[-1])
            results.append(SearchResult(np.array(root.moves), visits, q, int(root.moves[best])))
        return results

    def _select(self, node: _Node, dmin: float, dmax: float) -> int:
        """Equation (7) (Equation (6) when ``s_weight == 0``): the index of the child to visit."""
        N, n, W, P = node.visits, node.N, node.W, node.P
        c = C_INIT + math.log((1 + N + C_BASE) / C_BASE)
        sqrt_n = math.sqrt(N)
        total = sum(n)
        fpu = sum(W) / total if total else 0.0          # unvisited children: the parent's mean value
        penalise = self.s_weight > 0 and dmax > dmin
        kids = node.kids
        best, best_score = 0, -math.inf
        for i in range(len(n)):
            ni = n[i]
            q = W[i] / ni if ni else fpu
            score = (q + 1) / 2 + c * P[i] * sqrt_n / (1 + ni)
            if penalise:
                child = kids[i]
                if child is not None and child.se_cnt:
                    mean = child.se_sum / child.se_cnt
                    delta = self.target[child.ply]
                    d = (abs(mean - delta) - dmin) / (dmax - dmin)
                    if mean < delta:                     # weaker than the target: half the penalty
                        d *= 0.5
                    score -= self.s_weight * c * d * sqrt_n / (1 + ni)
            if score > best_score:
                best, best_score = i, score
        return best

    def __call__(self, board: Board, rng: np.random.Generator | None = None) -> int:
        """Play the most visited move (a player usable with :func:`play_match`)."""
        return self.search(board).move

    def moves(self, boards: list[Board], rng: np.random.Generator | None = None) -> list[int]:
        """The move of each board, the searches run in lockstep (:meth:`search_many`)."""
        return [r.move for r in self.search_many(boards)]


def sa_mcts_probabilities(visits: np.ndarray, z: float) -> np.ndarray:
    """Equation (8): SA-MCTS move probabilities from root visit counts and strength index ``z``."""
    visits = np.asarray(visits, dtype=float)
    if visits.ndim != 1 or visits.size == 0 or (visits < 0).any():
        raise ValueError("visits must be a non-empty 1-D array of non-negative counts")
    keep = (visits >= 0.1 * visits.max()) & (visits > 0)
    w = np.where(keep, np.where(keep, visits, 1.0) ** z, 0.0)
    return w / w.sum()


def target_by_move(candidates: Positions, beta: np.ndarray, rank: int, min_count: int = 10) -> np.ndarray:
    r"""The SE-MCTS target :math:`\delta_k`: mean strength score of rank ``rank``'s candidate moves at move
    number :math:`k = 0..42`; move numbers with fewer than ``min_count`` moves use the rank's overall mean."""
    beta = np.asarray(beta, dtype=float)
    if beta.shape != (len(candidates),):
        raise ValueError(f"beta must have one score per candidate position, got shape {beta.shape}")
    sel = candidates.rank == rank
    if not sel.any():
        raise ValueError(f"rank {rank} has no candidate positions")
    overall = beta[sel].mean()
    sums = np.bincount(candidates.ply[sel], weights=beta[sel], minlength=43)[:43]
    counts = np.bincount(candidates.ply[sel], minlength=43)[:43]
    return np.where(counts >= min_count, sums / np.maximum(counts, 1), overall)


def play_match(player, opponent, n_games: int, seed: int = 0) -> float:
    """Score of ``player`` against ``opponent`` over ``n_games`` games with alternating colours (``player``
    moves first in the even games; win 1, draw 1/2).

    The games are played in lockstep, one ply of every unfinished game at a time, so that a player with a
    ``moves(boards, rng)`` method (:class:`MCTS`, :class:`~.players.RankedPlayer`) chooses the moves of all
    its games at once; any other player maps ``(board, rng)`` to a column, game by game."""
    if isinstance(n_games, bool) or not isinstance(n_games, int) or n_games < 1:
        raise ValueError(f"n_games must be a positive int, got {n_games!r}")
    rng = np.random.default_rng(seed)
    boards = [new_board()] * n_games
    active, score, ply = list(range(n_games)), 0.0, 0
    while active:
        for who, side in ((player, ply % 2), (opponent, 1 - ply % 2)):
            games = [g for g in active if g % 2 == side]     # games in which `who` is to move
            if games:
                for g, col in zip(games, _choose(who, [boards[g] for g in games], rng)):
                    boards[g] = play(boards[g], int(col))
        still = []
        for g in active:
            b = boards[g]
            if is_win(b):
                score += float((b.ply - 1) % 2 == g % 2)      # the last mover won
            elif b.ply == 42:
                score += 0.5
            else:
                still.append(g)
        active, ply = still, ply + 1
    return score / n_games


def _choose(player, boards: list[Board], rng: np.random.Generator) -> list[int]:
    if hasattr(player, "moves"):
        return player.moves(boards, rng)
    return [player(b, rng) for b in boards]


def move_matching(search: MCTS, positions: Positions, boards: list[Board]) -> tuple[np.ndarray, list[SearchResult]]:
    """For each position (``boards`` are the positions *before* the human move ``positions.move``),
    whether the search's move equals the human move, and the search results (for SA-MCTS)."""
    if len(boards) != len(positions):
        raise ValueError("boards and positions must have the same length")
    results = search.search_many(boards)
    hit = np.array([r.move == m for r, m in zip(results, positions.move)], dtype=float)
    return hit, results
