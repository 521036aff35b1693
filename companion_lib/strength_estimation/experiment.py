"""End-to-end pipelines of the chapter's miniature (deterministic given their arguments).

The notebooks wrap them with ``companion_lib.common.disk_cache("strength_estimation").cache(...)`` so that the
derive, implement, reproduce and exercises notebooks share the generated games and trained networks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .estimator import RankClassifier, StrengthEstimator, accuracy_vs_games, player_statistics
from .players import (
    N_RANKS, GameRecords, Positions, RankedPlayer, boards_before, game_positions, generate_games,
    split_by_rank,
)
from .search import (
    MCTS, NumpyMLP, PolicyValueNet, move_matching, play_match, sa_mcts_probabilities, target_by_move,
    train_policy_value,
)

__all__ = ["World", "build_world", "rank_estimation_curves", "strength_adjustment", "move_matching_by_rank"]


@dataclass
class World:
    """Games of every rank split into training / candidate / query sets, and the trained networks."""

    train: GameRecords
    candidate: GameRecords
    query: GameRecords
    se: StrengthEstimator
    sl: RankClassifier
    pv: PolicyValueNet
    seed: int

    def positions(self, part: str) -> Positions:
        """The position table of ``part`` in {"train", "candidate", "query"}."""
        if part not in ("train", "candidate", "query"):
            raise ValueError(f"part must be 'train', 'candidate' or 'query', got {part!r}")
        return game_positions(getattr(self, part))


def build_world(seed: int, n_train: int = 400, n_candidate: int = 40, n_query: int = 60,
                steps: int = 800, hidden: int = 64, habits: bool = True, ranks=tuple(range(N_RANKS))) -> World:
    """Generate same-rank games for every rank, split them, and train SE, SL and the policy/value net.

    Paper scale (Go): about 10^5 training games per rank, 100 candidate and 900 query games per rank,
    130k SGD steps on a 20-block ResNet. ``hidden`` is the width of all three MLPs.
    """
    total = n_train + n_candidate + n_query
    games = generate_games(list(ranks), total, seed=seed, habits=habits)
    parts = split_by_rank(games, {"train": n_train, "candidate": n_candidate, "query": n_query}, seed=seed)
    train = game_positions(parts["train"])
    se = StrengthEstimator(hidden=hidden, steps=steps, seed=seed).fit(train)
    se.calibrate(game_positions(parts["candidate"]))
    sl = RankClassifier(hidden=hidden, steps=steps, seed=seed).fit(train)
    pv = train_policy_value(train, steps=steps, hidden=hidden, seed=seed)
    return World(parts["train"], parts["candidate"], parts["query"], se, sl, pv, seed)


def rank_estimation_curves(world: World, n_games, repeats: int = 300, seed: int = 0) -> dict[str, np.ndarray]:
    """Accuracy (len(n_games), R) of SE, SL_sum and SL_vote, plus SE's +-1-rank accuracy ("SE_pm1")."""
    q = world.positions("query")
    s, c, r = player_statistics(q, world.se.score(q.after))
    se = world.se
    out = {"SE": accuracy_vs_games(s, c, r, lambda S, C: se.predict_rank(S[:, 0] / C), n_games, repeats, seed)}
    out["SE_pm1"] = _pm1(s, c, r, se, n_games, repeats, seed)
    proba = world.sl.predict_proba(q.after)
    s, c, r = player_statistics(q, proba)
    out["SL_sum"] = accuracy_vs_games(s, c, r, lambda S, C: world.sl.ranks_[S.argmax(1)], n_games, repeats, seed)
    s, c, r = player_statistics(q, np.eye(proba.shape[1])[proba.argmax(1)])
    out["SL_vote"] = accuracy_vs_games(s, c, r, lambda S, C: world.sl.ranks_[S.argmax(1)], n_games, repeats, seed)
    return out


def _pm1(s, c, r, se, n_games, repeats, seed):
    """+-1 accuracy: a prediction within one rank of the truth counts as correct."""
    hits = []
    for truth in np.unique(r):
        keep = r == truth
        acc = accuracy_vs_games(s[keep], c[keep], r[keep],
                                lambda S, C, t=truth: np.where(np.abs(se.predict_rank(S[:, 0] / C) - t) <= 1, t, -99),
                                n_games, repeats, seed)
        hits.append(acc[:, 0])
    return np.stack(hits, axis=1)


def strength_adjustment(world: World, targets=(1, 3, 5, 7), opponent: int = 4, n_games: int = 24,
                        n_simulations: int = 32, s_weight: float = 2.0, seed: int = 0) -> dict[str, float]:
    """Score of SE-MCTS aimed at each target rank, and of plain MCTS, against a fixed synthetic rank.

    Paper (Go): 800 simulations, every rank as target, opponent rank 5 ("Figure 4" of the reviews).
    """
    cand = world.positions("candidate")
    beta = world.se.score(cand.after)
    pv, sen = NumpyMLP(world.pv.numpy_weights()), NumpyMLP(world.se.numpy_weights())
    opp = RankedPlayer(opponent)
    out = {"MCTS": play_match(MCTS(pv, n_simulations=n_simulations), opp, n_games, seed)}
    for t in targets:
        search = MCTS(pv, sen, target_by_move(cand, beta, t), s_weight=s_weight, n_simulations=n_simulations)
        out[f"SE-MCTS r{t}"] = play_match(search, opp, n_games, seed)
    return out


def move_matching_by_rank(world: World, n_positions: int = 30, n_simulations: int = 32, s_weight: float = 2.0,
                          z_grid=np.linspace(-2, 2, 17), seed: int = 0) -> dict[str, np.ndarray]:
    """Per-rank accuracy of predicting the held-out human move: plain MCTS, SE-MCTS (aimed at the true
    rank) and SA-MCTS (expected accuracy, best ``z`` per rank, an optimistic baseline).

    Returns arrays of length R under "MCTS", "SE-MCTS", "SA-MCTS" and the chosen "z".
    """
    rng = np.random.default_rng(seed)
    q = world.positions("query")
    cand = world.positions("candidate")
    beta = world.se.score(cand.after)
    pv, sen = NumpyMLP(world.pv.numpy_weights()), NumpyMLP(world.se.numpy_weights())
    ranks = np.unique(q.rank)
    out = {k: np.zeros(len(ranks)) for k in ("MCTS", "SE-MCTS", "SA-MCTS", "z")}
    plain = MCTS(pv, n_simulations=n_simulations)
    z_grid = np.asarray(z_grid, dtype=float)
    for k, r in enumerate(ranks):
        idx = rng.choice(np.flatnonzero(q.rank == r), size=n_positions, replace=False)
        pos = q.subset(idx)
        boards = boards_before(world.query, pos)
        hit, results = move_matching(plain, pos, boards)
        out["MCTS"][k] = hit.mean()
        expected = np.array([[sa_mcts_probabilities(res.visits, z)[list(res.moves).index(m)]
                              if m in res.moves else 0.0 for res, m in zip(results, pos.move)] for z in z_grid])
        best = int(expected.mean(1).argmax())
        out["SA-MCTS"][k], out["z"][k] = expected[best].mean(), z_grid[best]
        se_search = MCTS(pv, sen, target_by_move(cand, beta, int(r)), s_weight=s_weight, n_simulations=n_simulations)
        out["SE-MCTS"][k] = move_matching(se_search, pos, boards)[0].mean()
    return out
