"""Unit tests of companion_lib.linear_representations (Merullo et al., ICLR 2025, in miniature).

Cross-check of the LRE code: the reference package ``linear-relational`` (0.6.2) cannot be installed
beside this book's pins (it downgrades transformers to 4.57 and tokenizers to 0.22), so the LRE is
checked against a hand computation instead: the mean of finite-difference Jacobians and the bias
formula of Eq. 1, computed coordinate by coordinate through activation patching.
"""

import numpy as np
import pytest
import torch

from companion_lib import linear_representations as lr
from companion_lib.tinylm import capture_activations, patch_activations

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def world():
    return lr.make_world(n_background=2, n_target=3, n_subjects=8, n_objects=2, intro_step=5, seed=0)


@pytest.fixture(scope="module")
def model(world):
    return lr.fact_lm(world, seed=0, n_embd=16, n_layer=2, n_head=2)


def test_world_layout_and_rates(world):
    assert world.n_relations == 5 and world.subject_tokens.shape == (5, 8) and world.object_tokens.shape == (5, 2)
    ids = np.concatenate([world.relation_tokens, world.subject_tokens.ravel(), world.object_tokens.ravel()])
    assert len(set(ids.tolist())) == ids.size and ids.max() < world.vocab_size
    assert world.answer_index.tolist() == [0, 1] * 4
    assert world.background.tolist() == [True, True, False, False, False]
    assert world.targets.tolist() == [2, 3, 4]
    med = np.median(world.rates, axis=1)
    assert med[3] / med[2] == pytest.approx(2, rel=0.6) and med[4] / med[3] == pytest.approx(2, rel=0.6)
    flat = lr.make_world(n_background=0, n_target=2, jitter=0.0)
    assert flat.rates[:, 0].tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="n_objects"):
        lr.make_world(n_subjects=2, n_objects=3)
    with pytest.raises(ValueError, match="n_target"):
        lr.make_world(n_target=0)


def test_token_stream_facts_and_curriculum(world):
    stream = lr.token_stream(world, steps=12, batch_size=4, seed=1)
    assert stream.shape == (12, 4, world.sequence_length())
    assert (stream[:, :, 0] == world.tokenizer.bos_token_id).all()
    rel_of = {int(t): r for r, t in enumerate(world.relation_tokens)}
    answer = {int(s): int(a) for s, a in zip(world.subject_tokens.ravel(), world.answer_tokens.ravel())}
    for t in range(12):
        for seq in stream[t].tolist():
            for k in range(world.facts_per_sequence):
                rel, subj, obj, dot = seq[1 + 4 * k: 5 + 4 * k]
                assert answer[subj] == obj and world.tokenizer.decode([dot]) == "."
                assert t >= world.intro_step or world.background[rel_of[rel]]
    sf = lr.token_stream(world, steps=2, batch_size=2, seed=1, order="subject-first")
    assert int(sf[0, 0, 1]) in answer and int(sf[0, 0, 2]) in rel_of
    assert torch.equal(stream, lr.token_stream(world, steps=12, batch_size=4, seed=1))
    with pytest.raises(ValueError, match="order"):
        lr.token_stream(world, 2, 2, order="sideways")


def test_fact_prompts(world):
    p = lr.fact_prompts(world, 2, [0, 3])
    assert world.tokenizer.decode(p[1]) == "<bos> R2 s2_3"
    assert world.tokenizer.decode(lr.fact_prompts(world, 2, [3], order="subject-first")[0]) == "<bos> s2_3 R2"
    with pytest.raises(ValueError, match="relation"):
        lr.fact_prompts(world, 5)
    with pytest.raises(ValueError, match="empty"):
        lr.fact_prompts(world, 0, [])
    with pytest.raises(ValueError, match="subjects"):
        lr.fact_prompts(world, 0, [8])


def test_subject_ids_rejects_unknown_words(world):
    assert lr.subject_ids(world.tokenizer, ["s0_1"]) == [int(world.subject_tokens[0, 1])]
    with pytest.raises(ValueError, match="not in the vocabulary"):
        lr.subject_ids(world.tokenizer, ["Miles_Davis"])


