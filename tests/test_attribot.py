"""Unit tests of companion_lib.attribot: prompts and ablations, exact and KV-cached LOO, the tricks, the
baselines, the metrics and the checks on bad input. All models are tiny and untrained (fast)."""

import numpy as np
import pytest
import torch

from companion_lib import attribot as ab
from companion_lib.tinylm import gpt2_config, tiny_causal_lm, word_tokenizer

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tok():
    return ab.task_tokenizer()


@pytest.fixture(scope="module")
def scorer(tok):
    return ab.Scorer(tiny_causal_lm(gpt2_config(len(tok), 96, 32, 2, 2), seed=0), tok, "target")


@pytest.fixture(scope="module")
def proxy(tok):
    return ab.Scorer(tiny_causal_lm(gpt2_config(len(tok), 96, 16, 1, 2), seed=1), tok, "proxy")


@pytest.fixture(scope="module")
def prompt(tok):
    return ab.make_example(np.random.default_rng(0), tok)


def test_example_layout(prompt, tok):
    assert prompt.n_sources == 16 and len(prompt.groups) == 4 and len(prompt.ids) == 75
    assert [len(m) for m in prompt.group_members()] == [4, 4, 4, 4]
    words = tok.convert_ids_to_tokens(list(prompt.ids))
    for p in prompt.response_positions:       # the answer word appears in exactly one source
        assert words[p - 2] == "Q" and sum(words[p] in words[a:b] for a, b in prompt.sources) == 1


def test_ablate_and_restrict(prompt):
    ids, pos = prompt.ablate([prompt.sources[3]])
    assert len(ids) == len(prompt.ids) - 4
    assert [ids[p] for p in pos] == [prompt.ids[p] for p in prompt.response_positions]
    pruned, index = prompt.restrict([0, 5, 6])
    assert index == [0, 5, 6] and pruned.n_sources == 3 and len(pruned.groups) == 2
    for (a, b), i in zip(pruned.sources, index):
        s0, s1 = prompt.sources[i]
        assert pruned.ids[a:b] == prompt.ids[s0:s1]
    assert [pruned.ids[p] for p in pruned.response_positions] == [prompt.ids[p] for p in prompt.response_positions]


def test_kv_cached_loo_is_exact_and_cheaper(scorer, prompt):
    scorer.reset()
    naive = ab.loo(scorer, prompt).scores
    naive_cost, naive_passes = scorer.tokens, scorer.passes
    scorer.reset()
    cached = ab.loo(scorer, prompt, kv_cache=True).scores
    np.testing.assert_allclose(cached, naive, atol=1e-5)
    assert scorer.passes == naive_passes == prompt.n_sources + 1
    # each ablation of [a, b) runs len - b tokens instead of len - (b - a)
    L = len(prompt.ids)
    assert scorer.tokens == L + sum(L - b for _, b in prompt.sources)
    assert naive_cost == L + sum(L - (b - a) for a, b in prompt.sources)


def test_cost_counts_non_embedding_parameters(tok):
    model = tiny_causal_lm(gpt2_config(len(tok), 96, 32, 2, 2), seed=0)
    total = sum(p.numel() for p in model.parameters())
    emb = model.transformer.wte.weight.numel() + model.transformer.wpe.weight.numel()
    assert ab.non_embedding_params(model) == total - emb


def test_hierarchical_scores_only_kept_paragraphs(scorer, prompt):
    att = ab.hierarchical_loo(scorer, prompt, keep_groups=2)
    scored = ~np.isnan(att.scores)
    assert scored.sum() == 8
    coarse = att.info["group_scores"]
    top = set(np.argsort(-coarse, kind="stable")[:2])
    members = prompt.group_members()
    assert set(np.flatnonzero(scored)) == {i for g in top for i in members[g]}
    assert (att.rank_scores[~scored] < -1e8).all()
    kv = ab.hierarchical_loo(scorer, prompt, keep_groups=2, kv_cache=True)
    np.testing.assert_allclose(np.nan_to_num(kv.scores), np.nan_to_num(att.scores), atol=1e-5)
    full = ab.hierarchical_loo(scorer, prompt, keep_groups=4)    # keeping every paragraph is exact LOO
    np.testing.assert_allclose(full.scores, ab.loo(scorer, prompt).scores, atol=1e-5)


def test_pruned_loo_rescored_by_target(scorer, proxy, prompt):
    att = ab.pruned_loo(proxy, scorer, prompt, keep_sources=16)
    np.testing.assert_allclose(att.scores, ab.loo(scorer, prompt).scores, atol=1e-5)
    att = ab.pruned_loo(proxy, scorer, prompt, keep_sources=3, kv_cache=True)
    assert (~np.isnan(att.scores)).sum() == 3


