"""The chapter's experiment: train a tiny GPT-2 on the fact world with checkpoints, then measure every
relation's LRE at every checkpoint beside its exact co-occurrence count (the reproduction's Figs. 2-3)."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import torch

from ..common.device import resolve_device
from ..tinylm import gpt2_config, tiny_causal_lm, train_lm
from .frequency import cooccurrence_counts
from .lre import causality, faithfulness, fit_lre, lm_states, lre_logits, select_beta, select_rank
from .world import FactWorld, fact_prompts, make_world, token_stream

__all__ = ["edit_pairs", "fact_lm", "train_fact_lm", "evaluate_checkpoint", "lre_experiment", "relation_table"]

FEATURES_LM = ["lm_logprob", "lm_correct"]
FEATURES_LRE = ["faith", "faith_prob", "hard", "soft"]


def edit_pairs(object_index) -> tuple[np.ndarray, np.ndarray]:
    """For each item and each *other* object among the items, one edit: (source item, first item with that object)."""
    obj = np.asarray(object_index)
    first = {o: int(np.flatnonzero(obj == o)[0]) for o in np.unique(obj)}
    src, tgt = [], []
    for i, o in enumerate(obj):
        for o2, j in first.items():
            if o2 != o:
                src.append(i)
                tgt.append(j)
    return np.array(src), np.array(tgt)


def fact_lm(world: FactWorld, seed: int = 0, n_embd: int = 64, n_layer: int = 4, n_head: int = 4,
            device="cpu"):
    """A fresh tiny GPT-2 for the fact world (the note's size: width 64, 4 blocks, 4 heads, no dropout).

    Its GELU is the fused kernel of GPT-2's formula (``gelu_pytorch_tanh``): the chapter trains several of these
    models, and the fused kernel saves about an eighth of each training's time.
    ``device`` is where the model is put once initialised on the CPU (the same weights anywhere); it defaults
    to the CPU, where the implementation and exercise pages compare its outputs with CPU tensors, and
    :func:`train_fact_lm` passes :func:`companion_lib.common.device` (``None`` means that here too).
    """
    cfg = gpt2_config(world.vocab_size, n_positions=world.sequence_length(), n_embd=n_embd, n_layer=n_layer,
                      n_head=n_head, activation="gelu_pytorch_tanh")
    dev = resolve_device(device)
    return tiny_causal_lm(cfg, seed=seed).to(dev)


def train_fact_lm(world: FactWorld, stream: torch.Tensor, seed: int, checkpoint_steps, n_embd: int = 64,
                  n_layer: int = 4, n_head: int = 4, lr: float = 3e-3, device=None):
    """A tiny GPT-2 trained on ``stream`` (one batch per step, AdamW) with checkpoints kept in memory.

    ``device`` (default :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the
    model is trained and returned; ``stream`` stays on the CPU, each batch moves there, and the checkpoints
    are CPU copies.
    """
    model = fact_lm(world, seed, n_embd, n_layer, n_head, device=device)
    result = train_lm(model, lambda step, g: stream[step], steps=stream.shape[0], lr=lr,
                      checkpoint_steps=checkpoint_steps, generator=torch.Generator().manual_seed(seed))
    model.eval()
    return model, result


def evaluate_checkpoint(model, world: FactWorld, layer: int, betas=(1.0, 2.0, 4.0, 8.0),
                        ranks=(4, 8, 16, 32, 64), n_fit: int = 8, order: str = "relation-first") -> pd.DataFrame:
    """One row per (relation, test subject): the LM's and the LRE's measures at this checkpoint.

    Subjects ``0..n_fit-1`` fit the LRE, choose β (faithfulness) and the rank (hard causality on edits
    among themselves), as the official sweep does, but on the fitting subjects; the others are tested.
    Each test subject is edited towards every other object of its relation (``hard``/``soft`` are the means).
    The work runs where ``model`` is (:func:`companion_lib.common.module_device`); the measures come back to
    the CPU once per relation.
    """
    pos = -1 if order == "relation-first" else 1
    fit = np.arange(n_fit)
    test = np.arange(n_fit, world.n_subjects)
    if test.size == 0:
        raise ValueError("n_fit leaves no test subjects")
    d = model.config.hidden_size
    ranks = [r for r in ranks if r <= d]
    rows = []
    for r in range(world.n_relations):
        answers = torch.as_tensor(world.answer_tokens[r])
        p_fit, p_test = fact_prompts(world, r, fit, order), fact_prompts(world, r, test, order)
        lre = fit_lre(model, p_fit, layer, subject_position=pos)
        fit_states = lm_states(model, p_fit, layer, pos)   # the LM's own states: computed once per prompt set
        lre = lre.with_beta(select_beta(model, lre, p_fit, betas, pos, states=fit_states))
        fs, ft = edit_pairs(world.answer_index[fit])
        rank = select_rank(model, lre, p_fit, fs, ft, answers[fit][fs], answers[fit][ft], ranks, pos,
                           states=fit_states)
        test_states = lm_states(model, p_test, layer, pos)
        s, _, logits = test_states
        lp = torch.log_softmax(logits, -1).cpu()        # .cpu(): a no-op on the CPU
        lre_lp = torch.log_softmax(lre_logits(model, lre, s), -1).cpu()
        a_test = answers[test]
        ts, tt = edit_pairs(world.answer_index[test])
        hard, soft = causality(model, lre, p_test, ts, tt, a_test[ts], a_test[tt], rank, pos, states=test_states)
        faith = faithfulness(model, lre, p_test, pos, states=test_states)
        logits, hard, soft, faith = logits.cpu(), hard.cpu(), soft.cpu(), faith.cpu()
        for i, subj in enumerate(test):
            mine = ts == i
            rows.append(dict(relation=r, background=bool(world.background[r]), subject=int(subj),
                             lm_correct=float(logits[i].argmax() == a_test[i]), lm_logprob=float(lp[i, a_test[i]]),
                             faith=float(faith[i]), faith_prob=float(lre_lp[i, a_test[i]]),
                             hard=float(hard[mine].float().mean()), soft=float(soft[mine].float().mean()),
                             beta=lre.beta, rank=rank))
    return pd.DataFrame(rows)


def lre_experiment(seed: int, steps: int = 500, batch_size: int = 32, checkpoints=(120, 140, 160, 200, 250, 300, 400, 500),
                   n_embd: int = 64, n_layer: int = 4, layer: int = 2, lr: float = 3e-3, intro_step: int = 100,
                   order: str = "relation-first", device=None) -> dict:
    """Everything the reproduction needs for one seed: per-example measures at every checkpoint with counts.

    Returns ``{"examples": DataFrame, "losses": list, "states": {step: state_dict}}``; ``examples`` has
    one row per (checkpoint, relation, test subject) with ``cooc`` (sequences holding subject and object,
    up to the checkpoint), ``subj_count`` and ``obj_count``. The world is ``make_world(intro_step, seed)``.
    ``device`` (default :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the
    model trains and every checkpoint is measured; the corpus, the counts and the results stay on the CPU.
    """
    world = make_world(intro_step=intro_step, seed=seed)
    stream = token_stream(world, steps, batch_size, seed=seed, order=order)
    model, result = train_fact_lm(world, stream, seed, checkpoints, n_embd=n_embd, n_layer=n_layer, lr=lr,
                                  device=device)
    subj, ans = world.subject_tokens.ravel(), world.answer_tokens.ravel()
    pairs, terms = cooccurrence_counts(stream, subj, ans, world.vocab_size, checkpoints)
    frames = []
    probe = copy.deepcopy(model)
    for k, step in enumerate(checkpoints):
        probe.load_state_dict(result.checkpoints[step])
        df = evaluate_checkpoint(probe, world, layer, order=order)
        flat = df.relation.to_numpy() * world.n_subjects + df.subject.to_numpy()
        df.insert(0, "step", step)
        df.insert(0, "seed", seed)
        df["cooc"] = pairs[k, flat]
        df["subj_count"] = terms[k, subj[flat]]
        df["obj_count"] = terms[k, ans[flat]]
        frames.append(df)
    return {"examples": pd.concat(frames, ignore_index=True), "losses": result.losses,
            "states": result.checkpoints}


def relation_table(examples: pd.DataFrame) -> pd.DataFrame:
    """Mean of every measure per (seed, checkpoint, relation): the points of Fig. 2."""
    cols = ["cooc", "lm_correct", "lm_logprob", "faith", "faith_prob", "hard", "soft"]
    return (examples.groupby(["seed", "step", "relation", "background"], as_index=False)[cols].mean())
