"""Unit tests of companion_lib.tinylm: tiny HF causal LMs, sequence log-likelihoods, the training loop."""

import pytest
import torch

from companion_lib.tinylm import (LastTokenScorer, all_responses, exact_response_logprobs, gpt2_config,
                                  llama_config, minibatches, response_logprobs, tiny_causal_lm, train_loop)

torch.set_num_threads(1)


@pytest.fixture(params=["gpt2", "llama"])
def model(request):
    cfg = gpt2_config(9, n_positions=8, n_embd=16) if request.param == "gpt2" else llama_config(9, hidden_size=16)
    return tiny_causal_lm(cfg, seed=0)


def test_configs_are_small_and_validated():
    cfg = gpt2_config(10, n_embd=32, n_layer=2, n_head=2)
    assert (cfg.vocab_size, cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.resid_pdrop) == (10, 32, 2, 2, 0.0)
    assert cfg.bos_token_id is None
    lcfg = llama_config(10, hidden_size=16, n_layer=1)
    assert (lcfg.hidden_size, lcfg.num_hidden_layers, lcfg.intermediate_size) == (16, 1, 32)
    with pytest.raises(ValueError, match="divisible"):
        gpt2_config(10, n_embd=30, n_head=4)
    with pytest.raises(ValueError, match="vocab_size"):
        gpt2_config(0)
    with pytest.raises(TypeError, match="n_layer"):
        llama_config(10, n_layer=1.5)
    with pytest.raises(ValueError, match="dropout"):
        gpt2_config(10, dropout=1.0)


def test_the_two_gpt2_activations_are_one_function():
    """gelu_new and the fused gelu_pytorch_tanh compute GPT-2's tanh-approximated GELU: equal up to float32
    rounding over [-6, 6], while the exact (erf) GELU, a different function, differs by up to 5e-4 there; the
    choice reaches every block, and a model built either way gives the same logits up to rounding."""
    from transformers.activations import ACT2FN

    x = torch.linspace(-6, 6, 2001)
    new, fused, exact = (ACT2FN[a](x) for a in ("gelu_new", "gelu_pytorch_tanh", "gelu"))
    torch.testing.assert_close(fused, new, rtol=0, atol=2e-6)
    assert 1e-4 < (exact - new).abs().max() < 1e-3
    ids = torch.randint(0, 11, (4, 12), generator=torch.Generator().manual_seed(0))
    logits = {}
    for act in ("gelu_new", "gelu_pytorch_tanh"):
        model = tiny_causal_lm(gpt2_config(11, n_positions=12, n_embd=32, n_layer=2, n_head=2, activation=act), seed=5)
        assert all(type(block.mlp.act) is type(ACT2FN[act]) for block in model.transformer.h)
        with torch.no_grad():
            logits[act] = model(input_ids=ids).logits
    torch.testing.assert_close(logits["gelu_pytorch_tanh"], logits["gelu_new"], rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="activation must be one of"):
        gpt2_config(11, activation="relu")


def test_tiny_causal_lm_is_seeded():
    a = tiny_causal_lm(gpt2_config(7, n_embd=8, n_head=2), seed=3)
    b = tiny_causal_lm(gpt2_config(7, n_embd=8, n_head=2), seed=3)
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(a(input_ids=ids).logits, b(input_ids=ids).logits)
    with pytest.raises(TypeError, match="config"):
        tiny_causal_lm({"vocab_size": 7})


def test_response_logprobs_matches_manual_sum(model):
    prompts = torch.tensor([[0, 1], [2, 3]])
    responses = torch.tensor([[4, 5, 6], [7, 8, 4]])
    got = response_logprobs(model, prompts, responses)
    logits = model(input_ids=torch.cat([prompts, responses], 1)).logits
    lp = torch.log_softmax(logits, -1)
    manual = torch.stack([sum(lp[b, 1 + t, responses[b, t]] for t in range(3)) for b in range(2)])
    assert torch.allclose(got, manual, atol=1e-5)
    per_tok = response_logprobs(model, prompts, responses, per_token=True)
    assert per_tok.shape == (2, 3) and torch.allclose(per_tok.sum(-1), got, atol=1e-6)
    masked = response_logprobs(model, prompts, responses, response_mask=torch.tensor([[1, 1, 0], [1, 0, 0]]))
    assert torch.allclose(masked, torch.stack([per_tok[0, :2].sum(), per_tok[1, 0]]), atol=1e-6)