def test_lasso_surrogate_matches_soft_thresholding():
    """context-cite is not installed (it pulls spacy/nltk and downloads nltk data at import), so the
    ContextCite surrogate is checked against a hand-computed Lasso: on a full 2^3 factorial design the
    standardized columns are orthogonal with unit variance, and the Lasso solution is the
    soft-thresholded least-squares coefficient, w_j = sign(b_j) max(|b_j| - alpha, 0) / s_j."""
    masks = np.array([[int(c) for c in f"{i:03b}"] for i in range(8)], float)
    y = 1.0 + masks @ np.array([2.0, -0.3, 0.05])
    alpha = 0.1
    z = (masks - masks.mean(0)) / masks.std(0)
    b = z.T @ (y - y.mean()) / len(y)
    expected = np.sign(b) * np.maximum(np.abs(b) - alpha, 0) / masks.std(0)
    np.testing.assert_allclose(ab.lasso_surrogate(masks, y, alpha), expected, atol=1e-6)
    assert ab.lasso_surrogate(np.ones((4, 2)), np.arange(4.0), 0.1).tolist() == [0.0, 0.0]


def test_context_cite_and_attention(scorer, prompt):
    scorer.reset()
    att = ab.context_cite(scorer, prompt, 8, np.random.default_rng(0))
    assert att.scores.shape == (16,) and scorer.passes == 8
    a = ab.attention_attribution(scorer, prompt).scores
    assert a.shape == (16,) and (a >= 0).all() and a.sum() <= 1 + 1e-6


def test_generation_counts_each_token_once(scorer, prompt):
    scorer.reset()
    answers = ab.generate_response(scorer, prompt)
    assert len(answers) == 2 and scorer.tokens == len(prompt.ids) - 1


def test_metrics():
    assert ab.average_precision([3, 2, 1, 0], [True, False, True, False]) == pytest.approx((1 + 2 / 3) / 2)
    assert ab.topk_recall([3, 2, 1, 0], [True, False, True, False], 2) == 0.5
    truths = [np.array([2.0, 0.1, 0.0]), np.array([0.0, 3.0, 0.2])]
    f = ab.faithfulness([ab.Attribution(t) for t in truths], truths, k=1)
    assert f["mAP"] == 1.0 and f["pearson"] == pytest.approx(1.0) and f["recall@1"] == 1.0
    assert ab.pareto_front([1, 2, 3, 3], [0.9, 0.8, 0.5, 0.4]).tolist() == [True, True, True, False]


def test_bad_input(scorer, prompt, tok):
    ids = prompt.ids
    with pytest.raises(ValueError, match="outside the context"):
        ab.ContextPrompt(ids, [(70, 74)], [], prompt.response_positions, prompt.context)
    with pytest.raises(ValueError, match="overlap"):
        ab.ContextPrompt(ids, [(1, 5), (3, 8)], [], prompt.response_positions, prompt.context)
    with pytest.raises(ValueError, match="response_positions is empty"):
        ab.ContextPrompt(ids, prompt.sources, prompt.groups, [], prompt.context)
    other = ab.Scorer(tiny_causal_lm(gpt2_config(len(tok) + 1, 96, 16, 1, 2), seed=0),
                      word_tokenizer(ab.task_vocabulary() + ["extra"]), "other")
    with pytest.raises(ValueError, match="proxy 'other'"):
        ab.pruned_loo(other, scorer, prompt, 2)
    with pytest.raises(ValueError, match="keep_sources"):
        ab.pruned_loo(scorer, scorer, prompt, 17)
    with pytest.raises(ValueError, match="keep_groups"):
        ab.hierarchical_loo(scorer, prompt, 5)
    with pytest.raises(ValueError, match="k = 5"):
        ab.topk_recall([1, 2, 3], [True, False, False], 5)
    with pytest.raises(TypeError, match="prompt"):
        ab.loo(scorer, "not a prompt")


def test_training_batch_masks_everything_but_answers(tok):
    ids, labels = ab.training_batch(np.random.default_rng(0), tok, 4)
    assert ids.shape == labels.shape and ((labels != -100).sum(1) == 4).all()
    q = tok.convert_tokens_to_ids("Q")
    for row, lab in zip(ids, labels):
        pos = (lab != -100).nonzero().flatten()
        assert (row[pos - 2] == q).all()