def test_cooccurrence_counts_match_a_loop(world):
    stream = lr.token_stream(world, steps=10, batch_size=3, seed=2)
    subj, obj = world.subject_tokens[:, 0], world.answer_tokens[:, 0]
    pairs, terms = lr.cooccurrence_counts(stream, subj, obj, world.vocab_size, checkpoints=[0, 4, 10])
    assert pairs.shape == (3, 5) and terms.shape == (3, world.vocab_size)
    assert (pairs[0] == 0).all()
    for k, stop in enumerate((0, 4, 10)):
        seqs = [set(x) for b in stream[:stop].tolist() for x in b]
        assert pairs[k].tolist() == [sum(a in s and b in s for s in seqs) for a, b in zip(subj, obj)]
        assert terms[k, world.tokenizer.bos_token_id] == len(seqs)
    with pytest.raises(ValueError, match="checkpoints"):
        lr.cooccurrence_counts(stream, subj, obj, world.vocab_size, checkpoints=[11])
    with pytest.raises(ValueError, match="vocab_size"):
        lr.cooccurrence_counts(stream, subj, obj, 3, checkpoints=[1])


def test_causality_threshold():
    assert lr.causality_threshold([2, 5, 9, 30], [0.0, 0.3, 0.95, 1.0]) == 9
    assert lr.causality_threshold([1, 2], [1.0, 1.0]) == 1
    assert np.isnan(lr.causality_threshold([1, 2], [0.0, 0.5]))
    with pytest.raises(ValueError, match="level"):
        lr.causality_threshold([1], [1.0], level=1.0)
    with pytest.raises(ValueError, match="same size"):
        lr.causality_threshold([1, 2], [1.0])


def test_thresholds_by_checkpoint_flags_unidentified_thresholds():
    t = lr.thresholds_by_checkpoint([1, 1, 1, 2, 2], [1, 10, 20, 5, 6], [0.0, 1.0, 1.0, 1.0, 1.0], level=0.9)
    assert t.step.tolist() == [1, 2]
    assert t.threshold.tolist() == [10.0, 5.0] and t["smallest count"].tolist() == [1.0, 5.0]
    assert t.identified.tolist() == [True, False]      # at step 2 every point is above the level
    none = lr.thresholds_by_checkpoint([1, 1], [1, 2], [0.0, 0.0])
    assert np.isnan(none.threshold.iloc[0]) and not none.identified.iloc[0]
    with pytest.raises(ValueError, match="same size"):
        lr.thresholds_by_checkpoint([1, 2], [1, 2, 3], [0.0, 1.0, 1.0])


def _finite_difference_jacobians(model, prompts, layer, top, s, position, eps=1e-3):
    """Central finite differences of the last position's state at ``top`` with respect to the state ``s``
    (one row per prompt) written at ``position`` of ``layer``: one (d, d) Jacobian per prompt."""
    n, d = s.shape
    Js = torch.zeros(n, d, d)
    for j in range(d):
        e = torch.zeros(d)
        e[j] = eps
        outs = []
        for sign in (1, -1):
            with torch.no_grad(), patch_activations(model, layer, s + sign * e, position=position), \
                    capture_activations(model, top) as acts:
                model(input_ids=prompts)
            outs.append(acts[top][:, -1])
        Js[:, :, j] = (outs[0] - outs[1]) / (2 * eps)
    return Js


def test_fit_lre_matches_a_hand_computed_lre(world, model):
    prompts = lr.fact_prompts(world, 0, [0, 1, 2])
    layer, top = 1, 2
    lre = lr.fit_lre(model, prompts, layer)
    s, o, _ = lr.lm_states(model, prompts, layer)
    Js = _finite_difference_jacobians(model, prompts, layer, top, s, position=-1)
    W = Js.mean(0)
    b = (o - torch.einsum("nij,nj->ni", Js, s)).mean(0)
    assert torch.allclose(lre.weight, W, atol=2e-3) and torch.allclose(lre.bias, b, atol=2e-3)
    one = lr.fit_lre(model, prompts[:1], layer)
    assert torch.allclose(one(s[:1]), o[:1], atol=1e-4)          # exact at its own fitting point