def test_response_logprobs_restricted_vocabulary(model):
    prompts, responses = torch.tensor([[0]]), torch.tensor([[5, 4]])
    got = response_logprobs(model, prompts, responses, allowed_tokens=[4, 5])
    logits = model(input_ids=torch.tensor([[0, 5, 4]])).logits[0, :2][:, [4, 5]]
    manual = torch.log_softmax(logits, -1)[0, 1] + torch.log_softmax(logits, -1)[1, 0]
    assert torch.allclose(got, manual.unsqueeze(0), atol=1e-6)
    with pytest.raises(ValueError, match="allowed_tokens"):
        response_logprobs(model, prompts, torch.tensor([[6, 4]]), allowed_tokens=[4, 5])


def test_response_logprobs_errors(model):
    with pytest.raises(TypeError, match="prompts"):
        response_logprobs(model, [[0]], torch.tensor([[1]]))
    with pytest.raises(TypeError, match="responses"):
        response_logprobs(model, torch.tensor([[0]]), torch.tensor([[1.0]]))
    with pytest.raises(ValueError, match="batch size"):
        response_logprobs(model, torch.tensor([[0], [1]]), torch.tensor([[1]]))
    with pytest.raises(ValueError, match="at least one token"):
        response_logprobs(model, torch.zeros(1, 0, dtype=torch.long), torch.tensor([[1]]))
    with pytest.raises(ValueError, match="response_mask"):
        response_logprobs(model, torch.tensor([[0]]), torch.tensor([[1, 2]]), response_mask=torch.ones(1, 3))
    with pytest.raises(ValueError, match="repeat"):
        response_logprobs(model, torch.tensor([[0]]), torch.tensor([[1]]), allowed_tokens=[1, 1])


def test_all_responses_order_and_shape():
    r = all_responses([4, 5, 6], 2)
    assert r.shape == (9, 2)
    assert r[:4].tolist() == [[4, 4], [4, 5], [4, 6], [5, 4]]
    assert all_responses([1, 2], 0).shape == (1, 0)
    with pytest.raises(ValueError, match="length"):
        all_responses([1, 2], -1)
    with pytest.raises(ValueError, match="empty"):
        all_responses([], 2)


@pytest.mark.parametrize("length", [1, 2, 3])
def test_exact_response_logprobs_is_a_distribution_and_matches(model, length):
    vocab = [4, 5, 6]
    prompts = torch.tensor([[0], [1]])
    with torch.no_grad():
        table = exact_response_logprobs(model, prompts, vocab, length)
        assert table.shape == (2, 3 ** length)
        assert torch.allclose(table.logsumexp(-1), torch.zeros(2), atol=1e-5)
        resp = all_responses(vocab, length)
        for p in range(2):
            direct = response_logprobs(model, prompts[p].expand(len(resp), 1), resp, allowed_tokens=vocab)
            assert torch.allclose(direct, table[p], atol=1e-5)
    with pytest.raises(ValueError, match="length"):
        exact_response_logprobs(model, prompts, vocab, 0)


def test_minibatches_cover_every_index_each_epoch():
    batches = list(minibatches(10, 4, epochs=2, generator=torch.Generator().manual_seed(0)))
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4, 2]
    assert sorted(torch.cat(batches[:3]).tolist()) == list(range(10))
    assert torch.cat(list(minibatches(5, 2, shuffle=False))).tolist() == list(range(5))
    with pytest.raises(ValueError, match="batch_size"):
        list(minibatches(5, 0))
    with pytest.raises(TypeError, match="n"):
        list(minibatches(5.0, 2))


def test_train_loop_fits_a_sequence():
    model = tiny_causal_lm(gpt2_config(6, n_positions=8, n_embd=16), seed=0)
    seq = torch.tensor([[0, 3, 4, 5]])
    calls = []

    def loss_fn(m, _):
        return -response_logprobs(m, seq[:, :1], seq[:, 1:]).mean()

    losses = train_loop(model, loss_fn, range(60), lr=1e-2, grad_clip=1.0, callback=lambda s, l: calls.append(s))
    assert len(losses) == 60 and calls == list(range(60))
    assert losses[-1] < 0.2 * losses[0]
    with pytest.raises(ValueError, match="lr"):
        train_loop(model, loss_fn, range(1), lr=0.0)
    with pytest.raises(ValueError, match="scalar"):
        train_loop(model, lambda m, b: torch.ones(2, requires_grad=True), range(1))
    with pytest.raises(TypeError, match="model"):
        train_loop("model", loss_fn, range(1))