def test_paired_interval_and_map_difference(scorer, prompt):
    d = np.array([0.1, 0.2, np.nan, 0.0, 0.3])
    iv = ab.paired_interval(d)
    x = d[~np.isnan(d)]
    half = 3.182446305284263 * x.std(ddof=1) / 2           # t(0.975, 3) * s / sqrt(4)
    assert iv["n"] == 4 and iv["mean"] == pytest.approx(0.15)
    assert iv["lo"] == pytest.approx(0.15 - half) and iv["hi"] == pytest.approx(0.15 + half)
    with pytest.raises(ValueError, match="at least two"):
        ab.paired_interval([1.0, np.nan])
    with pytest.raises(ValueError, match="level"):
        ab.paired_interval([1.0, 2.0], level=1.5)
    specs = {"exact LOO": ([scorer], lambda p: ab.loo(scorer, p)),
             "attention": ([scorer], lambda p: ab.attention_attribution(scorer, p))}
    prompts = [prompt, ab.make_example(np.random.default_rng(1), ab.task_tokenizer())]
    results = ab.run_methods(specs, prompts)
    same = ab.map_difference(results, "exact LOO", "exact LOO")
    assert same["mean"] == same["lo"] == same["hi"] == 0.0
    ap = ab.per_prompt_ap(results, "exact LOO")
    assert np.allclose(ap, 1.0)
    table = ab.per_seed_table(results, {0: [0], 1: [1]}, "exact LOO", ["attention"], "exact LOO")
    assert list(table.index) == [0, 1] and np.allclose(table["r(exact LOO)"], 1.0)
    # per-prompt records: wall and CPU seconds, FLOPs = 2 x tokens x parameters of each pass
    for r in results.values():
        assert r["wall"].shape == r["cpu"].shape == r["flops"].shape == (2,) and (r["wall"] > 0).all()
    np.testing.assert_allclose(results["exact LOO"]["flops"],
                               [2.0 * scorer.n_params * (len(p.ids) + sum(len(p.ids) - (b - a) for a, b in p.sources))
                                for p in prompts])
    ratio = ab.per_prompt_ratio(results, "exact LOO", "attention", key="flops")
    np.testing.assert_allclose(ratio, [1 + p.n_sources - sum(b - a for a, b in p.sources) / len(p.ids)
                                       for p in prompts])
    with pytest.raises(KeyError, match="nope"):
        ab.per_prompt_ratio(results, "nope", "attention")


def test_cost_formula_of_the_combination(scorer, proxy, prompt):
    """The FLOP speed-up of proxy + hierarchical + KV over exact LOO is a constant of the prompt layout and the
    parameter counts (why the book decides speed claims on wall time, not on this ratio)."""
    L, n, w = len(prompt.ids), prompt.n_sources, 4               # sentences of 4 tokens, paragraphs of 4 + mark
    proxy.reset()
    att = ab.hierarchical_loo(proxy, prompt, keep_groups=2, kv_cache=True)
    coarse = att.info["group_scores"]
    kept = np.sort(np.argsort(-coarse, kind="stable")[:2])
    # paragraph LOO with the cache: the full pass, then each paragraph's suffix from its end
    tokens = L + sum(L - g1 for g0, g1 in prompt.groups)
    pruned_len = L - (len(prompt.groups) - 2) * (4 * w + 1)
    ends = [sum(4 * w + 1 for _ in range(j)) + 1 + w * (s + 1) for j in range(2) for s in range(4)]
    tokens += pruned_len + sum(pruned_len - e for e in ends)
    assert proxy.tokens == tokens and proxy.flops == 2.0 * tokens * proxy.n_params
    exact = L + sum(L - (b - a) for a, b in prompt.sources)
    assert (exact * scorer.n_params) / (proxy.tokens * proxy.n_params) == pytest.approx(
        (exact / tokens) * (scorer.n_params / proxy.n_params))
    assert np.isnan(att.scores).sum() == 2 * 4 and not np.isnan(att.scores[[i for g in kept for i in
                                                                             prompt.group_members()[g]]]).any()


def test_generated_response_and_outlier_rule(scorer, prompt):
    new = prompt.with_response([5, 6])
    assert [new.ids[p] for p in new.response_positions] == [5, 6] and new.sources == prompt.sources
    with pytest.raises(ValueError, match="one id per response position"):
        prompt.with_response([5])
    prompts, rec = ab.generate_responses(scorer, [prompt])
    answers = ab.generate_response(scorer, prompt)
    assert [prompts[0].ids[p] for p in prompt.response_positions] == answers
    assert rec["matches"][0] == (answers == [prompt.ids[p] for p in prompt.response_positions])
    t = np.array([0.1, 0.0, 5.0, 0.2, -0.1, 0.0, 0.1, 0.0])
    assert ab.outlier_sources(t).tolist() == [False, False, True] + [False] * 5
    flat = np.array([1.0, 2.0, 3.0, 4.0])                       # no outlier: the top source alone
    assert ab.outlier_sources(flat).tolist() == [False, False, False, True]
    z = (t - t.mean()) / t.std()
    assert ab.outlier_sources(t, z=0.5).tolist() == (z > 0.5).tolist()
    with pytest.raises(ValueError, match="z must be"):
        ab.outlier_sources(t, z=0)