def test_cross_position_jacobian_matches_autograd_through_the_input_embeddings(world, model):
    """Subject-first prompts (``<bos> s R``): s at position 1, o at the last position (2), so the Jacobian
    crosses positions through attention. Reference: ``torch.autograd.functional.jacobian`` of an
    independent forward pass that feeds ``inputs_embeds`` (GPT-2 adds the position embedding, so the
    layer-0 state is ``wte + wpe``) and reads the input of the final norm with a plain forward pre-hook."""
    prompts = lr.fact_prompts(world, 1, [0, 1, 2], order="subject-first")
    assert prompts[:, 1].tolist() == world.subject_tokens[1, :3].tolist()
    lre = lr.fit_lre(model, prompts, 0, subject_position=1)
    s, o, _ = lr.lm_states(model, prompts, 0, subject_position=1)
    wte, wpe = model.transformer.wte.weight.detach(), model.transformer.wpe.weight.detach()
    captured = []
    hook = model.transformer.ln_f.register_forward_pre_hook(lambda mod, args: captured.append(args[0]))
    try:
        Js, os_ = [], []
        for ids in prompts:
            emb = wte[ids][None]                                  # (1, 3, d), position embedding not added

            def last_state(x):
                captured.clear()
                e = torch.cat([emb[:, :1], (x - wpe[1])[None, None], emb[:, 2:]], dim=1)
                model(inputs_embeds=e)
                return captured[0][0, -1]

            s0 = wte[ids[1]] + wpe[1]
            with torch.enable_grad():
                Js.append(torch.autograd.functional.jacobian(last_state, s0))
            with torch.no_grad():
                os_.append(last_state(s0))
    finally:
        hook.remove()
    J, o_ref = torch.stack(Js), torch.stack(os_)
    assert torch.allclose(s, wte[prompts[:, 1]] + wpe[1], atol=1e-6)
    assert torch.allclose(o, o_ref, atol=1e-5)
    assert J.abs().max() > 1e-3                                   # the cross-position path is not empty
    assert torch.allclose(lre.weight, J.mean(0), atol=1e-5)
    assert torch.allclose(lre.bias, (o_ref - torch.einsum("nij,nj->ni", J, s)).mean(0), atol=1e-5)
    # at the subject's own position (relation-first) the Jacobian is a different map
    rf = lr.fit_lre(model, lr.fact_prompts(world, 1, [0, 1, 2]), 0, subject_position=-1)
    assert not torch.allclose(rf.weight, lre.weight, atol=1e-3)


def test_cross_position_jacobian_matches_finite_differences_at_a_middle_layer(world, model):
    """The same cross-position Jacobian from the output of block 1, by central finite differences."""
    prompts = lr.fact_prompts(world, 2, [0, 3], order="subject-first")
    layer, top = 1, 2
    lre = lr.fit_lre(model, prompts, layer, subject_position=1)
    s, o, _ = lr.lm_states(model, prompts, layer, subject_position=1)
    Js = _finite_difference_jacobians(model, prompts, layer, top, s, position=1)
    assert Js.abs().max() > 1e-3
    assert torch.allclose(lre.weight, Js.mean(0), atol=2e-3)
    assert torch.allclose(lre.bias, (o - torch.einsum("nij,nj->ni", Js, s)).mean(0), atol=2e-3)


def test_lre_input_errors(world, model):
    prompts = lr.fact_prompts(world, 0, [0, 1])
    with pytest.raises(ValueError, match="beta"):
        lr.fit_lre(model, prompts, 1, beta=0.0)
    with pytest.raises(ValueError, match="empty"):
        lr.fit_lre(model, prompts[:0], 1)
    with pytest.raises(ValueError, match="vocabulary"):
        lr.fit_lre(model, torch.tensor([[2, 3, world.vocab_size]]), 1)
    with pytest.raises(ValueError, match="layer"):
        lr.fit_lre(model, prompts, 3)
    with pytest.raises(ValueError, match="past the sequence"):
        lr.fit_lre(model, prompts, 1, subject_position=3)
    with pytest.raises(ValueError, match="rank"):
        lr.low_rank_pinv(torch.eye(16), 17)
    with pytest.raises(ValueError, match="beta"):
        lr.select_beta(model, lr.fit_lre(model, prompts, 1), prompts, [1.0, -2.0])


def test_low_rank_pinv_and_exact_edit():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(6, 6, generator=g, dtype=torch.float64)
    assert torch.allclose(lr.low_rank_pinv(W, 6), torch.linalg.pinv(W), atol=1e-8)
    lre = lr.LRE(W.float(), torch.randn(6, generator=g), layer=1)
    s, o, o2 = (torch.randn(1, 6, generator=g) for _ in range(3))
    moved = lre(s + lr.edit_delta(lre, o, o2, 6)) - lre(s)
    assert torch.allclose(moved, o2 - o, atol=1e-4)
    u = torch.linalg.svd(W)[0][:, :2].float()
    assert torch.allclose(lre(s + lr.edit_delta(lre, o, o2, 2)) - lre(s), (o2 - o) @ u @ u.T, atol=1e-4)
    with pytest.raises(ValueError, match="beta"):
        lr.LRE(W.float(), torch.zeros(6), 1, beta=-1.0)