def test_last_token_scorer():
    lm = tiny_causal_lm(gpt2_config(6, n_embd=8, n_head=2), seed=0)
    rm = LastTokenScorer(lm)
    ids = torch.tensor([[0, 1, 2], [3, 4, 5]])
    assert torch.equal(rm(ids), torch.zeros(2))       # zero-initialised head
    assert rm.lm is not lm                              # the trunk is a copy
    rm.head.bias.data.fill_(1.0)
    out = rm(ids)
    out.sum().backward()
    assert rm.head.weight.grad is not None and out.shape == (2,)
    with pytest.raises(ValueError, match="input_ids"):
        rm(torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="lm"):
        LastTokenScorer(torch.nn.Linear(2, 2))
    rm_llama = LastTokenScorer(tiny_causal_lm(llama_config(6, hidden_size=8), seed=0))
    assert rm_llama(ids).shape == (2,)


# ---- the toolkit grown for Part IV (chapters 11-13): every helper on a tiny GPT-2 and a tiny Llama ----

from companion_lib.tinylm import (ActivationStore, capture_activations, cached_response_logprobs, decode_hidden,
                                  encode_pairs, hidden_jacobian, last_positions, layer_adapter, lm_loss,
                                  patch_activations, prefix_cache, run_from_layer, sequence_logprobs, spliced_loss,
                                  train_lm, word_tokenizer)


def _real_class_lm(name: str, vocab: int = 12, seed: int = 1):
    """A tiny randomly initialised instance of a real checkpoint class (the papers' architectures): two
    blocks, width 16, built from its own config, as issue 39's tests without downloads ask."""
    import transformers as tf

    small = dict(vocab_size=vocab, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                 max_position_embeddings=16, pad_token_id=0, bos_token_id=2, eos_token_id=2)
    config, cls = {"neox": (tf.GPTNeoXConfig, tf.GPTNeoXForCausalLM), "olmo": (tf.OlmoConfig, tf.OlmoForCausalLM),
                   "olmo2": (tf.Olmo2Config, tf.Olmo2ForCausalLM)}[name]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls(config(**small)).eval()


LM_CLASSES = ["gpt2", "llama", "neox", "olmo", "olmo2"]


def _lm12(name: str):
    if name in ("gpt2", "llama"):
        cfg = (gpt2_config(12, n_positions=16, n_embd=16) if name == "gpt2"
               else llama_config(12, hidden_size=16, max_position_embeddings=16))
        return tiny_causal_lm(cfg, seed=1)
    return _real_class_lm(name)


@pytest.fixture(params=LM_CLASSES)
def lm12(request):
    """A 2-block model over a 12-token vocabulary: the book's GPT-2 and Llama, and tiny instances of the
    other classes the papers used (GPT-NeoX for Pythia, OLMo, OLMo-2), so every hook runs on each."""
    return _lm12(request.param)


def test_word_tokenizer_roundtrip_padding_and_save(tmp_path):
    from transformers import PreTrainedTokenizerFast
    tok = word_tokenizer(["alice", "bob", "likes", "."])
    assert tok.convert_tokens_to_ids(["<pad>", "<unk>", "<bos>", "alice"]) == [0, 1, 2, 3]
    enc = tok(["alice likes bob .", "bob ."], padding=True)
    assert enc["input_ids"][1][:2] == [0, 0] and enc["attention_mask"][1] == [0, 0, 1, 1]   # left padding
    assert tok.decode(enc["input_ids"][0]) == "alice likes bob ."
    assert tok("carol")["input_ids"] == [1]                                                  # unknown word
    tok.save_pretrained(tmp_path)
    back = PreTrainedTokenizerFast.from_pretrained(tmp_path)
    assert back("alice likes bob .")["input_ids"] == enc["input_ids"][0]
    with pytest.raises(ValueError, match="repeat"):
        word_tokenizer(["a", "a"])
    with pytest.raises(ValueError, match="whitespace"):
        word_tokenizer(["a b"])
    with pytest.raises(TypeError, match="words"):
        word_tokenizer("ab")
    with pytest.raises(ValueError, match="special"):
        word_tokenizer(["<pad>"])


