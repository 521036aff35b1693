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


# -- issue 39: the full-scale path on tiny real-class checkpoints, and the paper's relation files -------------

import json  # noqa: E402
from pathlib import Path  # noqa: E402

#: two relations in the RELATIONS data set's format (Hernandez et al. 2024), over a word-level vocabulary
REL_CAPITAL = {"name": "country capital city", "prompt_templates": ["the capital of {} is"],
               "properties": {"relation_type": "factual"},
               "samples": [{"subject": f"land {i}" if i == 3 else f"land{i}", "object": f"city{i % 3}"}
                           for i in range(18)]}
REL_INSTRUMENT = {"name": "person plays instrument", "prompt_templates": ["{} plays the"],
                  "samples": [{"subject": f"musician{i}", "object": f"horn{i % 2}"} for i in range(17)]}
FS_WORDS = (["the", "capital", "of", "is", "plays", "land"] + [f"land{i}" for i in range(18)] + ["3"]
            + [f"city{i}" for i in range(3)] + [f"musician{i}" for i in range(17)] + ["horn0", "horn1"])
FS_SIZES = dict(n_shots=2, n_fit=3, n_test=4, ranks=(4, 8), betas=(1.0, 2.0), chunk=5)


def write_relations(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rel in (REL_CAPITAL, REL_INSTRUMENT):
        (folder / (rel["name"].replace(" ", "_") + ".json")).write_text(json.dumps(rel))
    return folder


def write_counts(path: Path, checkpoints=(None,)) -> Path:
    lines = []
    for k, ck in enumerate(checkpoints):
        for rel in (REL_CAPITAL, REL_INSTRUMENT):
            for i, s in enumerate(rel["samples"]):
                row = {"relation": rel["name"], "subject": s["subject"], "object": s["object"],
                       "count": (10 ** (i % 5)) * (k + 1)}
                if ck is not None:
                    row["checkpoint"] = ck
                lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_load_relations_reads_the_real_format(tmp_path):
    rels = lr.load_relations(write_relations(tmp_path / "rel"))
    assert [r.name for r in rels] == ["country capital city", "person plays instrument"]
    assert rels[0].templates == ("the capital of {} is",) and rels[0].samples[3] == ("land 3", "city0")
    assert rels[0].properties == {"relation_type": "factual"} and len(rels[1].samples) == 17
    one = lr.load_relations(tmp_path / "rel" / "person_plays_instrument.json")
    assert [r.name for r in one] == ["person plays instrument"]


@pytest.mark.parametrize("content, problem", [
    ("{not json", "not JSON"),
    (json.dumps([1, 2]), "list at the top level"),
    (json.dumps({"name": "r", "samples": [{"subject": "a", "object": "b"}]}), "missing prompt_templates"),
    (json.dumps({"name": "r", "prompt_templates": ["no slot"], "samples": [{"subject": "a", "object": "b"}]}),
     "prompt_templates"),
    (json.dumps({"name": "r", "prompt_templates": ["{} is"], "samples": [{"subj": "a", "obj": "b"}]}), "samples"),
])
def test_load_relations_names_the_problem_and_the_format(tmp_path, content, problem):
    (tmp_path / "bad.json").write_text(content)
    with pytest.raises(ValueError, match=problem) as info:
        lr.load_relations(tmp_path)
    assert "bad.json" in str(info.value) and '"prompt_templates"' in str(info.value)   # the expected format


def test_load_relations_refuses_missing_empty_and_duplicate_data(tmp_path):
    with pytest.raises(ValueError, match="no relation data"):
        lr.load_relations(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no .json relation files"):
        lr.load_relations(tmp_path / "empty")
    write_relations(tmp_path / "a")
    (tmp_path / "a" / "copy.json").write_text(json.dumps(REL_CAPITAL))
    with pytest.raises(ValueError, match="unique"):
        lr.load_relations(tmp_path / "a")
    with pytest.raises(TypeError, match="data must be"):
        lr.load_relations(3)


def test_load_counts_reads_json_lines_and_rejects_other_formats(tmp_path):
    rels = lr.load_relations(write_relations(tmp_path / "rel"))
    counts = lr.load_counts(write_counts(tmp_path / "c.jsonl", ["step1", "main"]), rels)
    assert len(counts) == 2 * 35 and list(counts.columns) == ["relation", "subject", "object", "count", "checkpoint"]
    assert set(counts.checkpoint) == {"step1", "main"} and counts["count"].min() == 1
    assert lr.load_counts(write_counts(tmp_path / "d.jsonl")).checkpoint.isna().all()
    bad = tmp_path / "bad.jsonl"
    for text, match in [("relation,subject,object,count\n", "not JSON"),
                        (json.dumps({"relation": "r", "subject": "s", "object": "o", "count": -1}), "not a count"),
                        (json.dumps({"relation": "r", "subject": "s", "count": 3}), "not a count"), ("\n", "no counts")]:
        bad.write_text(text)
        with pytest.raises(ValueError, match=match) as info:
            lr.load_counts(bad)
        assert "JSON lines" in str(info.value)
    bad.write_text(json.dumps({"relation": "unknown", "subject": "s", "object": "o", "count": 3}))
    with pytest.raises(ValueError, match="unknown"):
        lr.load_counts(bad, rels)
    with pytest.raises(ValueError, match="no counts file"):
        lr.load_counts(tmp_path / "none.jsonl")


def test_icl_prompt_puts_the_subject_where_the_tokenizer_finds_it():
    from companion_lib.linear_representations.fullscale import _encode
    from companion_lib.tinylm import word_tokenizer

    text, end = lr.icl_prompt("the capital of {} is", "land 3", [("land0", "city0"), ("land1", "city1")])
    assert text == "the capital of land0 is city0\nthe capital of land1 is city1\nthe capital of land 3 is"
    assert text[:end].endswith("land 3")
    tok = word_tokenizer(FS_WORDS)
    ids, pos = _encode(tok, text, end)
    assert tok.convert_ids_to_tokens(ids[0].tolist())[pos] == "3" and pos == ids.shape[1] - 2
    assert lr.object_token(tok, "city2") == tok.convert_tokens_to_ids("city2")
    with pytest.raises(ValueError, match="no token"):
        lr.object_token(tok, "Paris")
    with pytest.raises(ValueError, match="template"):
        lr.icl_prompt("no slot", "x")


@pytest.mark.parametrize("arch", ["gpt2", "neox", "olmo", "olmo2", "llama"])
def test_subject_jacobian_equals_hidden_jacobian_on_every_real_class(tiny_real_lm, arch):
    """The chunked Jacobian of the full-scale path is tinylm's one-call Jacobian, on each class; hooks go."""
    from companion_lib.linear_representations.fullscale import _encode
    from companion_lib.tinylm import hidden_jacobian, layer_adapter, load_causal_lm

    loaded = load_causal_lm(tiny_real_lm(arch, FS_WORDS), device="cpu")
    model, tok = loaded.model, loaded.tokenizer
    ids, pos = _encode(tok, *lr.icl_prompt("the capital of {} is", "land 3", [("land0", "city0")]))
    J, s, o = lr.subject_jacobian(model, ids, 1, pos, chunk=5)
    ref, s_ref, o_ref = hidden_jacobian(model, ids, 1, 2, src_position=pos, dst_position=-1)
    assert J.shape == (16, 16) and J.dtype == torch.float32
    torch.testing.assert_close(J, ref[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(s, s_ref[0]) and torch.testing.assert_close(o, o_ref[0])
    blocks = layer_adapter(model).blocks
    assert all(not b._forward_hooks and not b._forward_pre_hooks for b in blocks)
    with pytest.raises(ValueError, match="chunk"):
        lr.subject_jacobian(model, ids, 1, pos, chunk=0)


def test_measure_relation_on_a_tiny_olmo(tiny_real_lm, tmp_path):
    from companion_lib.tinylm import load_causal_lm

    loaded = load_causal_lm(tiny_real_lm("olmo", FS_WORDS), device="cpu")
    rel = lr.load_relations(write_relations(tmp_path / "rel"))[0]
    df = lr.measure_relation(loaded.model, loaded.tokenizer, rel, 1, **FS_SIZES)
    assert list(df.subject) == ["land5", "land6", "land7", "land8"] and len(df) == 4
    for col in ("lm_correct", "faith", "hard", "soft"):
        assert df[col].isin([0.0, 1.0]).all()
    assert (df.lm_logprob <= 0).all() and (df.faith_prob <= 0).all()
    assert df.beta.nunique() == 1 and df["rank"].iloc[0] in (4, 8)
    again = lr.measure_relation(loaded.model, loaded.tokenizer, rel, 1, **FS_SIZES)
    assert df.equals(again)                                   # no randomness: the file order decides
    with pytest.raises(ValueError, match="samples"):
        lr.measure_relation(loaded.model, loaded.tokenizer, rel, 1, n_shots=9, n_fit=8)


def _save_revisions(tiny_real_lm, arch, names):
    """A folder whose sub-folders are checkpoints (a local stand-in for hub revisions)."""
    import shutil

    root = tiny_real_lm(arch, FS_WORDS).parent / f"{arch}-revisions"
    for k, name in enumerate(names):
        shutil.copytree(tiny_real_lm(arch, FS_WORDS, seed=k), root / name)
    return root


def test_full_scale_over_checkpoints_with_counts(tiny_real_lm, tmp_path):
    root = _save_revisions(tiny_real_lm, "olmo2", ["step1", "main"])
    data = write_relations(tmp_path / "rel")
    counts = write_counts(tmp_path / "c.jsonl", ["step1", "main"])
    out = lr.full_scale(root, data, counts=counts, revisions=["step1", "main"], layer=1, device="cpu", **FS_SIZES)
    ex, pts = out["examples"], out["points"]
    assert out["architecture"] == "Olmo2ForCausalLM" and out["layer"] == 1
    assert len(ex) == 2 * 2 * 4 and list(pts.checkpoint.unique()) == ["step1", "main"] and len(pts) == 4
    first = ex[(ex.checkpoint == "step1") & (ex.subject == "land5")].cooc.item()
    assert first == 1 and ex[(ex.checkpoint == "main") & (ex.subject == "land5")].cooc.item() == 2
    assert (pts.n_test == 4).all()
    stats = lr.full_scale_statistics(pts, threshold=100)
    assert set(stats) == {"corr", "threshold", "causality_vs_accuracy", "acc_close"}
    assert 0 <= stats["acc_close"] <= 1 and (np.isnan(stats["corr"]) or -1 <= stats["corr"] <= 1)
    # without counts: faithfulness and causality only, every count NaN
    plain = lr.full_scale(root / "main", data, layer=0, device="cpu", **FS_SIZES)
    assert plain["examples"].cooc.isna().all() and plain["examples"].checkpoint.eq("final").all()


def test_full_scale_statistics_on_known_points():
    import pandas as pd

    pts = pd.DataFrame({"checkpoint": ["a"] * 3 + ["b"] * 3, "cooc": [0, 9, 99, 999, 9999, 99999],
                        "hard": [0.0, 0.2, 0.4, 0.95, 1.0, 0.9], "lm_correct": [0.5, 0.5, 0.6, 1.0, 0.8, 0.9]})
    st = lr.full_scale_statistics(pts, threshold=999)
    x = np.log10(pts.cooc + 1)
    assert st["corr"] == pytest.approx(np.corrcoef(x, pts.hard)[0, 1])
    assert st["causality_vs_accuracy"] == pytest.approx(st["corr"] - np.corrcoef(x, pts.lm_correct)[0, 1])
    assert st["threshold"] == pytest.approx(0.95) and st["acc_close"] == pytest.approx((0.05 + 0.2 + 0.0) / 3)
    assert np.isnan(lr.full_scale_statistics(pts.assign(cooc=np.nan), 999)["corr"])
    with pytest.raises(ValueError, match="columns"):
        lr.full_scale_statistics(pts.drop(columns="hard"), 999)


def test_full_scale_refuses_bad_input_before_any_work(tiny_real_lm, tmp_path, monkeypatch):
    """Item 4: an unsupported class, a folder that does not load, a model too large for the memory, a layer
    out of range and data in the wrong format stop with an error naming the problem (and the choices) before
    any weights are read or any relation is measured."""
    import transformers

    from companion_lib.linear_representations import fullscale

    def no_work(*a, **k):
        raise AssertionError("work started before the input was checked")

    monkeypatch.setattr(fullscale, "measure_relation", no_work)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_work)
    data = write_relations(tmp_path / "rel")
    ok = tiny_real_lm("llama", FS_WORDS)
    bert = tmp_path / "bert"
    transformers.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=32, architectures=["BertForMaskedLM"]).save_pretrained(bert)
    with pytest.raises(ValueError, match="BertForMaskedLM.*OlmoForCausalLM"):
        lr.full_scale(bert, data, device="cpu")
    with pytest.raises(ValueError, match="cannot load the config"):
        lr.full_scale(tmp_path / "no-model", data, device="cpu")
    with pytest.raises(ValueError, match="GiB free"):
        lr.full_scale(ok, data, device="cpu", free_bytes=1000, **FS_SIZES)
    with pytest.raises(ValueError, match=r"layer must be an int in \[0, 1\]"):
        lr.full_scale(ok, data, layer=2, device="cpu")
    (tmp_path / "wrong").mkdir()
    (tmp_path / "wrong" / "r.json").write_text(json.dumps({"relation": "x", "pairs": [["a", "b"]]}))
    with pytest.raises(ValueError, match="missing name, prompt_templates, samples"):
        lr.full_scale(ok, tmp_path / "wrong", device="cpu")
    (tmp_path / "c.csv").write_text("relation,subject,object,count\n")
    with pytest.raises(ValueError, match="JSON lines"):
        lr.full_scale(ok, data, counts=tmp_path / "c.csv", device="cpu")
    with pytest.raises(ValueError, match="n_shots"):
        lr.full_scale(ok, data, n_shots=9, n_fit=8, device="cpu")
    with pytest.raises(TypeError, match="revisions"):
        lr.full_scale(ok, data, revisions="main", device="cpu")


@pytest.mark.slow
def test_reproduce_page_runs_at_full_scale_on_a_tiny_olmo(tiny_real_lm, tmp_path, run_reproduce):
    """Issue 39, item 3: the reproduce page end to end with model= a tiny OLMo checkpoint folder (two
    checkpoints as sub-folders), data= relation files and counts= a counts file, at minimal tiny sizes."""
    import time

    root = _save_revisions(tiny_real_lm, "olmo", ["step1", "main"])
    data = write_relations(tmp_path / "rel")
    counts = write_counts(tmp_path / "c.jsonl", ["step1", "main"])
    md = Path(__file__).resolve().parents[1] / "chapters" / "11-linear-representations" / "reproduce.md"
    params = dict(steps=200, checkpoints=[150, 200], n_embd=64, n_layer=2, layer=1, regression_steps=[200],
                  subject_first_steps=200, subject_first_checkpoints=[150, 200], subject_first_layer=0, seeds=[0, 1],
                  n_pilot=2, model=str(root), data=str(data), counts=str(counts), revisions=["step1", "main"],
                  full_layer=1, n_test=4)
    start = time.perf_counter()
    nb, table, error = run_reproduce(md, params, "full-scale", checks_off_before="At full scale")
    print(f"reproduce.md at full scale on a tiny OLMo: {time.perf_counter() - start:.1f} s")
    assert error is None, error
    assert table is not None and table["chapter"] == "11-linear-representations-full-scale"
    assert [c["key"] for c in table["claims"]] == ["acc_close", "corr", "threshold", "causality_vs_accuracy"]
    assert table["claims"][0]["outcome"] != "declared"        # the row that needs no counts is decided
    written = json.loads((tmp_path / "claims" / "11-linear-representations-full-scale.json").read_text())
    assert written["claims"] == table["claims"]


def test_full_scale_passes_hub_revisions_to_the_loaders(tiny_real_lm, tmp_path, monkeypatch):
    """A revision that is not a sub-folder of a local checkpoint is a hub revision: it reaches the config check
    and the loader (companion_lib.tinylm), and each checkpoint's rows carry its name."""
    import companion_lib.tinylm as tinylm

    folder = tiny_real_lm("gpt2", FS_WORDS)
    seen = []
    real_config, real_load = tinylm.causal_lm_config, tinylm.load_causal_lm
    monkeypatch.setattr(tinylm, "causal_lm_config",
                        lambda src, revision=None: seen.append(("config", revision)) or real_config(src, revision))
    monkeypatch.setattr(tinylm, "load_causal_lm",
                        lambda src, revision=None, **kw: seen.append(("load", revision)) or real_load(src, **kw))
    out = lr.full_scale(folder, write_relations(tmp_path / "rel"), revisions=["step1000-tokens4B"], layer=1,
                        device="cpu", **FS_SIZES)
    assert seen == [("config", "step1000-tokens4B"), ("load", "step1000-tokens4B")]
    assert out["examples"].checkpoint.eq("step1000-tokens4B").all() and out["architecture"] == "GPT2LMHeadModel"


def test_check_full_scale_reads_no_weights(tiny_real_lm, tmp_path, monkeypatch):
    """The page's early check (before its tiny runs): the plan of a run, from configs and files alone."""
    import transformers

    def no_weights(*a, **k):
        raise AssertionError("weights were read")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    folder = tiny_real_lm("neox", FS_WORDS)
    plan = lr.check_full_scale(folder, write_relations(tmp_path / "rel"), counts=write_counts(tmp_path / "c.jsonl"),
                               device="cpu")
    assert (plan.layer, plan.n_layers, plan.hidden_size) == (1, 2, 16)
    assert plan.checkpoints == [("final", str(folder), None)] and len(plan.relations) == 2 and len(plan.counts) == 35
    built = transformers.GPTNeoXForCausalLM(transformers.AutoConfig.from_pretrained(folder))
    assert plan.parameter_bytes == sum(p.numel() for p in built.parameters()) * 4      # float32 on the CPU
    with pytest.raises(ValueError, match="dtype"):
        lr.check_full_scale(folder, tmp_path / "rel", device="cpu", dtype="int8")
