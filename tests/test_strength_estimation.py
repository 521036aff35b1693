"""Tests of companion_lib.strength_estimation: Connect Four rules, synthetic players, the strength estimator,
the rank-prediction evaluation and (SE-)MCTS."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion_lib.strength_estimation import (
    MCTS, WINNING_LINES, GameRecords, NumpyMLP, PolicyValueNet, RankClassifier, RankedPlayer,
    StrengthEstimator, accuracy_vs_games, after_features, before_features, boards_before,
    bradley_terry_loss, game_positions, generate_games, has_four, heuristic_scores, is_legal, is_win,
    legal_moves, mlp, move_probabilities, new_board, play, play_game, play_match, play_sequence,
    player_statistics, sa_mcts_probabilities, split_by_rank, target_by_move, to_array,
    train_policy_value, winning_moves,
)
from companion_lib.strength_estimation.players import _W_OPP, _W_OWN


# -- Connect Four rules -----------------------------------------------------------------------------
def test_vertical_win():
    b = play_sequence([3, 4, 3, 4, 3, 4])
    assert not is_win(b)
    assert winning_moves(b) == [3]
    assert is_win(play(b, 3))


def test_horizontal_win():
    b = play_sequence([0, 0, 1, 1, 2, 2, 3])
    assert is_win(b)


def test_diagonal_wins_both_directions():
    # rising diagonal for the first player: (0,0) (1,1) (2,2) (3,3)
    up = play_sequence([0, 1, 1, 2, 2, 3, 2, 3, 3, 6, 3])
    assert is_win(up)
    # falling diagonal for the first player: (3,0) (2,1) (1,2) (0,3)
    down = play_sequence([6, 5, 5, 4, 4, 3, 4, 3, 3, 0, 3])
    assert is_win(down)


def test_no_wrap_between_columns():
    # stones at the top of column 0 and the bottom of column 1 are not connected
    b = play_sequence([0, 6, 0, 6, 0, 5, 1, 0, 1, 0, 1, 0])
    assert not has_four(b.mask ^ b.own) and not has_four(b.own)


def test_draw_fills_the_board_without_winner():
    order = [0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 0, 2, 3, 2, 3, 2, 3, 3, 2, 3, 2, 3, 2,
             4, 5, 4, 5, 4, 5, 5, 4, 5, 4, 5, 4, 6, 6, 6, 6, 6, 6]
    b = new_board()
    for c in order:
        assert not (b.ply and is_win(b))
        b = play(b, c)
    assert b.ply == 42 and not is_win(b) and legal_moves(b) == []


def test_illegal_moves_raise():
    b = play_sequence([2] * 6)
    assert not is_legal(b, 2)
    with pytest.raises(ValueError, match="full"):
        play(b, 2)
    with pytest.raises(ValueError, match="col"):
        play(b, 7)
    with pytest.raises(TypeError, match="col"):
        play(b, 1.0)
    with pytest.raises(ValueError, match="already won"):
        play_sequence([0, 1, 0, 1, 0, 1, 0, 1])


def test_to_array_and_features():
    b = play_sequence([3, 3, 4])
    grid = to_array(b)
    assert grid[0, 3] == 1 and grid[1, 3] == 2 and grid[0, 4] == 1 and grid.sum() == 4
    after = after_features([b])
    assert after.shape == (1, 168)
    planes = after.reshape(4, 6, 7)
    assert planes[0].sum() == 2 and planes[1].sum() == 1      # mover (first player) / opponent
    assert planes[2, 0, 4] == 1 and planes[3, 1, 3] == 1      # the stone just played / opponent's last
    before = before_features([b]).reshape(3, 6, 7)
    assert before[0].sum() == 1 and before[1].sum() == 2 and before[2, 0, 4] == 1


def test_winning_lines_count():
    assert WINNING_LINES.shape == (69, 4)


# -- synthetic players ------------------------------------------------------------------------------
def _direct_heuristic(board, col):
    """The after-move total of open-line scores, computed directly over all 69 lines."""
    after = play(board, col)
    grid = to_array(after).reshape(-1)
    me = 1 if board.ply % 2 == 0 else 2
    total = 0.0
    for line in WINNING_LINES:
        v = grid[line]
        mine, theirs = int((v == me).sum()), int(((v != me) & (v > 0)).sum())
        if theirs == 0:
            total += _W_OWN[mine]
        if mine == 0:
            total -= _W_OPP[theirs]
    return total


def test_heuristic_equals_direct_count_up_to_a_constant():
    rng = np.random.default_rng(0)
    for _ in range(10):
        b = new_board()
        for _ in range(rng.integers(0, 12)):
            moves = legal_moves(b)
            nb = play(b, int(rng.choice(moves)))
            if is_win(nb):
                break
            b = nb
        h = heuristic_scores([b.own], [b.mask], [-1])[0]
        moves = legal_moves(b)
        direct = np.array([_direct_heuristic(b, c) for c in moves])
        centre = np.array([0, 1, 2, 3, 2, 1, 0])[moves]
        diff = h[moves] - centre - direct
        assert np.allclose(diff, diff[0])


def test_move_probabilities_are_distributions_and_tactical():
    b = play_sequence([3, 0, 3, 0, 3])           # second player must block column 3
    for r in range(8):
        p = move_probabilities([b.own], [b.mask], [3], r)[0]
        assert p.shape == (7,) and np.isclose(p.sum(), 1) and (p >= 0).all()
    strong = RankedPlayer(7).probabilities(b)
    assert strong[3] == pytest.approx(1.0)      # rank 7 always checks tactics
    win_now = play_sequence([3, 0, 3, 0, 3, 0])  # first player wins in column 3
    assert RankedPlayer(7).probabilities(win_now)[3] == pytest.approx(1.0)
    assert RankedPlayer(0).probabilities(win_now)[3] == pytest.approx(1 / 7)


def test_player_rejects_bad_rank():
    with pytest.raises(ValueError, match="rank"):
        RankedPlayer(8)
    with pytest.raises(TypeError, match="rank"):
        RankedPlayer("3")
    with pytest.raises(ValueError, match="rank"):
        move_probabilities([0], [0], [-1], 9)


def test_generated_games_are_legal_and_consistent():
    g = generate_games([0, 7], 20, seed=1)
    assert len(g) == 40 and set(np.unique(g.rank)) == {0, 7}
    for i in range(len(g)):
        b = play_sequence(g.moves[i, :g.length[i]].tolist())
        if g.winner[i] >= 0:
            assert is_win(b) and (b.ply - 1) % 2 == g.winner[i]
        else:
            assert b.ply == 42 and not is_win(b)
    again = generate_games([0, 7], 20, seed=1)
    assert np.array_equal(g.moves, again.moves)
    with pytest.raises(ValueError, match="n_games"):
        generate_games([1], 0, seed=0)


def test_strong_rank_beats_random():
    rng = np.random.default_rng(0)
    wins = sum(play_game(RankedPlayer(7), RankedPlayer(0), rng)[1] == 0 for _ in range(10))
    assert wins >= 9
    assert play_match(RankedPlayer(6), RankedPlayer(0), 10, seed=0) >= 0.9


def test_positions_and_split():
    g = generate_games([1, 2], 10, seed=0)
    parts = split_by_rank(g, {"a": 6, "b": 4}, seed=0)
    assert len(parts["a"]) == 12 and len(parts["b"]) == 8
    p = game_positions(parts["b"])
    assert len(p) == int(parts["b"].length.sum())
    assert p.after.shape == (len(p), 168) and p.before.shape == (len(p), 126)
    boards = boards_before(parts["b"], p)
    assert [bb.ply for bb in boards] == list(p.ply - 1)
    assert np.allclose(before_features(boards), p.before)
    with pytest.raises(ValueError, match="sizes"):
        split_by_rank(g, {"a": 11}, seed=0)


# -- the strength estimator -------------------------------------------------------------------------
def test_bradley_terry_loss_matches_explicit_sum():
    torch.manual_seed(0)
    s = torch.randn(5, 4)
    explicit = 0.0
    for i in range(1, 4):
        explicit += (-torch.log_softmax(s[:, :i + 1], dim=1)[:, i]).mean()
    assert torch.allclose(bradley_terry_loss(s), explicit / 3)
    # two ranks: the logistic loss of the Bradley-Terry model
    two = torch.tensor([[0.0, 1.0]])
    assert torch.allclose(bradley_terry_loss(two), torch.log1p(torch.exp(torch.tensor(-1.0))))


def test_bradley_terry_loss_prefers_correct_order_and_rejects_bad_input():
    up = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    assert bradley_terry_loss(up) < bradley_terry_loss(up.flip(1))
    with pytest.raises(ValueError, match="group_scores"):
        bradley_terry_loss(torch.zeros(3))
    with pytest.raises(TypeError, match="group_scores"):
        bradley_terry_loss(np.zeros((2, 3)))


def test_mlp_rejects_bad_sizes():
    assert mlp(4, 1, 8, 1)(torch.zeros(2, 4)).shape == (2, 1)
    with pytest.raises(ValueError, match="hidden"):
        mlp(4, 1, 0)


@pytest.fixture(scope="module")
def toy_ladder():
    """Four well separated ranks, a small estimator and classifier trained on them."""
    g = generate_games([0, 2, 4, 7], 90, seed=3)
    parts = split_by_rank(g, {"train": 60, "candidate": 10, "query": 20}, seed=3)
    train, cand, query = (game_positions(parts[k]) for k in ("train", "candidate", "query"))
    se = StrengthEstimator(hidden=32, n_groups=8, n_positions=4, steps=250, lr=3e-3, seed=0).fit(train)
    se.calibrate(cand)
    sl = RankClassifier(hidden=32, batch_size=256, steps=250, lr=3e-3, seed=0).fit(train)
    return se, sl, train, cand, query, parts


def test_estimator_is_monotone_on_a_toy_ladder(toy_ladder):
    se, *_ = toy_ladder
    assert np.all(np.diff(se.rank_means_) > 0)
    assert np.mean(se.losses_[-25:]) < np.mean(se.losses_[:25])
    assert list(se.predict_rank(se.rank_means_)) == [0, 2, 4, 7]


def test_rank_prediction_improves_with_more_games(toy_ladder):
    se, sl, _, _, query, _ = toy_ladder
    s, c, r = player_statistics(query, se.score(query.after))
    assert s.shape == (len(np.unique(query.game)), 2, 1) and c.shape == s.shape[:2]
    acc = accuracy_vs_games(s, c, r, lambda S, C: se.predict_rank(S[:, 0] / C), [1, 10], 100, seed=0)
    assert acc.shape == (2, 4)
    assert acc[1].mean() > acc[0].mean() and acc[1].mean() >= 0.7
    proba = sl.predict_proba(query.after)
    assert proba.shape == (len(query), 4) and np.allclose(proba.sum(1), 1, atol=1e-5)
    with pytest.raises(ValueError, match="n_games"):
        accuracy_vs_games(s, c, r, lambda S, C: se.predict_rank(S[:, 0] / C), [21], 5)


def test_player_statistics_sums_per_side():
    g = generate_games([1], 3, seed=0)
    p = game_positions(g)
    s, c, r = player_statistics(p, np.ones(len(p)))
    assert np.array_equal(s[..., 0], c)
    assert c.sum() == len(p) and np.all(c[:, 0] - c[:, 1] >= 0)
    with pytest.raises(ValueError, match="per_move"):
        player_statistics(p, np.ones(len(p) + 1))


def test_estimator_validates_arguments():
    with pytest.raises(ValueError, match="steps"):
        StrengthEstimator(steps=0)
    with pytest.raises(ValueError, match="lr"):
        StrengthEstimator(lr=0.0)
    with pytest.raises(TypeError, match="positions"):
        StrengthEstimator().fit(np.zeros((3, 168)))
    with pytest.raises(RuntimeError, match="fit"):
        StrengthEstimator().score(np.zeros((1, 168)))


# -- search ---------------------------------------------------------------------------------------
def test_numpy_mlp_matches_torch():
    torch.manual_seed(0)
    net = PolicyValueNet(126, 16)
    x = torch.randn(3, 126)
    logits, v = net(x)
    out = NumpyMLP(net.numpy_weights())(x.numpy())
    assert np.allclose(out[:, :7], logits.detach().numpy(), atol=1e-5)
    assert np.allclose(np.tanh(out[:, 7]), v.detach().numpy(), atol=1e-5)


def test_mcts_finds_an_immediate_win():
    b = play_sequence([3, 0, 3, 0, 3, 6])
    assert MCTS(n_simulations=40).search(b).move == 3


def test_mcts_blocks_and_finds_a_forced_win():
    block = play_sequence([3, 0, 3, 0, 3])     # second player must block column 3
    assert MCTS(n_simulations=200).search(block).move == 3
    # first player has stones at columns 2 and 3 of the bottom row, with 1 and 4 open: playing
    # 1 or 4 makes an open three (a double threat), a win in three plies
    forced = play_sequence([2, 2, 3, 3])
    res = MCTS(n_simulations=800).search(forced)
    assert res.move in (1, 4)


def test_se_mcts_runs_and_validates():
    g = generate_games([1, 6], 20, seed=0)
    p = game_positions(g)
    se = StrengthEstimator(hidden=16, n_groups=4, n_positions=3, steps=30, seed=0).fit(p)
    beta = se.score(p.after)
    target = target_by_move(p, beta, 6)
    assert target.shape == (43,)
    search = MCTS(None, NumpyMLP(se.numpy_weights()), target, s_weight=2.0, n_simulations=30)
    res = search.search(new_board())
    assert res.visits.sum() == 30 and res.move in range(7)
    with pytest.raises(ValueError, match="s_weight"):
        MCTS(None, None, None, s_weight=1.0)
    with pytest.raises(ValueError, match="n_simulations"):
        MCTS(n_simulations=0)
    with pytest.raises(ValueError, match="finished"):
        MCTS().search(play_sequence([0, 1, 0, 1, 0, 1, 0]))


def test_search_many_runs_each_search_as_alone():
    # without networks nothing is batched numerically: lockstep searches equal sequential ones exactly
    boards = [new_board(), play_sequence([3, 0, 3, 0, 3]), play_sequence([2, 2, 3, 3]), play_sequence([3])]
    together = MCTS(n_simulations=60).search_many(boards)
    for b, res in zip(boards, together):
        alone = MCTS(n_simulations=60).search(b)
        assert np.array_equal(alone.visits, res.visits) and np.array_equal(alone.q, res.q)
        assert alone.move == res.move
    assert MCTS().search_many([]) == []
    with pytest.raises(ValueError, match="finished"):
        MCTS().search_many([new_board(), play_sequence([0, 1, 0, 1, 0, 1, 0])])


def test_batched_network_memo():
    torch.manual_seed(0)
    net = NumpyMLP(PolicyValueNet(126, 16).numpy_weights())
    boards = [new_board(), play_sequence([3]), play_sequence([3, 4]), play_sequence([3])]   # one repeated
    rows = net.on_boards(boards, before_features)
    direct = net(before_features(boards))
    assert np.allclose(np.stack(rows), direct, atol=1e-5)
    assert rows[1] is rows[3]                                   # one evaluation per distinct position
    again = net.on_boards(boards[::-1], before_features)
    assert all(a is b for a, b in zip(again, rows[::-1]))     # served from the memo
    derived = net.on_boards(boards, before_features, lambda b, row: float(row.sum()))
    assert derived[0] == pytest.approx(float(direct[0].sum()), abs=1e-4)


def test_play_match_alternates_colours_and_takes_batched_players():
    def leftmost(board, rng):
        return legal_moves(board)[0]
    # a deterministic player against itself: the same game every time, won by the same colour, so the
    # score over alternating colours is exactly one half
    assert play_match(leftmost, leftmost, 6, seed=0) == 0.5
    assert play_match(RankedPlayer(6), RankedPlayer(0), 20, seed=1) == play_match(RankedPlayer(6), RankedPlayer(0), 20, seed=1)
    assert play_match(RankedPlayer(0), RankedPlayer(7), 20, seed=2) <= 0.1
    with pytest.raises(ValueError, match="n_games"):
        play_match(leftmost, leftmost, 0)


def test_ranked_player_moves_follow_its_probabilities():
    board = play_sequence([3, 2, 3])
    player = RankedPlayer(2)
    cols = player.moves([board] * 20000, np.random.default_rng(0))
    freq = np.bincount(cols, minlength=7) / len(cols)
    assert np.allclose(freq, player.probabilities(board), atol=0.015)


def test_sa_mcts_probabilities():
    visits = np.array([50, 30, 2, 0])
    p1 = sa_mcts_probabilities(visits, 1.0)
    assert np.allclose(p1, [50 / 80, 30 / 80, 0, 0])
    p0 = sa_mcts_probabilities(visits, 0.0)
    assert np.allclose(p0, [0.5, 0.5, 0, 0])
    assert sa_mcts_probabilities(visits, 5.0)[0] > p1[0]
    with pytest.raises(ValueError, match="visits"):
        sa_mcts_probabilities(np.array([-1, 2]), 1.0)


def test_policy_value_training_learns_moves():
    g = generate_games([7], 40, seed=0)
    p = game_positions(g)
    net = train_policy_value(p, steps=150, batch_size=128, hidden=32, seed=0)
    logits, v = net(torch.from_numpy(p.before))
    acc = (logits.argmax(1).numpy() == p.move).mean()
    assert acc > 0.3 and v.shape == (len(p),)
    with pytest.raises(ValueError, match="positions"):
        train_policy_value(GameRecords)