def test_private_seed_stream_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = tiny_causal_lm(gpt2_config(7, n_embd=8, n_head=2), seed=5)
    assert torch.equal(torch.rand(3), expected)
    b = tiny_causal_lm(gpt2_config(7, n_embd=8, n_head=2), generator=torch.Generator().manual_seed(9))
    c = tiny_causal_lm(gpt2_config(7, n_embd=8, n_head=2), generator=torch.Generator().manual_seed(9))
    assert torch.equal(b.transformer.wte.weight, c.transformer.wte.weight)
    assert not torch.equal(a.transformer.wte.weight, b.transformer.wte.weight)
    with pytest.raises(ValueError, match="not both"):
        tiny_causal_lm(gpt2_config(7, n_embd=8, n_head=2), seed=1, generator=torch.Generator())


def test_layer_adapter_finds_blocks_and_norm(lm12):
    ad = layer_adapter(lm12)
    assert ad.n_layers == 2
    names = {type(ad.final_norm).__name__}
    assert names <= {"LayerNorm", "LlamaRMSNorm", "OlmoLayerNorm", "Olmo2RMSNorm"}
    with pytest.raises(TypeError, match="causal LM"):
        layer_adapter(torch.nn.Linear(2, 2))


def _n_hooks(model):
    with torch.no_grad():   # transformers adds its own output-recording hooks on the first such call
        model(input_ids=torch.tensor([[3, 4]]), output_hidden_states=True)
    return sum(len(b._forward_hooks) + len(b._forward_pre_hooks) for b in layer_adapter(model).blocks)


def test_capture_matches_hidden_states_and_decode(lm12):
    ids = torch.tensor([[3, 4, 5, 6], [7, 8, 9, 10]])
    before = _n_hooks(lm12)
    with torch.no_grad(), capture_activations(lm12, [0, 1, 2]) as acts:
        out = lm12(input_ids=ids, output_hidden_states=True)
    assert torch.allclose(acts[0], out.hidden_states[0]) and torch.allclose(acts[1], out.hidden_states[1])
    with torch.no_grad():
        assert torch.allclose(decode_hidden(lm12, acts[2]), out.logits, atol=1e-5)
    assert _n_hooks(lm12) == before
    with pytest.raises(ValueError, match="layer"):
        with capture_activations(lm12, 3):
            pass


def test_hooks_are_removed_after_an_error(lm12):
    before = _n_hooks(lm12)
    with pytest.raises(RuntimeError, match="boom"):
        with capture_activations(lm12, 1), patch_activations(lm12, 2, lambda h: h):
            raise RuntimeError("boom")
    assert _n_hooks(lm12) == before


def test_patching_and_run_from_layer(lm12):
    ids = torch.tensor([[3, 4, 5, 6], [7, 8, 9, 10]])
    with torch.no_grad(), capture_activations(lm12, 1) as acts:
        clean = lm12(input_ids=ids).logits
        assert torch.allclose(run_from_layer(lm12, ids, 1, acts[1]), clean, atol=1e-5)
        h1 = acts[1].clone()
        with patch_activations(lm12, 1, torch.zeros(16), position=2):
            patched = lm12(input_ids=ids).logits
    assert torch.allclose(patched[:, :2], clean[:, :2], atol=1e-6)          # causal: earlier positions unchanged
    assert not torch.allclose(patched[:, 2], clean[:, 2])
    with torch.no_grad(), patch_activations(lm12, 1, h1[:, 2], position=2):
        assert torch.allclose(lm12(input_ids=ids).logits, clean, atol=1e-5)  # writing the clean state back
    with pytest.raises(ValueError, match="past the sequence"):
        with torch.no_grad(), patch_activations(lm12, 1, torch.zeros(16), position=4):
            lm12(input_ids=ids)
    with pytest.raises(ValueError, match="layer"):
        with patch_activations(lm12, -1, torch.zeros(16), position=0):
            pass


