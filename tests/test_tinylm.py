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
