"""Unit tests of companion_lib.dpo_3d: the (Flex-)DPO loss and its diagnostics, the toy model, the tiny-LM world,
and the full-scale path on tiny checkpoints of the real classes (no download)."""

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from companion_lib.common import module_device
from companion_lib.dpo_3d import (TOY_SCENARIOS, ToyPolicy, dpo_loss, exact_kl_policy_optimization,
                                  exact_logprobs, fit_reference, fit_toy_reference, full_scale, lm_experiment,
                                  load_preference_pairs, make_policy, make_world,
                                  peaked_distribution, policy_metrics, preference_pairs, prob_space_gradients,
                                  reference_target, rm_loss, run_toy_dpo, step_activation_bytes, toy_pairs,
                                  toy_prompts, train_dpo_lm, train_reward_model, training_memory_bytes)

torch.set_num_threads(1)


def random_logps(n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [-5 * torch.rand(n, generator=g, dtype=torch.float64) - 0.01 for _ in range(4)]


# ---------------------------------------------------------------------------------------- the loss
def test_dpo_loss_matches_closed_form_of_trl_sigmoid_loss():
    lc, lr, rc, rr = random_logps()
    beta = 0.3
    out = dpo_loss(lc, lr, rc, rr, beta)
    # TRL's DPOTrainer (loss_type="sigmoid", reverse KL): -logsigmoid(beta * (chosen_logratios - rejected_logratios))
    trl_form = -F.logsigmoid(beta * ((lc - rc) - (lr - rr))).mean()
    assert torch.allclose(out.loss, trl_form)
    assert torch.allclose(out.chosen_reward, beta * (lc - rc))
    assert torch.allclose(out.margin, out.chosen_reward - out.rejected_reward)


def _trl_trainer(tmp_path, beta, **config):
    """TRL's DPOTrainer on a tiny random GPT-2 and four pairs whose completions all have the same length."""
    from datasets import Dataset
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from trl import DPOConfig, DPOTrainer

    from companion_lib.tinylm import gpt2_config, tiny_causal_lm

    words = ["[PAD]", "[EOS]", "a", "b", "c", "d", "e", "f"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[PAD]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", eos_token="[EOS]")
    data = Dataset.from_dict({"prompt": ["a b", "c d", "e f", "b a"],
                              "chosen": [" c d", " e f", " a b", " f f"],
                              "rejected": [" d c", " f e", " b b", " e e"]})
    cfg = gpt2_config(len(words), n_positions=16, n_embd=16)
    policy, ref = tiny_causal_lm(cfg, seed=0), tiny_causal_lm(cfg, seed=1)
    args = DPOConfig(output_dir=str(tmp_path), beta=beta, per_device_train_batch_size=4,
                     report_to="none", use_cpu=True, save_strategy="no", **config)
    trainer = DPOTrainer(model=policy, ref_model=ref, args=args, train_dataset=data, processing_class=hf_tok)
    return trainer, policy, ref


def test_dpo_loss_agrees_with_trl_dpo_trainer(tmp_path):
    """End to end: TRL's own DPOTrainer.compute_loss on a tiny random GPT-2 equals dpo_loss on our log-probs."""
    from companion_lib.tinylm import response_logprobs

    beta = 0.3
    trainer, policy, ref = _trl_trainer(tmp_path, beta)
    batch = next(iter(trainer.get_train_dataloader()))
    trl_loss = trainer.compute_loss(trainer.model, batch)
    ids = batch["input_ids"]
    assert bool((batch["completion_mask"][:, :2] == 0).all()) and bool((batch["completion_mask"][:, 2:] == 1).all())
    with torch.no_grad():
        lp = response_logprobs(policy, ids[:, :2], ids[:, 2:])
        lp_ref = response_logprobs(ref, ids[:, :2], ids[:, 2:])
    (lc, lr), (rc, rr) = lp.chunk(2), lp_ref.chunk(2)     # TRL's batch is [chosen..., rejected...]
    ours = dpo_loss(lc, lr, rc, rr, beta).loss
    assert abs(float(trl_loss) - float(ours)) < 1e-5


def test_sft_term_matches_trl_sft_loss_per_token(tmp_path):
    """The SFT term is TRL's: DPOTrainer with loss_type ["sigmoid", "sft"] and weights [1, lambda] equals
    dpo_loss(..., sft_lambda=lambda, chosen_tokens=|y+|), and differs from the sequence-sum form."""
    from companion_lib.tinylm import response_logprobs

    beta, lam = 0.3, 0.7
    trainer, policy, ref = _trl_trainer(tmp_path, beta, loss_type=["sigmoid", "sft"], loss_weights=[1.0, lam])
    batch = next(iter(trainer.get_train_dataloader()))
    trl_loss = float(trainer.compute_loss(trainer.model, batch))
    ids = batch["input_ids"]
    assert bool((batch["completion_mask"][:, 2:] == 1).all())       # every completion has the same length
    n_tokens = ids.shape[1] - 2
    assert n_tokens > 1
    with torch.no_grad():
        (lc, lr), (rc, rr) = response_logprobs(policy, ids[:, :2], ids[:, 2:]).chunk(2), \
            response_logprobs(ref, ids[:, :2], ids[:, 2:]).chunk(2)
    ours = float(dpo_loss(lc, lr, rc, rr, beta, sft_lambda=lam, chosen_tokens=n_tokens).loss)
    assert abs(trl_loss - ours) < 1e-5
    summed = float(dpo_loss(lc, lr, rc, rr, beta, sft_lambda=lam).loss)   # the sequence-sum form is not TRL's
    assert abs(trl_loss - summed) > 1e-2


def test_sft_term_is_pooled_per_token_mean():
    lc, lr, rc, rr = random_logps(n=5, seed=3)
    lengths = torch.tensor([1, 2, 3, 4, 5])
    out = dpo_loss(lc, lr, rc, rr, 0.1, sft_lambda=0.5, chosen_tokens=lengths)
    dpo = dpo_loss(lc, lr, rc, rr, 0.1).loss
    assert torch.allclose(out.loss, dpo + 0.5 * (-lc.sum() / lengths.sum()))       # NLL per token, pooled
    same = dpo_loss(lc, lr, rc, rr, 0.1, sft_lambda=0.3, chosen_tokens=3)
    assert torch.allclose(same.loss, dpo_loss(lc, lr, rc, rr, 0.1, sft_lambda=0.1).loss)  # 0.3 per token of 3
    for bad in (0, 1.5, True, torch.tensor([1, 2]), torch.zeros(5)):
        with pytest.raises(ValueError, match="chosen_tokens"):
            dpo_loss(lc, lr, rc, rr, 0.1, sft_lambda=0.5, chosen_tokens=bad)


def test_flex_dpo_and_sft_term():
    lc, lr, rc, rr = random_logps(seed=1)
    same = dpo_loss(lc, lr, rc, rr, 0.1, 0.1)
    assert torch.allclose(same.loss, dpo_loss(lc, lr, rc, rr, 0.1).loss)
    flex = dpo_loss(lc, lr, rc, rr, 0.1, 0.05)
    assert torch.allclose(flex.margin, 0.1 * (lc - rc) - 0.05 * (lr - rr))
    sft = dpo_loss(lc, lr, rc, rr, 0.1, sft_lambda=0.5)
    assert torch.allclose(sft.loss, same.loss - 0.5 * lc.mean())
    per_pair = dpo_loss(lc, lr, rc, rr, torch.full_like(lc, 0.1), torch.full_like(lc, 0.05),
                        torch.zeros_like(lc))
    assert torch.allclose(per_pair.loss, flex.loss)


def test_log_gradient_diagnostics_match_autograd_in_probability_space():
    g = torch.Generator().manual_seed(2)
    pc = torch.rand(8, generator=g, dtype=torch.float64).mul(0.9).add(0.05).requires_grad_(True)
    pr = torch.rand(8, generator=g, dtype=torch.float64).mul(0.9).add(0.05).requires_grad_(True)
    ref_c, ref_r = torch.full((8,), 0.3, dtype=torch.float64), torch.full((8,), 0.2, dtype=torch.float64)
    out = dpo_loss(pc.log(), pr.log(), ref_c.log(), ref_r.log(), 0.2, 0.07)
    (out.loss * 8).backward()                                   # per-pair losses, summed
    assert torch.allclose(pc.grad.abs().log(), out.log_grad_chosen)
    assert torch.allclose(pr.grad.abs().log(), out.log_grad_rejected)
    gc, gr = prob_space_gradients(pc.detach(), pr.detach(), ref_c, ref_r, 0.2, 0.07)
    assert torch.allclose(gc, pc.grad) and torch.allclose(gr, pr.grad)
    # Corollary 1 (with Flex-DPO's beta ratio): (dl/dpi-) / (dl/dpi+) = -(beta-/beta+) pi+/pi-
    assert torch.allclose(gr / gc, -(0.07 / 0.2) * pc.detach() / pr.detach())


def test_log_gradients_stay_finite_when_rejected_underflows():
    lc = torch.tensor([-0.5]); lr = torch.tensor([-300.0]); ref = torch.tensor([-1.0])
    out = dpo_loss(lc, lr, ref, ref, 0.1)
    assert torch.isfinite(out.log_grad_rejected).all() and torch.isfinite(out.log_grad_chosen).all()
    assert float(lr.exp()) == 0.0                                 # pi- underflows in float32 ...
    assert out.log_grad_rejected.item() / math.log(10) > 100      # ... but |dl/dpi-| > 1e100 is still known


def test_dpo_loss_errors():
    lc, lr, rc, rr = random_logps()
    with pytest.raises(ValueError, match="shape"):
        dpo_loss(lc, lr[:3], rc, rr)
    with pytest.raises(ValueError, match="NaN"):
        dpo_loss(lc, lr, rc, torch.full_like(rr, float("nan")))
    with pytest.raises(ValueError, match="log-probabilities"):
        dpo_loss(-lc, lr, rc, rr)
    with pytest.raises(TypeError, match="logp_chosen"):
        dpo_loss([0.0], lr, rc, rr)
    with pytest.raises(TypeError, match="floating"):
        dpo_loss(torch.zeros(16, dtype=torch.long), lr, rc, rr)
    with pytest.raises(ValueError, match="beta_chosen"):
        dpo_loss(lc, lr, rc, rr, 0.0)
    with pytest.raises(ValueError, match="beta_rejected"):
        dpo_loss(lc, lr, rc, rr, 0.1, -1.0)
    with pytest.raises(ValueError, match="sft_lambda"):
        dpo_loss(lc, lr, rc, rr, 0.1, sft_lambda=-0.1)
    with pytest.raises(TypeError, match="beta_chosen"):
        dpo_loss(lc, lr, rc, rr, "0.1")


def test_rm_loss_gradients_are_balanced_and_bounded():
    g = torch.Generator().manual_seed(0)
    r_c = (10 * torch.randn(32, generator=g)).requires_grad_(True)
    r_r = (10 * torch.randn(32, generator=g)).requires_grad_(True)
    loss = rm_loss(r_c, r_r)
    assert torch.allclose(loss, -F.logsigmoid(r_c - r_r).mean())
    (loss * 32).backward()
    assert torch.allclose(r_c.grad, -r_r.grad)                    # ratio -1: balanced
    assert torch.allclose(r_c.grad, -torch.sigmoid(r_r - r_c).detach())
    assert bool((r_c.grad.abs() <= 1).all())                      # bounded
    with pytest.raises(ValueError, match="shape"):
        rm_loss(torch.zeros(2), torch.zeros(3))
    with pytest.raises(TypeError, match="reward_chosen"):
        rm_loss([0.0], torch.zeros(1))
    with pytest.raises(ValueError, match="NaN"):
        rm_loss(torch.zeros(1), torch.tensor([float("nan")]))


def test_prob_space_gradients_on_floats():
    gc, gr = prob_space_gradients(0.5, 0.5, 0.5, 0.5, 1.0)
    assert gc == pytest.approx(-1.0) and gr == pytest.approx(1.0)  # s = 1/2, beta/pi = 2
    with pytest.raises(ValueError, match="beta_chosen"):
        prob_space_gradients(0.5, 0.5, 0.5, 0.5, -1.0)


# ---------------------------------------------------------------------------------------- the toy
def test_toy_building_blocks():
    x = toy_prompts(4, 0.5)
    assert torch.allclose(x, 0.5 * torch.eye(4) + 0.25)
    assert torch.equal(toy_prompts(3, 0.0), torch.eye(3))
    t = reference_target()
    assert t.sum().item() == pytest.approx(1.0) and t[0].item() == pytest.approx(0.19)
    assert ToyPolicy(4)(x).exp().sum(-1).allclose(torch.ones(4))
    c, r = toy_pairs(1)
    assert c.tolist() == [0, 1, 2, 3] and r.tolist() == [1, 2, 3, 4]
    c, r = toy_pairs(2)
    assert c.tolist() == [5, 6, 7, 8] and r.tolist() == [1, 2, 3, 4]
    assert set(TOY_SCENARIOS) == {1, 2, 3, 4}
    for bad in (lambda: toy_prompts(0), lambda: toy_prompts(2, 1.5), lambda: toy_pairs(5),
                lambda: reference_target(on_policy=[]), lambda: reference_target(on_mass=1.0),
                lambda: ToyPolicy(0)):
        with pytest.raises(ValueError):
            bad()


def test_run_toy_dpo_batched_equals_separate_runs():
    x = toy_prompts(4, 0.5)
    refs = [fit_toy_reference(x, reference_target(), hidden=16, steps=50, seed=s) for s in (0, 1)]
    c, r = toy_pairs(1)
    single = run_toy_dpo(refs[1], x, c, r, epochs=20, beta_rejected=0.05)
    both = run_toy_dpo(refs, x, torch.stack([c, c]), torch.stack([r, r]), epochs=20, beta_rejected=[0.1, 0.05])
    assert both["p_chosen"].shape == (2, 21, 4)
    for key in single:
        np.testing.assert_allclose(both[key][1], single[key][0], rtol=1e-5, atol=1e-6)
    h = single
    np.testing.assert_allclose(h["p_chosen"] + h["p_rejected"] + h["p_unseen"], 1.0, atol=1e-6)
    assert h["logp_rejected"][0, -1].mean() < h["logp_rejected"][0, 0].mean()   # DPO pushes pi- down
    with pytest.raises(ValueError, match="epochs"):
        run_toy_dpo(refs[0], x, c, r, epochs=0)
    with pytest.raises(ValueError, match="beta_rejected"):
        run_toy_dpo(refs, x, c, r, epochs=1, beta_rejected=[0.1, 0.1, 0.1])
    with pytest.raises(TypeError, match="references"):
        run_toy_dpo([], x, c, r)


# ---------------------------------------------------------------------------------------- the tiny LM
@pytest.fixture(scope="module")
def lm_setup():
    world = make_world(n_prompts=2, n_tokens=4, length=2, seed=0)
    base = peaked_distribution(world, seed=1)
    ref = fit_reference(world, base, seed=0, steps=30, n_embd=16)
    return world, base, ref


def test_world_rewards_and_distributions(lm_setup):
    world, base, _ = lm_setup
    assert world.responses.shape == (16, 2) and world.vocab == [2, 3, 4, 5] and world.gibberish == 5
    table = world.reward_table()
    t0 = world.targets[0]
    assert table[0, world.responses.tolist().index([t0, t0])] == 2.0
    assert table[0, world.responses.tolist().index([5, 5])] == (2.0 if t0 == 5 else 0.0) - 3.0
    assert torch.allclose(base.sum(-1), torch.ones(2))
    assert base[:, world.invalid()].sum() < base[:, ~world.invalid()].sum()
    with pytest.raises(ValueError, match="n_tokens"):
        make_world(n_tokens=2)


def test_policy_metrics_and_pairs(lm_setup):
    world, base, ref = lm_setup
    with torch.no_grad():
        table = exact_logprobs(ref, world)
    assert torch.allclose(table.logsumexp(-1), torch.zeros(2), atol=1e-5)
    m = policy_metrics(table, table, world)
    assert m["kl"] == pytest.approx(0.0, abs=1e-6) and 0 <= m["invalid_mass"] <= 1
    pairs = preference_pairs(world, base, base, n_per_prompt=5, seed=0)
    r = world.reward_table()
    assert len(pairs["prompt"]) == 10
    assert bool((r[pairs["prompt"], pairs["chosen"]] > r[pairs["prompt"], pairs["rejected"]]).all())
    with pytest.raises(ValueError, match="shape"):
        preference_pairs(world, base[:1], base, 5)


def test_dpo_rm_and_exact_rlhf_loops(lm_setup):
    world, base, ref = lm_setup
    pairs = preference_pairs(world, base, base, n_per_prompt=8, seed=0)
    ev = preference_pairs(world, base, base, n_per_prompt=8, seed=1)
    h = train_dpo_lm(ref, world, pairs, epochs=3, batch_size=8, lr=1e-2, eval_pairs=ev)
    assert set(h) >= {"logp_chosen", "logp_rejected", "reward", "invalid_mass", "kl", "unseen_mass", "accuracy"}
    assert all(len(v) == 4 for v in h.values())
    assert h["kl"][0] == pytest.approx(0.0, abs=1e-6) and h["kl"][-1] > 0
    assert h["logp_rejected"][-1] < h["logp_rejected"][0]
    ends = train_dpo_lm(ref, world, pairs, epochs=3, batch_size=8, lr=1e-2, eval_pairs=ev, curves=False)
    assert all(len(v) == 2 for v in ends.values())                          # start and end only ...
    for key, v in ends.items():                                             # ... of the same training
        np.testing.assert_array_equal(v, h[key][[0, -1]])
    rm, acc = train_reward_model(ref, world, pairs, ev, epochs=3, batch_size=8, lr=1e-2)
    assert acc.shape == (4,) and acc[0] == 0.5 and 0 <= acc[-1] <= 1     # ties count half at the start
    policy, hist = exact_kl_policy_optimization(ref, world, world.reward_table(), beta=0.1, steps=20, lr=1e-2)
    assert hist["reward"][-1] > hist["reward"][0]
    with pytest.raises(ValueError, match="beta"):
        exact_kl_policy_optimization(ref, world, world.reward_table(), beta=0.0)
    with pytest.raises(ValueError, match="reward"):
        exact_kl_policy_optimization(ref, world, world.reward_table()[:1])
    assert make_policy(world, seed=0).config.vocab_size == world.vocab_size


def test_an_explicit_cpu_device_gives_the_same_numbers(lm_setup):
    small = dict(n_pairs=2, epochs=1, batch_size=8, ref_steps=2, rlhf_steps=2, beta_sweep=(0.05,))
    default, cpu = lm_experiment(0, **small), lm_experiment(0, device="cpu", **small)
    assert set(cpu) == set(default) == {"S1", "S2", "S3", "S4", "flex0.05", "sft", "rm", "rlhf"}
    for run, hist in default.items():
        assert set(cpu[run]) == set(hist)
        for key, v in hist.items():
            assert isinstance(cpu[run][key], np.ndarray)
            np.testing.assert_array_equal(cpu[run][key], v)
    if not torch.cuda.is_available():                  # the argument reaches the device choice, before any work
        with pytest.raises(ValueError, match="not available"):
            lm_experiment(0, device="cuda", **small)
    world, base, ref = lm_setup
    on_cpu = fit_reference(world, base, seed=0, steps=30, n_embd=16, device="cpu")
    assert module_device(on_cpu) == torch.device("cpu")
    for (name, p), q in zip(ref.state_dict().items(), on_cpu.state_dict().values()):
        assert torch.equal(p, q), name
    # the model is built where asked (on meta, which allocates nothing; no step runs there)
    assert module_device(fit_reference(world, base, seed=0, steps=0, n_embd=16, device="meta")).type == "meta"


# ---------------------------------------------------------------------------------------- at full scale
REAL_ARCHS = ("gpt2", "neox", "olmo", "olmo2", "llama")
PAIR_WORDS = ("who what is the sky sea blue green red a good bad answer tell me about cats dogs they are nice "
              "mean").split()


def write_pairs(path, n=24, seed=0):
    """``n`` preference pairs over PAIR_WORDS in the public JSON-lines format (with a blank line)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        lines.append(json.dumps({"prompt": " ".join(rng.choices(PAIR_WORDS[:8], k=3)),
                                 "chosen": " ".join(rng.choices(PAIR_WORDS, k=4)),
                                 "rejected": " ".join(rng.choices(PAIR_WORDS, k=5))}))
    lines.insert(3, "")
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Path(path)


SMALL = dict(n_train=8, n_monitor=4, n_heldout=4, steps=6, batch_size=4, eval_every=3, device="cpu")


def test_load_preference_pairs_reads_the_public_formats(tmp_path):
    import gzip

    path = write_pairs(tmp_path / "pairs.jsonl", n=5)
    pairs = load_preference_pairs(path)
    first = json.loads(path.read_text().splitlines()[0])
    assert len(pairs) == 5 and pairs[0].prompt == first["prompt"] and pairs[0].rejected == first["rejected"]
    assert len(load_preference_pairs(str(path), limit=2)) == 2
    # UltraFeedback-binarized: message lists, the last assistant reply is the response
    uf = {"prompt": "tell me", "chosen": [{"role": "user", "content": "tell me"},
                                          {"role": "assistant", "content": "cats are nice"}],
          "rejected": [{"role": "user", "content": "tell me"}, {"role": "assistant", "content": "dogs"}]}
    # Anthropic HH-RLHF (gzipped, as the hub stores it): two transcripts sharing all but the last reply
    hh = {"chosen": "\n\nHuman: sky?\n\nAssistant: blue\n\nHuman: sea?\n\nAssistant: green",
          "rejected": "\n\nHuman: sky?\n\nAssistant: blue\n\nHuman: sea?\n\nAssistant: red"}
    (tmp_path / "uf.jsonl").write_text(json.dumps(uf) + "\n", encoding="utf-8")
    with gzip.open(tmp_path / "hh.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(json.dumps(hh) + "\n")
    (u,) = load_preference_pairs(tmp_path / "uf.jsonl")
    assert (u.prompt, u.chosen, u.rejected) == ("tell me", "cats are nice", "dogs")
    (h,) = load_preference_pairs(tmp_path / "hh.jsonl.gz")
    assert h.prompt == "\n\nHuman: sky?\n\nAssistant: blue\n\nHuman: sea?\n\nAssistant:"
    assert (h.chosen, h.rejected) == (" green", " red")
    assert h.prompt + h.chosen == hh["chosen"] and h.prompt + h.rejected == hh["rejected"]


@pytest.mark.parametrize("line, problem", [
    ("not json", "is not JSON"),
    ('["a", "b"]', "not an object"),
    ('{"prompt": "a", "chosen": "b"}', "lacks the field(s) rejected"),
    ('{"prompt": "a", "chosen": [{"role": "user", "content": "b"}], "rejected": "c"}', "without an assistant message"),
    ('{"prompt": "a", "chosen": 3, "rejected": "c"}', "'chosen' is a int, not a string"),
    ('{"chosen": "Human: hi Assistant: yo", "rejected": "Human: hi Assistant: no"}', "no '\\n\\nAssistant:' turn"),
    ('{"chosen": "\\n\\nHuman: hi\\n\\nAssistant: yo", "rejected": "\\n\\nHuman: ho\\n\\nAssistant: no"}',
     "share no prompt"),
    ('{"prompt": "a", "chosen": " ", "rejected": "c"}', "'chosen' is empty"),
    ('{"prompt": "a", "chosen": "b", "rejected": "b"}', "identical"),
])
def test_load_preference_pairs_names_a_wrong_format(tmp_path, line, problem):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "x", "chosen": "y", "rejected": "z"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as err:
        load_preference_pairs(path)
    assert problem in str(err.value) and "line 2" in str(err.value)
    if problem != "identical":     # the accepted formats are named
        assert '"prompt", "chosen" and "rejected"' in str(err.value) and "HH-RLHF" in str(err.value)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="holds no preference pair"):
        load_preference_pairs(empty)
    with pytest.raises(ValueError, match="no data file"):
        load_preference_pairs(tmp_path / "missing.jsonl")
    with pytest.raises(TypeError, match="path"):
        load_preference_pairs(3)


def test_memory_estimates_count_weights_optimiser_and_activations(tiny_real_lm):
    from transformers import AutoConfig

    from companion_lib.tinylm import parameter_bytes

    config = AutoConfig.from_pretrained(tiny_real_lm("llama", PAIR_WORDS))
    acts = step_activation_bytes(2, 16, 32, config.vocab_size, 4, 10)
    assert acts == 4 * (2 * 4 * 10) * (2 * (6 * 16 + 4 * 32) + 3 * config.vocab_size)
    w = parameter_bytes(config, torch.float32)
    assert training_memory_bytes(config, "float32", 4, 10, headroom=1.0) == 4 * w + acts
    assert training_memory_bytes(config, "float32", 8, 10) > training_memory_bytes(config, "float32", 4, 10)
    with pytest.raises(ValueError, match="dtype"):
        training_memory_bytes(config, "int8")
    with pytest.raises(ValueError, match="batch_size"):
        step_activation_bytes(2, 16, 32, 10, 0, 10)


@pytest.mark.parametrize("arch", REAL_ARCHS)
def test_full_scale_on_each_real_class(tiny_real_lm, tmp_path, arch):
    from companion_lib.tinylm import encode_pairs, load_causal_lm, sequence_logprobs

    folder = tiny_real_lm(arch, PAIR_WORDS)
    data = write_pairs(tmp_path / "pairs.jsonl")
    out = full_scale(str(folder), data, lr=1e-2, **SMALL)
    assert out["architecture"] in ("GPT2LMHeadModel", "GPTNeoXForCausalLM", "OlmoForCausalLM",
                                   "Olmo2ForCausalLM", "LlamaForCausalLM")
    np.testing.assert_array_equal(out["steps"], [0, 3, 6])
    dpo, flex = out["runs"]["dpo"], out["runs"]["flex"]
    for run in (dpo, flex):
        assert run["logp_chosen"].shape == run["logp_rejected"].shape == (3, 4)
        assert run["heldout_chosen"].shape == run["heldout_rejected"].shape == (3, 4)
        assert run["loss"].shape == (6,) and run["loss"][0] == pytest.approx(math.log(2), abs=1e-5)  # policy = ref
        assert (run["logp_chosen"] < 0).all() and np.isfinite(run["heldout_rejected"]).all()
    assert flex["beta_rejected"] == 0.04 and dpo["beta_rejected"] == 0.1
    for key in ("logp_chosen", "logp_rejected", "heldout_chosen"):     # Flex-DPO starts where DPO started
        np.testing.assert_allclose(flex[key][0], dpo[key][0], rtol=0, atol=1e-5)
    margin = dpo["logp_chosen"] - dpo["logp_rejected"]                  # DPO widens the training margin
    assert margin[-1].mean() > margin[0].mean()
    # step 0 agrees with scoring each pair alone, unpadded, with the checkpoint loaded afresh
    pairs = load_preference_pairs(data)
    lm = load_causal_lm(folder, device="cpu")
    singles = [float(sequence_logprobs(lm.model, **{k: v for k, v in encode_pairs(lm.tokenizer, [p.prompt],
                                                                                  [p.chosen]).items()}))
               for p in pairs]
    for value in dpo["logp_chosen"][0]:
        assert min(abs(value - s) for s in singles) < 1e-4


def test_full_scale_without_flex_and_with_long_pairs_skipped(tiny_real_lm, tmp_path):
    folder = tiny_real_lm("gpt2", PAIR_WORDS)
    data = write_pairs(tmp_path / "pairs.jsonl")
    with open(data, "a", encoding="utf-8") as f:
        for _ in range(6):
            f.write(json.dumps({"prompt": " ".join(["sky"] * 30), "chosen": "a", "rejected": "b"}) + "\n")
    small = {**SMALL, "n_train": 20}                       # 20 + 4 held out: every short pair is needed
    out = full_scale(folder, data, flex_beta_rejected=None, max_length=10, **small)
    assert set(out["runs"]) == {"dpo"}
    # the seeded order is walked until the last short pair: the long ones met before it are skipped
    order = torch.randperm(30, generator=torch.Generator().manual_seed(0)).tolist()
    last_short = max(k for k, i in enumerate(order) if i < 24)
    assert out["n_skipped"] == sum(i >= 24 for i in order[:last_short])


class _NoWeights(Exception):
    pass


@pytest.fixture
def no_weights(monkeypatch):
    """Fail the test if full_scale reaches the loading of weights."""
    from companion_lib.dpo_3d import fullscale

    def refuse(*args, **kwargs):
        raise _NoWeights("the weights were loaded before the error")

    monkeypatch.setattr(fullscale, "load_causal_lm", refuse)


def test_full_scale_refuses_bad_input_before_loading_weights(tiny_real_lm, tmp_path, no_weights):
    import transformers as tf

    data = write_pairs(tmp_path / "pairs.jsonl")
    folder = tiny_real_lm("llama", PAIR_WORDS)
    # an unsupported class: the error names it and the supported ones
    bert = tmp_path / "bert"
    config = tf.BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=8)
    config.architectures = ["BertForMaskedLM"]
    config.save_pretrained(bert)
    with pytest.raises(ValueError, match="BertForMaskedLM.*GPT2LMHeadModel.*LlamaForCausalLM"):
        full_scale(bert, data, **SMALL)
    # a folder that does not load
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="cannot load the config"):
        full_scale(empty, data, **SMALL)
    # too large for the device's memory: the error names the need and the choices
    with pytest.raises(ValueError, match="GiB.*smaller batch_size or max_length, a smaller checkpoint"):
        full_scale(folder, data, free_bytes=10_000, **SMALL)
    # data in the wrong format is refused before the model is even looked at
    bad = tmp_path / "qa.jsonl"
    bad.write_text(json.dumps({"question": "a", "answer": "b"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="lacks the field.*prompt, chosen, rejected.*JSON lines"):
        full_scale(tmp_path / "no-such-model", bad, **SMALL)
    # too few pairs, or too few that fit max_length
    with pytest.raises(ValueError, match="holds 24 pairs"):
        full_scale(folder, data, **{**SMALL, "n_train": 22})
    with pytest.raises(ValueError, match="fit max_length=3"):
        full_scale(folder, data, max_length=3, **SMALL)
    # arguments
    with pytest.raises(ValueError, match="n_monitor"):
        full_scale(folder, data, **{**SMALL, "n_monitor": 1})
    with pytest.raises(ValueError, match="n_monitor .* must not exceed n_train"):
        full_scale(folder, data, **{**SMALL, "n_monitor": 9})
    with pytest.raises(ValueError, match="dtype"):
        full_scale(folder, data, dtype="int8", **SMALL)
    with pytest.raises(ValueError, match="flex_beta_rejected"):
        full_scale(folder, data, flex_beta_rejected=0.0, **SMALL)
    with pytest.raises(_NoWeights):              # the checks passed: only now would weights load
        full_scale(folder, data, **SMALL)


@pytest.mark.slow
def test_reproduce_page_runs_at_full_scale_on_a_tiny_llama(tiny_real_lm, tmp_path, run_reproduce):
    import time

    root = Path(__file__).resolve().parents[1]
    folder = tiny_real_lm("llama", PAIR_WORDS)
    data = write_pairs(tmp_path / "pairs.jsonl")
    # the page's tiny run at small sizes at which its prose checks still hold (two seeds, one model each, half
    # the epochs), then the full-scale section on a tiny Llama and eight pairs
    params = dict(seeds=[0, 1], lm_replicates=1, lm_epochs=10, ref_steps=100, rlhf_steps=50,
                  model=str(folder), data=str(data), fs_train_pairs=8, fs_monitor=4, fs_heldout=4, fs_steps=4,
                  fs_batch=4, fs_lr=1e-2, fs_max_length=32, fs_eval_every=2)
    t0 = time.perf_counter()
    executed, claims, error = run_reproduce(root / "chapters" / "10-dpo-3d" / "reproduce.md", params, "full-scale",
                                            checks_off_before="At full scale")
    elapsed = time.perf_counter() - t0
    assert error is None, error
    (figure_cell,) = [c for c in executed["cells"] if c["cell_type"] == "code" and "fs_claims.decide" in c["source"]]
    assert any("image/png" in o.get("data", {}) for o in figure_cell["outputs"])      # the full-scale figure
    assert claims is not None and claims["chapter"] == "10-dpo-3d-full-scale"
    assert [c["key"] for c in claims["claims"]] == ["fs_drop", "fs_chosen_flat", "fs_degrade", "fs_dispersion",
                                                    "fs_flex"]
    assert all(c["n"] == 4 and c["verdict"] for c in claims["claims"])
    written = json.loads((tmp_path / "claims" / "10-dpo-3d-full-scale.json").read_text(encoding="utf-8"))
    assert [c["key"] for c in written["claims"]] == [c["key"] for c in claims["claims"]]
    print(f"reproduce page at full scale on a tiny Llama: {elapsed:.1f} s")
