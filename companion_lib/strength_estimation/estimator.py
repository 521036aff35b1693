r"""The strength estimator (SE) of Chen, Shih and Wu (ICLR 2025) and the supervised rank classifier.

*Strength Estimation and Human-Like Strength Adjustment in Games*, https://openreview.net/forum?id=CvjXlsBLCX
(arXiv 2502.17109). Official code: https://github.com/rlglab/strength-estimator (GPL-3.0; this module is an
independent re-implementation from the equations).

* Strength score of a state-action pair: a network :math:`\beta_\theta(s, a) \in \mathbb R`.
* Strength of a player from moves :math:`\{(s_j, a_j)\}_{j=1}^n`: the mean
  :math:`\bar\beta = \frac1n \sum_j \beta_\theta(s_j, a_j)`                                        (1)
* Bradley-Terry: :math:`P(r \succ r') = e^{\bar\beta_r} / (e^{\bar\beta_r} + e^{\bar\beta_{r'}})`,
  and for ranks sorted weakest to strongest :math:`r_1 < \dots < r_R`,
  :math:`P(r_i \text{ strongest among } r_1..r_i) = e^{\bar\beta_{r_i}} / \sum_{j \le i} e^{\bar\beta_{r_j}}`   (2)
* Ranking loss over a batch of :math:`B` groups, each holding :math:`n` positions of one player per rank:

  .. math:: \mathcal L_{\mathrm{BT}} = \frac{1}{R-1} \sum_{i=2}^{R} \frac1B \sum_{b=1}^{B}
            -\log \frac{\exp \bar\beta_{b,i}}{\sum_{j=1}^{i} \exp \bar\beta_{b,j}}                   (3)

* Rank prediction from :math:`n` games: candidate means :math:`\mu_r` (1) over each rank's candidate
  games; predict :math:`\hat r = \arg\min_r |\bar\beta_q - \mu_r|`                                  (4)
* Baseline (SL): a softmax rank classifier trained by cross-entropy on single positions, aggregated
  by the sum of probabilities (SL_sum) or a majority vote of per-move argmaxes (SL_vote).            (5)

The paper adds the policy and value losses of its shared AlphaZero trunk to (3); here the estimator is
a small MLP trained with (3) alone and the policy/value network is separate (:mod:`.search`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from .players import Positions

__all__ = [
    "mlp", "bradley_terry_loss", "GroupSampler", "StrengthEstimator", "RankClassifier",
    "player_statistics", "accuracy_vs_games",
]


def mlp(n_in: int, n_out: int, hidden: int = 128, depth: int = 2) -> nn.Sequential:
    """A ReLU multilayer perceptron ``n_in -> hidden x depth -> n_out``."""
    for name, v in (("n_in", n_in), ("n_out", n_out), ("hidden", hidden), ("depth", depth)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    layers: list[nn.Module] = []
    width = n_in
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, n_out))
    return nn.Sequential(*layers)


def bradley_terry_loss(group_scores: torch.Tensor) -> torch.Tensor:
    r"""Equation (3): the sequential softmax ranking loss.

    ``group_scores`` has shape (B, R): the mean strength score :math:`\bar\beta_{b,i}` of group ``b``'s
    player of the ``i``-th weakest rank. For every :math:`i \ge 2` the loss asks rank :math:`i` to be the
    strongest among ranks :math:`1..i`; the ``R-1`` softmax terms are averaged. Computed stably with
    :func:`torch.logcumsumexp`.
    """
    if not isinstance(group_scores, torch.Tensor):
        raise TypeError(f"group_scores must be a torch.Tensor, got {type(group_scores).__name__}")
    if group_scores.ndim != 2 or group_scores.shape[1] < 2:
        raise ValueError(f"group_scores must have shape (B, R) with R >= 2, got {tuple(group_scores.shape)}")
    lse = torch.logcumsumexp(group_scores, dim=1)
    return (lse[:, 1:] - group_scores[:, 1:]).mean()


@dataclass
class GroupSampler:
    """Draws training batches for (3): per group and rank, one player (a game and a side) and ``n``
    of that player's positions (with replacement), like the official data loader."""

    positions: Positions
    ranks: np.ndarray = field(init=False)
    _units: list = field(init=False, repr=False)

    def __post_init__(self):
        p = self.positions
        self.ranks = np.unique(p.rank)
        if len(self.ranks) < 2:
            raise ValueError("positions must hold at least two ranks")
        unit = p.game * 2 + p.side                      # one "player" = one side of one game
        order = np.argsort(unit, kind="stable")         # rows of a player are contiguous in `order`
        self._units = []
        for r in self.ranks:
            sel = order[p.rank[order] == r]
            _, start, count = np.unique(unit[sel], return_index=True, return_counts=True)
            self._units.append((sel, start, count))

    def sample(self, n_groups: int, n_positions: int, rng: np.random.Generator) -> np.ndarray:
        """Row indices into ``positions``, shape (n_groups, R, n_positions), ranks weakest first."""
        out = np.empty((n_groups, len(self.ranks), n_positions), dtype=np.int64)
        for k, (sel, start, count) in enumerate(self._units):
            u = rng.integers(len(start), size=n_groups)
            offs = (rng.random((n_groups, n_positions)) * count[u][:, None]).astype(np.int64)
            out[:, k, :] = sel[start[u][:, None] + offs]
        return out