def test_logit_target_matches_context_cite_definition(scorer, prompt):
    """The logit-probability target is log p - log(1 - p) per response token (context-cite's definition)."""
    ids, pos = list(prompt.ids), list(prompt.response_positions)
    with torch.no_grad():
        lp = torch.log_softmax(scorer.model(input_ids=torch.tensor([ids])).logits[0].double(), -1)
    logp = np.array([float(lp[p - 1, ids[p]]) for p in pos])
    assert scorer.loglik(ids, pos) == pytest.approx(logp.sum(), abs=1e-4)
    assert scorer.loglik(ids, pos, target="logit") == pytest.approx(np.sum(logp - np.log1p(-np.exp(logp))), abs=1e-4)
    with pytest.raises(ValueError, match="target"):
        scorer.loglik(ids, pos, target="prob")


def test_gradient_norm_and_similarity(scorer, prompt):
    """Gradient norm against a finite difference along one source's embeddings; similarity against a direct
    cosine; both count their cost."""
    scorer.reset()
    g = ab.gradient_norm_attribution(scorer, prompt).scores
    assert g.shape == (16,) and (g > 0).all() and scorer.tokens == 3 * len(prompt.ids)
    ids, pos = list(prompt.ids), list(prompt.response_positions)
    model = scorer.model
    emb = model.get_input_embeddings()(torch.tensor([ids])).detach().double()
    model64 = model.double()
    try:
        def ll(e):
            with torch.no_grad():
                lp = torch.log_softmax(model64(inputs_embeds=e).logits[0], -1)
            return float(sum(lp[p - 1, ids[p]] for p in pos))
        i = int(np.argmax(g))
        a, b = prompt.sources[i]
        e = emb.clone().requires_grad_(True)
        lp = torch.log_softmax(model64(inputs_embeds=e).logits[0], -1)
        (grad,) = torch.autograd.grad(sum(lp[p - 1, ids[p]] for p in pos), e)
        u = grad[0, a:b] / grad[0, a:b].norm()
        h = 1e-5
        plus, minus = emb.clone(), emb.clone()
        plus[0, a:b] += h * u
        minus[0, a:b] -= h * u
        assert (ll(plus) - ll(minus)) / (2 * h) == pytest.approx(g[i], rel=1e-3)
    finally:
        model.float()
    scorer.reset()
    s = ab.similarity_attribution(scorer, prompt).scores
    E = model.get_input_embeddings().weight.detach()
    resp = E[[ids[p] for p in pos]].mean(0)
    a, b = prompt.sources[0]
    assert s[0] == pytest.approx(float(torch.nn.functional.cosine_similarity(E[ids[a:b]].mean(0), resp, dim=0)),
                                 abs=1e-6)
    assert scorer.tokens == 0 and scorer.flops > 0


def test_context_cite_logit_target(scorer, prompt):
    a = ab.context_cite(scorer, prompt, 8, np.random.default_rng(0), target="logit").scores
    b = ab.context_cite(scorer, prompt, 8, np.random.default_rng(0), target="loglik").scores
    assert a.shape == b.shape == (16,) and not np.allclose(a, b)
    with pytest.raises(ValueError, match="target"):
        ab.context_cite(scorer, prompt, 8, np.random.default_rng(0), target="prob")


def test_tinylm_cache_helpers(scorer, prompt):
    """companion_lib.tinylm.crop_cache copies a prefix of a DynamicCache and leaves the original whole."""
    from companion_lib.tinylm import cache_kwarg, crop_cache, non_embedding_params

    model = scorer.model
    assert cache_kwarg(model) in ("cache", "past_key_values")
    ids = torch.tensor([list(prompt.ids)])
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        cache = getattr(out, "cache", None) or out.past_key_values
        n = cache.get_seq_length()
        prefix = crop_cache(cache, 10)
        assert prefix.get_seq_length() == 10 and cache.get_seq_length() == n
        rest = model(input_ids=ids[:, 10:], position_ids=torch.arange(10, ids.shape[1])[None],
                     **{cache_kwarg(model): prefix}).logits
    torch.testing.assert_close(rest, out.logits[:, 10:], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="length = 1000"):
        crop_cache(cache, 1000)
    with pytest.raises(TypeError, match="DynamicCache"):
        crop_cache((), 1)
    assert non_embedding_params(model) == ab.non_embedding_params(model)


def test_an_explicit_cpu_device_gives_the_same_numbers(tok, prompt):
    """Issue 37: the family trains and loads on a device argument (the GPU when present); on the CPU, passing
    device="cpu" explicitly changes nothing, bit for bit, and the weights come back on the CPU."""
    member = ab.FamilyMember("a", 16, 1, 2, 10)
    f1, f2 = ab.train_family(3, (member,)), ab.train_family(3, (member,), device="cpu")
    t1 = ab.train_member(member, 4, batch_size=4)
    t2 = ab.train_member(member, 4, batch_size=4, device=torch.device("cpu"))
    for s1, s2 in [(f1["a"], f2["a"]), (t1, t2)]:
        assert s1.keys() == s2.keys()
        assert all(torch.equal(s1[k], s2[k]) and s2[k].device.type == "cpu" for k in s1)
    m1, m2 = ab.load_member(member, f1["a"]), ab.load_member(member, f1["a"], device="cpu")
    assert ab.Scorer(m2, tok).device == torch.device("cpu")
    a1 = ab.loo(ab.Scorer(m1, tok), prompt, kv_cache=True).scores
    assert np.array_equal(a1, ab.loo(ab.Scorer(m2, tok), prompt, kv_cache=True).scores)
    assert ab.answer_accuracy(m1, [prompt]) == ab.answer_accuracy(m2, [prompt])