def test_hidden_jacobian_matches_finite_differences(lm12):
    ids = torch.tensor([[3, 4, 5], [6, 7, 8]])
    J, h_src, h_dst = hidden_jacobian(lm12, ids, src_layer=1, dst_layer=2)
    assert J.shape == (2, 16, 16) and h_src.shape == (2, 16)
    eps, j = 1e-3, 5
    e = torch.zeros(16)
    e[j] = eps
    outs = []
    for sign in (1, -1):
        with torch.no_grad(), patch_activations(lm12, 1, h_src + sign * e, position=-1), \
                capture_activations(lm12, 2) as acts:
            lm12(input_ids=ids)
        outs.append(acts[2][:, -1])
    fd = (outs[0] - outs[1]) / (2 * eps)
    assert torch.allclose(J[:, :, j], fd, atol=1e-3)
    J_same, *_ = hidden_jacobian(lm12, ids, src_layer=2, dst_layer=2)
    assert torch.allclose(J_same, torch.eye(16).expand(2, 16, 16), atol=1e-6)   # identity at the same state
    with pytest.raises(ValueError, match="dst_layer"):
        hidden_jacobian(lm12, ids, 2, 1)
    with pytest.raises(ValueError, match="past the sequence"):
        hidden_jacobian(lm12, ids, 1, 2, src_position=5)


