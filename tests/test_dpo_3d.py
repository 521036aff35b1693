"""Unit tests of companion_lib.dpo_3d: the (Flex-)DPO loss and its diagnostics, the toy model, the tiny-LM world."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from companion_lib.common import module_device
from companion_lib.dpo_3d import (TOY_SCENARIOS, ToyPolicy, dpo_loss, exact_kl_policy_optimization,
                                  exact_logprobs, fit_reference, fit_toy_reference, lm_experiment, make_policy,
                                  make_world,
                                  peaked_distribution, policy_metrics, preference_pairs, prob_space_gradients,
                                  reference_target, rm_loss, run_toy_dpo, toy_pairs, toy_prompts, train_dpo_lm,
                                  train_reward_model)

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