def test_every_pass_feeds_the_model_on_its_own_device(tok, prompt):
    """On the meta device (nothing allocated) a forward pass accepts CPU token ids silently, so a hook records
    the device of every tensor the model and its embedding receive: each method must send them where the
    model is (on a GPU a CPU input would raise). The methods then stop where a score is read out (meta
    tensors hold no values)."""
    member = ab.FamilyMember("t", 16, 1, 2, 10)
    model = ab.load_member(member, tiny_causal_lm(gpt2_config(len(tok), 96, 16, 1, 2), seed=0).state_dict(),
                           device="meta")
    assert next(model.parameters()).device.type == "meta"
    seen = []

    def record(module, args, kwargs):
        seen.extend(t.device.type for t in [*args, *kwargs.values()] if isinstance(t, torch.Tensor))

    hooks = [model.register_forward_pre_hook(record, with_kwargs=True),
             model.get_input_embeddings().register_forward_pre_hook(record, with_kwargs=True)]
    scorer = ab.Scorer(model, tok, "meta")
    ids, pos = list(prompt.ids), list(prompt.response_positions)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], device="meta"), use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    a = prompt.sources[3][0]
    ab_ids, ab_pos = prompt.ablate([prompt.sources[3]])
    calls = [lambda: scorer.loglik(ids, pos), lambda: scorer.loglik(ids, pos, target="logit"),
             lambda: ab.loo(scorer, prompt, kv_cache=True),
             lambda: scorer.loglik_after_prefix(cache, a, ab_ids, ab_pos),
             lambda: ab.generate_response(scorer, prompt), lambda: ab.gradient_norm_attribution(scorer, prompt),
             lambda: ab.attention_attribution(scorer, prompt), lambda: ab.similarity_attribution(scorer, prompt),
             lambda: ab.answer_accuracy(model, [prompt])]
    try:
        for call in calls:
            before = len(seen)
            with pytest.raises((RuntimeError, NotImplementedError), match="meta"):
                call()
            assert len(seen) > before or call is calls[7]     # similarity reads the embedding table only
    finally:
        for h in hooks:
            h.remove()
    assert seen and set(seen) == {"meta"}, sorted(set(seen))


# -- the full-scale path (issue 39): real-format data, tiny real-class checkpoints, bad input -------------------
import json  # noqa: E402
from pathlib import Path  # noqa: E402

WORDS = ("The the cat sat on mat . A a dog ran in park Paris is capital of France Who What Where where ? "
         "Pets Park yes no").split()


def _squad(tmp_path, n_extra=0):
    par = {"context": "The cat sat on the mat . A dog ran in the park . Paris is the capital of France .",
           "qas": [{"id": "q1", "question": "Where the cat sat ?", "answers": [{"text": "the mat", "answer_start": 19}],
                    "is_impossible": False},
                   {"id": "q2", "question": "Where a dog ran ?", "answers": [{"text": "the park", "answer_start": 40}],
                    "is_impossible": False},
                   {"id": "q3", "question": "What is the cat ?", "answers": [], "is_impossible": True}]}
    short = {"context": "Paris is the capital of France .",       # one sentence: left out
             "qas": [{"id": "q4", "question": "What is Paris ?", "answers": [{"text": "capital", "answer_start": 13}]}]}
    more = [{"context": "A dog sat . The cat ran .", "qas": [{"id": f"x{i}", "question": "Who ran ?",
                                                               "answers": [{"text": "the cat", "answer_start": 12}]}]}
            for i in range(n_extra)]
    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "Pets", "paragraphs": [par, short, *more]}]}))
    return path


def _hotpot(tmp_path, n=3):
    rec = {"_id": "h0", "question": "Who sat on the mat ?", "answer": "the cat", "type": "bridge", "level": "easy",
           "supporting_facts": [["Pets", 0]],
           "context": [["Pets", ["The cat sat on the mat .", " A dog ran ."]], ["France", ["Paris is the capital of France ."]],
                       ["Park", ["A dog ran in the park .", "The cat ran ."]]]}
    path = tmp_path / "hotpot_dev_distractor_v1.json"
    path.write_text(json.dumps([{**rec, "_id": f"h{i}"} for i in range(n)]))
    return path


def test_split_sentences():
    assert ab.split_sentences("The cat sat. A dog ran!  Is it? yes it is.") == ["The cat sat.", "A dog ran!",
                                                                                 "Is it? yes it is."]
    assert ab.split_sentences('He said "no." Then he left. 3 dogs ran.') == ['He said "no."', "Then he left.",
                                                                              "3 dogs ran."]
    assert ab.split_sentences("  ") == []
    with pytest.raises(TypeError):
        ab.split_sentences(None)