def _check_positions(positions) -> Positions:
    if not isinstance(positions, Positions):
        raise TypeError(f"positions must be a Positions table, got {type(positions).__name__}")
    if len(positions) == 0:
        raise ValueError("positions must not be empty")
    return positions


class StrengthEstimator:
    """Strength estimator, scikit-learn style: ``fit`` (3), ``score`` (the network), ``calibrate`` and
    ``predict_rank`` (4).

    Parameters
    ----------
    hidden, depth: the MLP's width and number of hidden layers.
    n_groups, n_positions: groups per batch (B) and positions per player (n); paper 32 and 7.
    steps, lr: Adam steps and learning rate.
    seed: seeds the network's initialisation and the batch sampler.
    """

    def __init__(self, hidden: int = 128, depth: int = 2, n_groups: int = 16, n_positions: int = 5,
                 steps: int = 1000, lr: float = 1e-3, seed: int = 0):
        for name, v in (("n_groups", n_groups), ("n_positions", n_positions), ("steps", steps)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr!r}")
        self.hidden, self.depth, self.n_groups, self.n_positions = hidden, depth, n_groups, n_positions
        self.steps, self.lr, self.seed = steps, lr, seed
        self.net_: nn.Sequential | None = None
        self.losses_: list[float] = []
        self.rank_means_: np.ndarray | None = None
        self.ranks_: np.ndarray | None = None

    def fit(self, positions: Positions) -> "StrengthEstimator":
        """Minimise the ranking loss (3) on batches drawn by :class:`GroupSampler`."""
        positions = _check_positions(positions)
        sampler = GroupSampler(positions)
        rng = np.random.default_rng(self.seed)
        torch.manual_seed(self.seed)
        self.net_ = mlp(positions.after.shape[1], 1, self.hidden, self.depth)
        opt = torch.optim.Adam(self.net_.parameters(), lr=self.lr)
        x_all = torch.from_numpy(positions.after)
        self.losses_ = []
        for _ in range(self.steps):
            idx = torch.from_numpy(sampler.sample(self.n_groups, self.n_positions, rng))
            beta = self.net_(x_all[idx.reshape(-1)]).reshape(idx.shape)  # (B, R, n)
            loss = bradley_terry_loss(beta.mean(dim=2))
            opt.zero_grad()
            loss.backward()
            opt.step()
            self.losses_.append(float(loss.detach()))
        self.ranks_ = sampler.ranks
        return self

    def _net(self) -> nn.Sequential:
        if self.net_ is None:
            raise RuntimeError("call fit() first")
        return self.net_

    def score(self, after: np.ndarray) -> np.ndarray:
        r"""Strength scores :math:`\beta(s, a)` of rows of after-move features, shape (N,)."""
        after = np.asarray(after, dtype=np.float32)
        if after.ndim != 2:
            raise ValueError(f"after must be a 2-D feature array, got shape {after.shape}")
        with torch.no_grad():
            return self._net()(torch.from_numpy(after)).squeeze(1).numpy()

    def calibrate(self, candidates: Positions) -> np.ndarray:
        r"""Candidate means :math:`\mu_r` of (4): the mean score of every move of each rank's candidate games."""
        candidates = _check_positions(candidates)
        beta = self.score(candidates.after)
        self.ranks_ = np.unique(candidates.rank)
        self.rank_means_ = np.array([beta[candidates.rank == r].mean() for r in self.ranks_])
        return self.rank_means_

    def predict_rank(self, mean_scores) -> np.ndarray:
        r"""Equation (4): the rank whose candidate mean is nearest to each player's mean score."""
        if self.rank_means_ is None:
            raise RuntimeError("call calibrate() first")
        m = np.asarray(mean_scores, dtype=float)
        return self.ranks_[np.abs(m[..., None] - self.rank_means_).argmin(-1)]

    def numpy_weights(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The network's (W, b) pairs as NumPy arrays, for fast inference inside the tree search."""
        return [(m.weight.detach().numpy().copy(), m.bias.detach().numpy().copy())
                for m in self._net() if isinstance(m, nn.Linear)]


class RankClassifier:
    """The supervised baseline (5): a softmax over ranks trained by cross-entropy on single positions."""

    def __init__(self, hidden: int = 128, depth: int = 2, batch_size: int = 512, steps: int = 1000,
                 lr: float = 1e-3, seed: int = 0):
        for name, v in (("batch_size", batch_size), ("steps", steps)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        self.hidden, self.depth, self.batch_size, self.steps, self.lr, self.seed = (
            hidden, depth, batch_size, steps, lr, seed)
        self.net_: nn.Sequential | None = None
        self.ranks_: np.ndarray | None = None

    def fit(self, positions: Positions) -> "RankClassifier":
        positions = _check_positions(positions)
        self.ranks_ = np.unique(positions.rank)
        y = torch.from_numpy(np.searchsorted(self.ranks_, positions.rank))
        x = torch.from_numpy(positions.after)
        rng = np.random.default_rng(self.seed)
        torch.manual_seed(self.seed)
        self.net_ = mlp(x.shape[1], len(self.ranks_), self.hidden, self.depth)
        opt = torch.optim.Adam(self.net_.parameters(), lr=self.lr)
        for _ in range(self.steps):
            idx = torch.from_numpy(rng.integers(len(y), size=self.batch_size))
            loss = nn.functional.cross_entropy(self.net_(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        return self

    def predict_proba(self, after: np.ndarray) -> np.ndarray:
        """Per-position rank probabilities, shape (N, R)."""
        if self.net_ is None:
            raise RuntimeError("call fit() first")
        with torch.no_grad():
            return torch.softmax(self.net_(torch.from_numpy(np.asarray(after, np.float32))), 1).numpy()


def player_statistics(positions: Positions, per_move: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sum a per-move statistic over each side of each game (a *player-game*).

    ``per_move`` is (N,) or (N, K). Returns ``sums`` (G, 2, K), ``counts`` (G, 2) and ``rank`` (G,),
    one row per game of ``positions`` (in increasing game index), side 0 = first player.
    """
    positions = _check_positions(positions)
    v = np.asarray(per_move, dtype=float)
    if v.shape[0] != len(positions):
        raise ValueError(f"per_move must have one row per position ({len(positions)}), got {v.shape[0]}")
    v = v.reshape(len(positions), -1)
    games, g = np.unique(positions.game, return_inverse=True)
    sums = np.zeros((len(games), 2, v.shape[1]))
    np.add.at(sums, (g, positions.side), v)
    counts = np.zeros((len(games), 2))
    np.add.at(counts, (g, positions.side), 1.0)
    rank = np.zeros(len(games), dtype=np.int64)
    rank[g] = positions.rank
    return sums, counts, rank


def accuracy_vs_games(sums: np.ndarray, counts: np.ndarray, rank: np.ndarray, decide,
                      n_games, repeats: int, seed: int = 0) -> np.ndarray:
    r"""Rank-prediction accuracy from :math:`n` games, for every :math:`n` in ``n_games``.

    As in the paper's evaluator: for each true rank and :math:`n`, ``repeats`` times draw :math:`n`
    distinct query games of that rank and one side of each at random, add the statistics of those
    player-games (``sums``, ``counts`` from :func:`player_statistics`) and call
    ``decide(total_sums (repeats, K), total_counts (repeats,)) -> predicted ranks``.
    Returns the accuracies, shape (len(n_games), R).
    """
    n_games = [int(n) for n in np.atleast_1d(n_games)]
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    sums, counts, rank = np.asarray(sums, float), np.asarray(counts, float), np.asarray(rank)
    if sums.ndim != 3 or sums.shape[1] != 2 or counts.shape != sums.shape[:2] or rank.shape != sums.shape[:1]:
        raise ValueError("sums, counts, rank must have shapes (G, 2, K), (G, 2), (G,)")
    ranks = np.unique(rank)
    rng = np.random.default_rng(seed)
    acc = np.zeros((len(n_games), len(ranks)))
    for k, r in enumerate(ranks):
        games = np.flatnonzero(rank == r)
        for i, n in enumerate(n_games):
            if not 1 <= n <= len(games):
                raise ValueError(f"n_games must lie in 1..{len(games)} (games of rank {r}), got {n}")
            pick = games[np.argsort(rng.random((repeats, len(games))), axis=1)[:, :n]]
            side = rng.integers(2, size=pick.shape)
            pred = decide(sums[pick, side].sum(1), counts[pick, side].sum(1))
            acc[i, k] = np.mean(np.asarray(pred) == r)
    return acc
