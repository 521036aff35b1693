r"""Strength estimation and human-like strength adjustment in games (Chen, Shih and Wu, ICLR 2025).

*Strength Estimation and Human-Like Strength Adjustment in Games*, https://openreview.net/forum?id=CvjXlsBLCX
(arXiv 2502.17109); official code https://github.com/rlglab/strength-estimator (GPL-3.0, not copied).

The chapter's miniature replaces Go by Connect Four and human ranks by graded synthetic players:

* :mod:`.connect4`  -- bitboard engine, legal moves, win detection, network input planes;
* :mod:`.players`   -- ranked synthetic players with habits, game generation, position tables;
* :mod:`.estimator` -- the strength estimator (Bradley-Terry ranking loss, Eqs. 1-4) and the
  supervised rank-classifier baselines SL_sum / SL_vote (Eq. 5);
* :mod:`.search`    -- PUCT MCTS with a policy/value network, SE-MCTS (Eq. 7) and SA-MCTS (Eq. 8);
* :mod:`.experiment` -- cached end-to-end pipelines used by the notebooks.
"""

from .connect4 import (
    COLS, ROWS, WINNING_LINES, Board, after_features, before_features, has_four, is_legal, is_win,
    legal_moves, new_board, play, play_sequence, to_array, winning_moves,
)
from .estimator import (
    GroupSampler, RankClassifier, StrengthEstimator, accuracy_vs_games, bradley_terry_loss, mlp,
    player_statistics,
)
from .players import (
    N_RANKS, RANK_HABIT, RANK_TACTICS, RANK_TEMPERATURE, GameRecords, Positions, RankedPlayer,
    boards_before, game_positions, generate_games, heuristic_scores, move_probabilities, play_game,
    self_play_batch, split_by_rank,
)
from .search import (
    MCTS, NumpyMLP, PolicyValueNet, SearchResult, move_matching, play_match, sa_mcts_probabilities,
    target_by_move, train_policy_value,
)
from .experiment import World, build_world, move_matching_by_rank, rank_estimation_curves, strength_adjustment