def test_padded_scoring_equals_unpadded(lm12):
    prompts = [torch.tensor([3, 4, 5]), torch.tensor([6])]
    responses = torch.tensor([[7, 8], [9, 10]])
    padded = torch.tensor([[3, 4, 5], [0, 0, 6]])
    mask = torch.tensor([[1, 1, 1], [0, 0, 1]])
    with torch.no_grad():
        got = response_logprobs(lm12, padded, responses, prompt_mask=mask)
        one_by_one = torch.cat([response_logprobs(lm12, p[None], r[None]) for p, r in zip(prompts, responses)])
    assert torch.allclose(got, one_by_one, atol=1e-5)
    rm = LastTokenScorer(lm12)
    rm.head.weight.data.normal_(generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        seqs = [torch.tensor([3, 4, 5, 7]), torch.tensor([6, 9])]
        left = torch.tensor([[3, 4, 5, 7], [0, 0, 6, 9]])
        right = torch.tensor([[3, 4, 5, 7], [6, 9, 0, 0]])
        lmask, rmask = (left != 0).long(), (right != 0).long()
        alone = torch.cat([rm(s[None]) for s in seqs])
        assert torch.allclose(rm(left, attention_mask=lmask), alone, atol=1e-5)
        assert torch.allclose(rm(right, attention_mask=rmask), alone, atol=1e-5)
    assert last_positions(rmask).tolist() == [3, 1] and last_positions(lmask).tolist() == [3, 3]


def test_sequence_logprobs_with_labels_and_encode_pairs(lm12):
    tok = word_tokenizer([f"w{i}" for i in range(9)])          # ids 3..11
    enc = encode_pairs(tok, ["w0 w1 w2", "w3"], ["w4 w5", "w6 w7"])
    assert enc["labels"][1].tolist()[:3] == [-100, -100, -100]
    with torch.no_grad():
        got = sequence_logprobs(lm12, enc["input_ids"], enc["labels"], enc["attention_mask"])
        ref0 = response_logprobs(lm12, torch.tensor([[3, 4, 5]]), torch.tensor([[7, 8]]))
        ref1 = response_logprobs(lm12, torch.tensor([[6]]), torch.tensor([[9, 10]]))
    assert torch.allclose(got, torch.cat([ref0, ref1]), atol=1e-5)
    with pytest.raises(ValueError, match="labels"):
        sequence_logprobs(lm12, enc["input_ids"], enc["labels"][:, :2])


def test_cached_scoring_equals_uncached(lm12):
    context = torch.tensor([[3, 4, 5, 6]])
    responses = torch.tensor([[7, 8, 9], [10, 11, 3], [4, 4, 4]])
    with torch.no_grad():
        cache = prefix_cache(lm12, context)
        cached = cached_response_logprobs(lm12, cache, responses)
        again = cached_response_logprobs(lm12, cache, responses[:1])          # the cache is reusable
        plain = response_logprobs(lm12, context.expand(3, -1), responses)
    assert torch.allclose(cached, plain, atol=1e-5) and torch.allclose(again, plain[:1], atol=1e-5)
    with pytest.raises(ValueError, match="rows"):
        with torch.no_grad():
            cached_response_logprobs(lm12, prefix_cache(lm12, context.expand(2, -1)), responses)


def test_train_lm_checkpoints_and_determinism():
    corpus = torch.tensor([[3, 4, 5, 6, 7, 8]] * 4 + [[8, 7, 6, 5, 4, 3]] * 4)

    def run():
        model = tiny_causal_lm(gpt2_config(9, n_positions=8, n_embd=16), seed=0)
        return model, train_lm(model, corpus, steps=30, batch_size=4, lr=1e-2,
                               generator=torch.Generator().manual_seed(0), checkpoint_steps=[0, 10, 30])

    m1, r1 = run()
    m2, r2 = run()
    assert r1.losses == r2.losses and sorted(r1.checkpoints) == [0, 10, 30]
    assert r1.losses[-1] < 0.5 * r1.losses[0]
    assert torch.equal(r1.checkpoints[30]["transformer.wte.weight"], m1.transformer.wte.weight)
    assert not torch.equal(r1.checkpoints[0]["transformer.wte.weight"], m1.transformer.wte.weight)
    with torch.no_grad():
        assert float(lm_loss(m1, corpus)) < r1.losses[0]
    curriculum = train_lm(m2, lambda step, g: corpus[:4] if step < 5 else corpus[4:], steps=8, batch_size=4)
    assert len(curriculum.losses) == 8
    with pytest.raises(ValueError, match="checkpoint_steps"):
        train_lm(m1, corpus, steps=5, checkpoint_steps=[6])
    with pytest.raises(TypeError, match="data"):
        train_lm(m1, "corpus", steps=5)


def _per_parameter_train(model, batches, lr=3e-3, weight_decay=0.01, grad_clip=1.0):
    """The plain loop train_lm must match: one AdamW state per parameter, batches in order."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=True)
    model.train()
    losses = []
    for batch in batches:
        loss = lm_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def test_train_lm_equals_a_plain_adamw_loop_exactly():
    """train_lm is the textbook loop (AdamW, one state per parameter, gradient clipping, batches moved to the
    model's device): its losses and weights equal those of the plain loop above, bit for bit."""
    batches = torch.randint(0, 16, (6, 4, 8), generator=torch.Generator().manual_seed(1))
    reference = tiny_causal_lm(gpt2_config(16, n_positions=8, n_embd=16), seed=0)
    trained = tiny_causal_lm(gpt2_config(16, n_positions=8, n_embd=16), seed=0)
    losses = _per_parameter_train(reference, batches)
    result = train_lm(trained, lambda step, g: batches[step], steps=len(batches))
    assert result.losses == losses
    for (name, p), q in zip(trained.named_parameters(), reference.parameters()):
        assert torch.equal(p, q), name


def test_activation_store_and_splice(lm12):
    ids = torch.tensor([[3, 4, 5, 6], [0, 7, 8, 9], [10, 11, 3, 4]])
    mask = (ids != 0).long()
    store = ActivationStore(lm12, 1, ids, attention_mask=mask, batch_size=4, chunk_size=2,
                            generator=torch.Generator().manual_seed(0))
    assert len(store) == 11 and store.d == 16
    batches = list(store)
    assert [len(b) for b in batches] == [4, 4, 3]
    assert torch.allclose(torch.cat(batches).sum(0), store.activations.sum(0), atol=1e-4)
    ident = spliced_loss(lm12, ids, 1, lambda h: h, attention_mask=mask)
    assert abs(ident["rise"]) < 1e-5
    zero = spliced_loss(lm12, ids, 1, lambda h: torch.zeros_like(h), attention_mask=mask)
    assert zero["spliced"] != pytest.approx(zero["clean"])


# ---- real checkpoints (issue 39): loaded from a folder as a hub id would be, refused early when they cannot run ----

from companion_lib.tinylm import SUPPORTED_CAUSAL_LMS, causal_lm_config, load_causal_lm, parameter_bytes


def _save_checkpoint(model, folder):
    model.save_pretrained(folder)
    word_tokenizer([f"w{i}" for i in range(model.config.vocab_size - 3)]).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("name", LM_CLASSES)
def test_load_causal_lm_round_trips_every_supported_class(name, tmp_path):
    lm12 = _lm12(name)
    folder = _save_checkpoint(lm12, tmp_path / name)
    loaded = load_causal_lm(folder, device="cpu")
    assert loaded.architecture == type(lm12).__name__ in SUPPORTED_CAUSAL_LMS
    assert loaded.dtype == torch.float32 and not loaded.model.training
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        assert torch.allclose(loaded.model(input_ids=ids).logits, lm12(input_ids=ids).logits, atol=1e-6)
    assert loaded.tokenizer("w0 w1")["input_ids"] == [3, 4]
    half = load_causal_lm(folder, device="cpu", dtype="bfloat16")
    assert next(half.model.parameters()).dtype == torch.bfloat16
    n = sum(p.numel() for p in lm12.parameters())
    assert parameter_bytes(lm12.config) == 4 * n and parameter_bytes(lm12.config, torch.float16) == 2 * n


def test_load_causal_lm_refuses_before_reading_weights(tmp_path):
    from transformers import GPT2Config, GPT2ForSequenceClassification

    lm = tiny_causal_lm(gpt2_config(12, n_positions=16, n_embd=16), seed=0)
    folder = _save_checkpoint(lm, tmp_path / "ok")
    need = parameter_bytes(lm.config)
    with pytest.raises(ValueError, match="GiB free"):                       # too large for the device
        load_causal_lm(folder, device="cpu", free_bytes=need)              # (headroom 1.2 does not fit)
    assert load_causal_lm(folder, device="cpu", free_bytes=2 * need).architecture == "GPT2LMHeadModel"
    classifier = GPT2ForSequenceClassification(GPT2Config(vocab_size=12, n_positions=16, n_embd=16, n_layer=1,
                                                          n_head=2, pad_token_id=0))
    classifier.save_pretrained(tmp_path / "cls")
    with pytest.raises(ValueError, match="GPT2ForSequenceClassification.*GPTNeoXForCausalLM"):
        causal_lm_config(tmp_path / "cls")                               # unsupported class: the choices named
    with pytest.raises(ValueError, match="cannot load the config"):
        load_causal_lm(tmp_path / "missing", device="cpu")
    (tmp_path / "notok").mkdir()
    (tmp_path / "notok" / "config.json").write_text((folder / "config.json").read_text())
    with pytest.raises(ValueError, match="cannot load the (tokenizer|weights)"):
        load_causal_lm(tmp_path / "notok", device="cpu")                  # config without weights or tokenizer
    with pytest.raises(ValueError, match="dtype"):
        load_causal_lm(folder, device="cpu", dtype="float64")
    with pytest.raises(TypeError, match="hub id"):
        load_causal_lm(3)
    with pytest.raises(ValueError, match="not available"):
        load_causal_lm(folder, device="cuda:7")


def test_load_causal_lm_passes_the_revision_to_every_loader(tmp_path, monkeypatch):
    """A hub revision (chapter 11's intermediate OLMo checkpoints) reaches the config, tokenizer and weights
    loaders alike; a bad revision is refused before anything loads."""
    import transformers

    lm = tiny_causal_lm(gpt2_config(12, n_positions=16, n_embd=16), seed=0)
    folder = _save_checkpoint(lm, tmp_path / "ok")
    seen = []
    for cls in (transformers.AutoConfig, transformers.AutoTokenizer, transformers.AutoModelForCausalLM):
        original = cls.from_pretrained.__func__

        def spy(klass, *args, _original=original, **kwargs):
            seen.append((klass.__name__, kwargs.get("revision")))
            return _original(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    load_causal_lm(folder, device="cpu", revision="step1000")              # a local folder ignores the revision
    assert {name for name, _ in seen} >= {"AutoConfig", "AutoTokenizer", "AutoModelForCausalLM"}
    assert all(rev == "step1000" for _, rev in seen)
    with pytest.raises(TypeError, match="revision"):
        load_causal_lm(folder, device="cpu", revision="")


def test_load_causal_lm_names_a_corrupt_weights_file(tmp_path):
    lm = tiny_causal_lm(gpt2_config(12, n_positions=16, n_embd=16), seed=0)
    folder = _save_checkpoint(lm, tmp_path / "ok")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])                      # a download cut short
    with pytest.raises(ValueError, match="cannot load the weights"):
        load_causal_lm(folder, device="cpu")