def test_load_qa_reads_squad2(tmp_path):
    fmt, ex = ab.load_qa(_squad(tmp_path))
    assert fmt == "squad2" and [e.id for e in ex] == ["q1", "q2"]     # unanswerable and one-sentence left out
    assert ex[0].paragraphs == (("Pets", ("The cat sat on the mat .", "A dog ran in the park .",
                                          "Paris is the capital of France .")),)
    assert ex[0].answer == "the mat" and ex[0].n_sources == 3


def test_load_qa_reads_hotpotqa(tmp_path):
    fmt, ex = ab.load_qa(_hotpot(tmp_path))
    assert fmt == "hotpotqa" and len(ex) == 3 and ex[1].id == "h1" and ex[0].answer == "the cat"
    assert [t for t, _ in ex[0].paragraphs] == ["Pets", "France", "Park"]
    assert ex[0].paragraphs[0][1] == ("The cat sat on the mat .", "A dog ran .") and ex[0].n_sources == 5
    sel = ab.select_examples(ex, 2, seed=0)
    assert len(sel) == 2 and sel == ab.select_examples(ex, 2, seed=0)
    with pytest.raises(ValueError, match="holds 3 usable"):
        ab.select_examples(ex, 4)


@pytest.mark.parametrize("content, problem", [
    (None, "no such file"), ("{not json", "not a JSON file"), (json.dumps({"rows": [1, 2]}), "neither"),
    (json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "A b. C d."}]}]}), "SQuAD 2.0 but"),
    (json.dumps([{"question": "q", "answer": "a", "context": [["t", "A b. C d."]]}]), "HotpotQA but"),
    (json.dumps([{"question": "q", "answer": "a", "context": [["t", ["one"]]]}]), "holds no answerable")])
def test_load_qa_refuses_the_wrong_format(tmp_path, content, problem):
    path = tmp_path / "data.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=problem) as err:
        ab.load_qa(path)
    assert "SQuAD 2.0 JSON" in str(err.value) and "HotpotQA distractor JSON" in str(err.value)
    with pytest.raises(TypeError):
        ab.load_qa(3)


def test_encode_example_spans_are_the_sentences(tmp_path):
    tok = word_tokenizer(WORDS)
    _, ex = ab.load_qa(_hotpot(tmp_path))
    enc = ab.encode_example(tok, ex[0])
    words = tok.convert_ids_to_tokens(list(enc.ids))
    sentences = [s for _, ss in ex[0].paragraphs for s in ss]
    assert [" ".join(words[a:b]) for a, b in enc.sources] == sentences
    assert len(enc.groups) == 3 and words[enc.groups[0][0]] == "<unk>"      # the title "Pets:" opens paragraph 1
    assert enc.ids[0] == tok.bos_token_id and enc.context[0] < enc.sources[0][0] and enc.sources[-1][1] <= enc.context[1]
    prompt = enc.with_response([5, 6])
    assert prompt.response_positions == (len(enc.ids), len(enc.ids) + 1) and prompt.n_sources == 5
    assert [len(m) for m in prompt.group_members()] == [2, 1, 2]
    with pytest.raises(ValueError, match="empty"):
        enc.with_response([])
    # with a chat template the context sits inside the user turn, the generation prompt after it
    tok.chat_template = ("{% for m in messages %}<bos> {{ m['role'] }} : {{ m['content'] }} ;{% endfor %}"
                         "{% if add_generation_prompt %} assistant :{% endif %}")
    chat = ab.encode_example(tok, ex[0])
    cw = tok.convert_ids_to_tokens(list(chat.ids))
    assert cw[0] == "<bos>" and [" ".join(cw[a:b]) for a, b in chat.sources] == sentences
    assert cw[-4:] == ["?", "<unk>", "<unk>", "<unk>"]          # "? ; assistant :" after the question
    with pytest.raises(TypeError):
        ab.encode_example(tok, "not an example")
    tok.chat_template = "{% for m in messages %}<bos> {{ m['role'] }}{% endfor %}"      # drops the message
    with pytest.raises(ValueError, match="chat template"):
        ab.encode_example(tok, ex[0])


def test_greedy_response_matches_generate(tiny_real_lm):
    from transformers import AutoModelForCausalLM

    folder = tiny_real_lm("llama", WORDS, hidden=32)
    tok = word_tokenizer(WORDS)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    s = ab.Scorer(model, tok)
    ids = tok("The cat sat on the mat . Where the cat sat ?")["input_ids"]
    resp = ab.greedy_response(s, ids, 6)
    ref = model.generate(torch.tensor([ids]), max_new_tokens=6, min_new_tokens=1, do_sample=False,
                         eos_token_id=tok.bos_token_id, pad_token_id=0)[0, len(ids):].tolist()
    assert resp == [t for t in ref if t != tok.bos_token_id][:len(resp)] and 1 <= len(resp) <= 6
    assert s.tokens == len(ids) + len(resp) - (len(resp) == 6)      # the last token is never fed back
    with pytest.raises(ValueError):
        ab.greedy_response(s, ids, 0)