def test_faithfulness_and_causality_on_an_untrained_model(world, model):
    prompts = lr.fact_prompts(world, 1)
    lre = lr.fit_lre(model, prompts[:4], 1)
    faith = lr.faithfulness(model, lre, prompts)
    assert faith.dtype == torch.bool and faith.shape == (8,)
    answers = torch.as_tensor(world.answer_tokens[1])
    idx = torch.arange(8)
    hard, soft = lr.causality(model, lre, prompts, idx, idx, answers, answers, rank=8)
    _, _, logits = lr.lm_states(model, prompts, 1)
    assert torch.equal(hard, logits.argmax(-1) == answers)            # a null edit changes nothing
    assert not soft.any()                                             # p(o') > p(o) is false when o' = o
    src, tgt = lr.edit_pairs(world.answer_index)
    assert len(src) == 8 and all(world.answer_index[s] != world.answer_index[t] for s, t in zip(src, tgt))
    beta = lr.select_beta(model, lre, prompts, [1.0, 2.0])
    rank = lr.select_rank(model, lre, prompts, src, tgt, answers[src], answers[tgt], [2, 4])
    assert beta in (1.0, 2.0) and rank in (2, 4)
    with pytest.raises(ValueError, match="source and target"):
        lr.causality(model, lre, prompts, idx, idx[:2], answers, answers, rank=4)


def test_precomputed_states_give_the_same_measures(world, model):
    """Passing the LM's states (as evaluate_checkpoint does, to run each prompt set once) changes no number;
    states of other prompts are refused."""
    prompts = lr.fact_prompts(world, 2)
    lre = lr.fit_lre(model, prompts[:4], 1)
    states = lr.lm_states(model, prompts, 1)
    answers = torch.as_tensor(world.answer_tokens[2])
    src, tgt = lr.edit_pairs(world.answer_index)
    args = (model, lre, prompts, src, tgt, answers[src], answers[tgt])
    for a, b in zip(lr.causality(*args, rank=4), lr.causality(*args, rank=4, states=states)):
        assert torch.equal(a, b)
    assert torch.equal(lr.faithfulness(model, lre, prompts), lr.faithfulness(model, lre, prompts, states=states))
    assert lr.select_rank(*args, [2, 4, 8]) == lr.select_rank(*args, [2, 4, 8], states=states)
    assert lr.select_beta(model, lre, prompts, [1.0, 4.0]) == lr.select_beta(model, lre, prompts, [1.0, 4.0],
                                                                               states=states)
    with pytest.raises(ValueError, match="one row per prompt"):
        lr.faithfulness(model, lre, prompts[:3], states=states)


def test_rank_sweep_in_one_batch_equals_one_call_per_rank(world, model):
    """select_rank sends every rank's edits through the model in one batch, and an LRE decomposes its W once:
    the same outcomes as one causality call, and the same pseudo-inverse as one SVD, per rank."""
    from companion_lib.linear_representations.lre import _causality_at_ranks
    prompts = lr.fact_prompts(world, 3)
    lre = lr.fit_lre(model, prompts[:4], 1)
    answers = torch.as_tensor(world.answer_tokens[3])
    src, tgt = lr.edit_pairs(world.answer_index)
    args = (model, lre, prompts, src, tgt, answers[src], answers[tgt])
    ranks = [1, 2, 4, 8, 16]
    hard, soft = _causality_at_ranks(*args, ranks, -1, None)
    assert hard.shape == soft.shape == (len(ranks), len(src))
    for k, rank in enumerate(ranks):
        fresh = lr.LRE(lre.weight, lre.bias, lre.layer)                 # no cached SVD
        h, s = lr.causality(model, fresh, *args[2:], rank=rank)
        assert torch.equal(hard[k], h) and torch.equal(soft[k], s)
        assert torch.equal(lre.pinv(rank), lr.low_rank_pinv(lre.weight, rank))
    scores = [float(h.float().mean()) for h in hard]
    best = ranks[max(range(len(ranks)), key=lambda i: (scores[i], -ranks[i]))]
    assert lr.select_rank(*args, ranks) == best
    assert lre.with_beta(2.0)._svd_cache is lre._svd_cache             # the same W, the same SVD
    weight = lre.weight.clone()
    lre.weight.mul_(2.0)                                               # a changed W is decomposed again
    assert torch.equal(lre.pinv(4), lr.low_rank_pinv(lre.weight, 4))
    assert not torch.equal(lre.pinv(4), lr.low_rank_pinv(weight, 4))
    with pytest.raises(ValueError, match="rank"):
        lre.pinv(17)


