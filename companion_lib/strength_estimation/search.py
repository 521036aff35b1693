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
    COLS, Board, _as_uint, _bits, is_win, legal_moves, new_board, play,
)
from .estimator import mlp
from .players import Positions, play_game

__all__ = [
    "NumpyMLP", "PolicyValueNet", "train_policy_value", "MCTS", "SearchResult", "sa_mcts_probabilities",
    "target_by_move", "play_match", "move_matching",
]

C_INIT, C_BASE = 1.25, 19652.0


class NumpyMLP:
    """A ReLU MLP evaluated in NumPy from a list of ``(W, b)`` pairs (torch's ``Linear`` layout)."""

    def __init__(self, weights: list[tuple[np.ndarray, np.ndarray]]):
        if not weights:
            raise ValueError("weights must be a non-empty list of (W, b) pairs")
        self.layers = [(np.ascontiguousarray(W.T, dtype=np.float32), b.astype(np.float32)) for W, b in weights]

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


def _before_one(b: Board) -> np.ndarray:
    return _bits(_as_uint((b.own, b.mask ^ b.own, b.last))).reshape(1, -1)


def _after_one(b: Board) -> np.ndarray:
    return _bits(_as_uint((b.mask ^ b.own, b.own, b.last, b.prev))).reshape(1, -1)


class _Node:
    __slots__ = ("board", "moves", "P", "N", "W", "children", "visits", "terminal", "value",
                 "se_sum", "se_cnt")

    def __init__(self, board: Board):
        self.board = board
        self.children: dict[int, _Node] = {}
        self.visits = 0
        self.se_sum = 0.0
        self.se_cnt = 0
        self.P = None
        if board.ply and is_win(board):
            self.terminal, self.value = True, -1.0   # the player to move has lost
        elif board.ply == 42:
            self.terminal, self.value = True, 0.0
        else:
            self.terminal, self.value = False, 0.0
            self.moves = legal_moves(board)
            self.N = [0] * len(self.moves)          # plain lists: faster than NumPy for <= 7 children
            self.W = [0.0] * len(self.moves)


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
    def _evaluate(self, node: _Node) -> float:
        """Set the node's priors; return its value for the player to move."""
        k = len(node.moves)
        if self.pv is None:
            node.P = [1.0 / k] * k
            return 0.0
        out = self.pv(_before_one(node.board))[0]
        logits = out[node.moves]
        p = np.exp(logits - logits.max())
        node.P = (p / p.sum()).tolist()
        return math.tanh(float(out[COLS]))

    # -- search -----------------------------------------------------------------------------------
    def search(self, board: Board) -> SearchResult:
        """Run ``n_simulations`` simulations from ``board`` and return the root statistics."""
        if board.ply and is_win(board) or board.ply == 42:
            raise ValueError("board is a finished game")
        root = _Node(board)
        self._evaluate(root)
        use_se = self.s_weight > 0
        dmin, dmax = math.inf, -math.inf
        for _ in range(self.n_simulations):
            node, path, acts = root, [root], []
            while True:
                if node.terminal:
                    value = node.value
                    break
                i = self._select(node, dmin, dmax) if node.visits else node.P.index(max(node.P))
                a = node.moves[i]
                acts.append(i)
                child = node.children.get(a)
                if child is None:
                    child = node.children[a] = _Node(play(node.board, a))
                    path.append(child)
                    value = child.value if child.terminal else self._evaluate(child)
                    break
                node = child
                path.append(node)
            # back up the value (negamax: each parent sees the child's value with the other sign)
            for parent, i in zip(reversed(path[:-1]), reversed(acts)):
                value = -value
                parent.N[i] += 1
                parent.W[i] += value
            for n in path:
                n.visits += 1
            if use_se:
                beta = float(self.se(_after_one(path[-1].board))[0, 0])
                for n in path[1:]:          # the root's own score is not used
                    n.se_sum += beta
                    n.se_cnt += 1
                    d = abs(n.se_sum / n.se_cnt - self.target[n.board.ply])
                    dmin, dmax = min(dmin, d), max(dmax, d)
        visits = np.array(root.N, dtype=float)
        q = np.where(visits > 0, np.array(root.W) / np.maximum(visits, 1), 0.0)
        best = int(np.lexsort((q, visits))[-1])
        return SearchResult(np.array(root.moves), visits, q, int(root.moves[best]))

    def _select(self, node: _Node, dmin: float, dmax: float) -> int:
        """Equation (7) (Equation (6) when ``s_weight == 0``): the index of the child to visit."""
        N, n, W, P = node.visits, node.N, node.W, node.P
        c = C_INIT + math.log((1 + N + C_BASE) / C_BASE)
        sqrt_n = math.sqrt(N)
        total = sum(n)
        fpu = sum(W) / total if total else 0.0          # unvisited children: the parent's mean value
        penalise = self.s_weight > 0 and dmax > dmin
        best, best_score = 0, -math.inf
        for i, a in enumerate(node.moves):
            q = W[i] / n[i] if n[i] else fpu
            score = (q + 1) / 2 + c * P[i] * sqrt_n / (1 + n[i])
            if penalise:
                child = node.children.get(a)
                if child is not None and child.se_cnt:
                    mean = child.se_sum / child.se_cnt
                    delta = self.target[child.board.ply]
                    d = (abs(mean - delta) - dmin) / (dmax - dmin)
                    if mean < delta:                     # weaker than the target: half the penalty
                        d *= 0.5
                    score -= self.s_weight * c * d * sqrt_n / (1 + n[i])
            if score > best_score:
                best, best_score = i, score
        return best

    def __call__(self, board: Board, rng: np.random.Generator | None = None) -> int:
        """Play the most visited move (a player usable with :func:`play_match`)."""
        return self.search(board).move


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
    """Score of ``player`` against ``opponent`` over ``n_games`` games with alternating colours
    (win 1, draw 1/2). Players map ``(board, rng)`` to a column."""
    if isinstance(n_games, bool) or not isinstance(n_games, int) or n_games < 1:
        raise ValueError(f"n_games must be a positive int, got {n_games!r}")
    rng = np.random.default_rng(seed)
    score = 0.0
    for g in range(n_games):
        side = g % 2
        first, second = (player, opponent) if side == 0 else (opponent, player)
        _, w = play_game(first, second, rng)
        score += 0.5 if w < 0 else float(w == side)
    return score / n_games


def move_matching(search: MCTS, positions: Positions, boards: list[Board]) -> tuple[np.ndarray, list[SearchResult]]:
    """For each position (``boards`` are the positions *before* the human move ``positions.move``),
    whether the search's move equals the human move, and the search results (for SA-MCTS)."""
    if len(boards) != len(positions):
        raise ValueError("boards and positions must have the same length")
    results = [search.search(b) for b in boards]
    hit = np.array([r.move == m for r, m in zip(results, positions.move)], dtype=float)
    return hit, results