@pytest.mark.parametrize("arch", ["gpt2", "neox", "olmo", "olmo2", "llama"])
def test_full_scale_runs_every_method_on_each_class(tiny_real_lm, tmp_path, arch):
    target = tiny_real_lm(arch, WORDS, hidden=32, seed=0)
    proxy = tiny_real_lm(arch, WORDS, hidden=16, seed=1)
    run = ab.full_scale(str(target), str(proxy), _squad(tmp_path), n_examples=2, max_new_tokens=3, keep_sources=2,
                        n_ablations=4, device="cpu")
    assert run.data_format == "squad2" and len(run.prompts) == 2 and tuple(run.table.index) == ab.FULL_SCALE_METHODS
    for p, n in zip(run.prompts, run.generation["tokens"]):
        assert p.n_sources == 3 and len(p.groups) == 1 and 1 <= n <= 3 and len(p.response_positions) == n
    exact = run.results["exact LOO"]["attributions"]
    for name in ("LOO + KV", "hierarchical + KV"):      # one paragraph: hierarchical keeps it, so it is exact LOO
        for a, b in zip(run.results[name]["attributions"], exact):
            np.testing.assert_allclose(a.scores, b.scores, atol=1e-4)
    pruned = run.results["prune(proxy) + target, KV"]["attributions"]
    assert all(np.isnan(a.scores).sum() == 1 for a in pruned)             # keep_sources = 2 of 3
    assert run.table.loc["exact LOO", "mAP"] == 1.0 and run.info["architecture"] in str(target.joinpath("config.json").read_text())
    values = ab.full_scale_values(run)
    assert set(values) == {"proxy_corr", "kv_wall", "lead_attention", "lead_contextcite", "lead_gradnorm",
                           "lead_similarity", "speed_vs_contextcite", "speedup_300", "faster_than_generation"}
    assert all(np.shape(v) == (2,) and (b is None or np.shape(b) == (2,)) for v, b in values.values())
    with pytest.raises(TypeError):
        ab.full_scale_values("run")


def test_full_scale_on_hotpotqa_uses_paragraphs_and_the_answer(tiny_real_lm, tmp_path):
    target = tiny_real_lm("llama", WORDS, hidden=32, seed=0)
    proxy = tiny_real_lm("llama", WORDS, hidden=16, seed=1)
    run = ab.full_scale(target, proxy, _hotpot(tmp_path), n_examples=2, response="answer", keep_groups=2,
                        keep_sources=3, n_ablations=4, device="cpu")
    tok = word_tokenizer(WORDS)
    assert run.data_format == "hotpotqa" and all(len(p.groups) == 3 and p.n_sources == 5 for p in run.prompts)
    assert all(tok.decode([p.ids[i] for i in p.response_positions]) == "the cat" for p in run.prompts)
    hier = run.results["hierarchical + KV"]["attributions"][0]
    assert np.isnan(hier.scores).sum() >= 1 and hier.info["group_scores"].shape == (3,)   # one paragraph dropped


def _refuse(**kw):
    """The error of full_scale with ``kw``, asserting that no weights were loaded before it."""
    from companion_lib.attribot import fullscale

    def no_weights(*a, **k):
        raise AssertionError("weights were loaded before the error")

    orig = fullscale.load_causal_lm
    fullscale.load_causal_lm = no_weights
    try:
        with pytest.raises(ValueError) as err:
            ab.full_scale(**{"n_examples": 2, "device": "cpu", **kw})
    finally:
        fullscale.load_causal_lm = orig
    return str(err.value)


def test_full_scale_refuses_bad_input_before_loading_weights(tiny_real_lm, tmp_path):
    import transformers as tf

    good = str(tiny_real_lm("llama", WORDS, hidden=16))
    data = _squad(tmp_path)
    bert = tmp_path / "bert"
    cfg = tf.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    cfg.architectures = ["BertForMaskedLM"]
    cfg.save_pretrained(bert)
    msg = _refuse(model=str(bert), proxy_model=good, data=data)
    assert "BertForMaskedLM" in msg and "LlamaForCausalLM" in msg and "GPT2LMHeadModel" in msg
    msg = _refuse(model=good, proxy_model=str(tmp_path / "nothing"), data=data)
    assert "cannot load the config" in msg and "nothing" in msg
    msg = _refuse(model=good, proxy_model=good, data=data, free_bytes=1000)
    assert "GiB" in msg and "smaller pair" in msg
    other = str(tiny_real_lm("llama", [w + "x" for w in WORDS], hidden=16))
    msg = _refuse(model=good, proxy_model=other, data=data)
    assert "tokenizer different" in msg and "same family" in msg
    msg = _refuse(model=good, proxy_model=good, data=tmp_path / "dev-v2.0.json.gz")
    assert "no such file" in msg and "HotpotQA distractor JSON" in msg
    msg = _refuse(model=good, proxy_model=good, data=data, n_examples=5)
    assert "holds 2 usable" in msg
    short = str(tiny_real_lm("llama", WORDS, hidden=16, max_positions=40))
    msg = _refuse(model=short, proxy_model=short, data=data, max_new_tokens=8)
    assert "positions" in msg and "take 40" in msg
    for bad, match in [({"response": "sample"}, "response must be"), ({"proxy_model": None}, "needs proxy_model"),
                       ({"dtype": "int8"}, "dtype must be")]:
        assert match in _refuse(**{"model": good, "proxy_model": good, "data": data, **bad})