def test_regression_beats_mean_baseline_on_learnable_data():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 5, (60, 2))
    y = 2 * x[:, 0] + 0.1 * rng.standard_normal(60)
    groups = np.repeat(np.arange(6), 10)
    rf = lr.regression_scores(y, lr.loro_predictions(x, y, groups, n_estimators=20))
    mean = lr.regression_scores(y, lr.mean_baseline_predictions(y, groups))
    assert rf["mae_ln"] < 0.5 * mean["mae_ln"] and 0 <= rf["within_2x"] <= 1
    assert lr.regression_scores(np.zeros(2), np.array([np.log(3), 0.0])) == {
        "mae_ln": pytest.approx(np.log(3) / 2), "within_2x": 0.5, "within_10x": 1.0}
    with pytest.raises(ValueError, match="two groups"):
        lr.loro_predictions(x, y, np.zeros(60))


def test_experiment_end_to_end_is_deterministic():
    kw = dict(steps=12, batch_size=8, checkpoints=(6, 12), n_embd=16, n_layer=2, layer=1, intro_step=3)
    a = lr.lre_experiment(0, **kw)
    b = lr.lre_experiment(0, **kw)
    ex = a["examples"]
    assert len(ex) == 2 * 12 * 8 and set(lr.FEATURES_LM + lr.FEATURES_LRE + ["cooc"]) <= set(ex.columns)
    assert ex.equals(b["examples"]) and a["losses"] == b["losses"] and sorted(a["states"]) == [6, 12]
    assert (ex[ex.step == 12].cooc.to_numpy() >= ex[ex.step == 6].cooc.to_numpy()).all()
    rel = lr.relation_table(ex)
    assert len(rel) == 2 * 12


def test_an_explicit_cpu_device_gives_the_same_numbers(world):
    """Issue 37: the models train and are measured on a device argument (the GPU when present); on the CPU,
    passing device="cpu" explicitly changes nothing, bit for bit, and results come back on the CPU."""
    from companion_lib.common import device, module_device

    kw = dict(steps=4, batch_size=4, checkpoints=(4,), n_embd=16, n_layer=2, layer=1, intro_step=2)
    a, b = lr.lre_experiment(0, **kw), lr.lre_experiment(0, device="cpu", **kw)
    assert a["examples"].equals(b["examples"]) and a["losses"] == b["losses"]
    assert all(torch.equal(a["states"][4][k], b["states"][4][k]) and b["states"][4][k].device.type == "cpu"
               for k in a["states"][4])
    stream = lr.token_stream(world, steps=3, batch_size=4, seed=0)
    m1, r1 = lr.train_fact_lm(world, stream, 0, (3,), n_embd=16, n_layer=2, n_head=2)
    m2, r2 = lr.train_fact_lm(world, stream, 0, (3,), n_embd=16, n_layer=2, n_head=2, device="cpu")
    assert module_device(m1) == device() and module_device(m2).type == "cpu" and r1.losses == r2.losses
    assert all(torch.equal(v, m2.state_dict()[k].to(v.device)) for k, v in m1.state_dict().items())
    # fact_lm builds on the CPU (the pages compare its outputs with CPU tensors) and moves where it is asked
    assert module_device(lr.fact_lm(world, n_embd=16, n_layer=2, n_head=2)).type == "cpu"
    meta = lr.fact_lm(world, n_embd=16, n_layer=2, n_head=2, device="meta")
    assert module_device(meta).type == "meta"
    # the LRE functions take CPU prompts for a model elsewhere and answer on the model's device
    s, o, logits = lr.lm_states(meta, lr.fact_prompts(world, 1), 1)
    assert s.device.type == o.device.type == logits.device.type == "meta" and logits.shape == (8, world.vocab_size)