def test_full_scale_names_a_checkpoint_whose_weights_do_not_load(tiny_real_lm, tmp_path):
    good = tiny_real_lm("llama", WORDS, hidden=16)
    broken = tiny_real_lm("llama", WORDS, hidden=16)
    for f in broken.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(ValueError, match="cannot load the weights") as err:
        ab.full_scale(good, broken, _squad(tmp_path), n_examples=2, device="cpu")
    assert str(broken) in str(err.value)


def test_full_scale_tokens_plan():
    t = ab.full_scale_tokens(10, 1000, 50, 20, 40, 10, 2, 4, 16, 0.25)
    L = 1070
    assert t["exact LOO"] == 10 * 41 * L and t["attention"] == 10 * L and t["gradient norm"] == 30 * L
    assert t["LOO + KV"] < t["exact LOO"] and t["hierarchical + KV"] < t["LOO + KV"]
    assert t["proxy + KV"] == pytest.approx(0.25 * t["LOO + KV"]) and t["proxy + hier + KV"] == pytest.approx(
        0.25 * t["hierarchical + KV"])
    assert t["similarity"] == 0 and set(ab.FULL_SCALE_METHODS) < set(t.index)
    with pytest.raises(ValueError):
        ab.full_scale_tokens(10, 1000, -1, 20, 40, 10, 2, 4, 16, 0.25)
    with pytest.raises(ValueError):
        ab.full_scale_tokens(0, 1000, 50, 20, 40, 10, 2, 4, 16, 0.25)


def test_train_family_default_steps_are_each_members_own():
    m = ab.FamilyMember("m", 16, 1, 2, 3)
    a, b = ab.train_family(0, family=(m,))["m"], ab.train_member(m, 0)
    assert all(torch.equal(a[k], b[k]) for k in a)
    c = ab.train_family(0, family=(m,), steps=2)["m"]
    assert all(torch.equal(c[k], v) for k, v in ab.train_member(m, 0, steps=2).items())
    assert not all(torch.equal(a[k], c[k]) for k in a)


@pytest.mark.slow
def test_reproduce_page_runs_at_full_scale_on_a_tiny_llama(tiny_real_lm, tmp_path, run_reproduce):
    import time

    root = Path(__file__).resolve().parents[1]
    target = tiny_real_lm("llama", WORDS, hidden=32, seed=0)
    proxy = tiny_real_lm("llama", WORDS, hidden=16, seed=1)
    params = {"model": str(target), "proxy_model": str(proxy), "data": str(_hotpot(tmp_path)), "n_examples": 3,
              "max_new_tokens": 3, "prompts_per_seed": 2, "seeds": [0], "n_pilot": 2, "n_ablations": 4,
              "keep_sources": 16, "family_steps": 10, "large_embd": 16, "large_layers": 1, "large_paragraphs": 2}
    t0 = time.perf_counter()
    _, claims, error = run_reproduce(root / "chapters" / "12-attribot" / "reproduce.md", params, "full-scale",
                                     checks_off_before="At full scale")
    print(f"reproduce page at full scale on a tiny llama: {time.perf_counter() - t0:.1f} s")
    assert error is None, error
    saved = json.loads((tmp_path / "claims" / "12-attribot-full-scale.json").read_text())
    keys = ["proxy_corr", "kv_wall", "lead_attention", "lead_contextcite", "lead_gradnorm", "lead_similarity",
            "speed_vs_contextcite", "speedup_300", "faster_than_generation"]
    for table in (claims, saved):
        assert table["chapter"] == "12-attribot-full-scale" and [c["key"] for c in table["claims"]] == keys
        assert all(c["n"] == 3 and c["expect"] == "reproduced" and c["verdict"] for c in table["claims"])
    book = json.loads((tmp_path / "claims" / "12-attribot.json").read_text())
    assert {c["key"]: c["margin"] for c in book["claims"] if c["key"] in keys} == \
           {c["key"]: c["margin"] for c in saved["claims"]}
