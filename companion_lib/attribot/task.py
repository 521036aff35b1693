r"""The synthetic open-book QA task and the tiny model family of the AttriBoT chapter.

**Category-copy QA.** A context of ``n_paragraphs`` paragraphs, each of ``sentences_per_paragraph``
sentences of four tokens ``[x, f, f, .]`` and a closing paragraph mark ``P``. Exactly one sentence per
category carries a content word (``x`` is a word of that category); the others carry a filler. The
question ``Q c`` asks for the context's word of category ``c``; the response is that word. A prompt asks
two questions, ``Q c1 w1 Q c2 w2``, so two sources (sentences) are relevant to the response
:math:`R = (w_1, w_2)`, whose log-likelihood sums over the two answer positions (the question tokens are
masked, as the official code masks the prompt with label -100).

**The family.** Three GPT-2 models with the same tokenizer: a target and two proxies of different
size and quality (the small one deliberately under-trained). They are trained on contexts with random
paragraphs and sentences removed, so that every ablated context of the chapter is in distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..common.device import resolve_device
from ..common.device import module_device
from ..common.validation import check_positive_int
from ..tinylm import gpt2_config, non_embedding_params, tiny_causal_lm, train_loop, word_tokenizer
from .prompt import ContextPrompt

__all__ = ["N_CATEGORIES", "WORDS_PER_CATEGORY", "N_FILLERS", "task_vocabulary", "task_tokenizer",
           "make_example", "make_prompts", "training_batch", "FamilyMember", "FAMILY", "train_member",
           "train_family", "load_member", "answer_accuracy", "non_embedding_params"]

N_CATEGORIES = 8
WORDS_PER_CATEGORY = 6
N_FILLERS = 16


def task_vocabulary() -> list[str]:
    """Words ``w<c>_<j>``, categories ``c<c>``, fillers ``f<k>``, the marks ``.``, ``P`` and ``Q``."""
    words = [f"w{c}_{j}" for c in range(N_CATEGORIES) for j in range(WORDS_PER_CATEGORY)]
    cats = [f"c{c}" for c in range(N_CATEGORIES)]
    fills = [f"f{k}" for k in range(N_FILLERS)]
    return words + cats + fills + [".", "P", "Q"]


def task_tokenizer():
    """The word-level tokenizer shared by the whole model family (``companion_lib.tinylm.word_tokenizer``)."""
    return word_tokenizer(task_vocabulary())


@dataclass(frozen=True)
class _Ids:
    bos: int
    dot: int
    par: int
    q: int
    word0: int
    cat0: int
    fill0: int


def _ids(tok) -> _Ids:
    v = tok.get_vocab()
    return _Ids(v["<bos>"], v["."], v["P"], v["Q"], v["w0_0"], v["c0"], v["f0"])


def make_example(rng: np.random.Generator, tok, n_paragraphs: int = 4, sentences_per_paragraph: int = 4,
                 n_questions: int = 2) -> ContextPrompt:
    """One prompt ``<bos> context Q c1 w1 Q c2 w2`` with its sentence sources and paragraph groups."""
    check_positive_int(n_paragraphs, "n_paragraphs")
    check_positive_int(sentences_per_paragraph, "sentences_per_paragraph")
    n_sent = n_paragraphs * sentences_per_paragraph
    if n_sent < N_CATEGORIES:
        raise ValueError(f"the context needs at least {N_CATEGORIES} sentences, got {n_sent}")
    if not 1 <= n_questions <= N_CATEGORIES:
        raise ValueError(f"n_questions must be in [1, {N_CATEGORIES}], got {n_questions}")
    I = _ids(tok)
    word = rng.integers(0, WORDS_PER_CATEGORY, N_CATEGORIES)
    slots = rng.permutation(n_sent)[:N_CATEGORIES]          # slots[c]: the sentence holding category c
    content = {int(s): c for c, s in enumerate(slots)}
    ids, sources, groups = [I.bos], [], []
    for p in range(n_paragraphs):
        g0 = len(ids)
        for s in range(sentences_per_paragraph):
            k = p * sentences_per_paragraph + s
            first = (I.word0 + content[k] * WORDS_PER_CATEGORY + int(word[content[k]]) if k in content
                     else I.fill0 + int(rng.integers(N_FILLERS)))
            sources.append((len(ids), len(ids) + 4))
            ids += [first, I.fill0 + int(rng.integers(N_FILLERS)), I.fill0 + int(rng.integers(N_FILLERS)), I.dot]
        ids.append(I.par)
        groups.append((g0, len(ids)))
    context = (1, len(ids))
    answers = []
    for c in rng.permutation(N_CATEGORIES)[:n_questions]:
        ids += [I.q, I.cat0 + int(c), I.word0 + int(c) * WORDS_PER_CATEGORY + int(word[c])]
        answers.append(len(ids) - 1)
    return ContextPrompt(tuple(ids), tuple(sources), tuple(groups), tuple(answers), context)


def make_prompts(n: int, seed: int, tok, **kwargs) -> list[ContextPrompt]:
    """``n`` evaluation prompts drawn from ``default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    return [make_example(rng, tok, **kwargs) for _ in range(check_positive_int(n, "n"))]


def training_batch(rng: np.random.Generator, tok, batch_size: int, n_questions: int = 4,
                   p_drop_paragraph: float = 0.25, p_drop_sentence: float = 0.15,
                   **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """A right-padded batch (ids, labels with -100 off the answers) of contexts with random parts removed.

    Each context drops every paragraph with probability ``p_drop_paragraph`` and every remaining sentence
    with probability ``p_drop_sentence``; the questions ask only for categories still in the context.
    """
    I = _ids(tok)
    rows = []
    for _ in range(batch_size):
        ex = make_example(rng, tok, **kwargs)
        removed = []
        for gi, (a, b) in enumerate(ex.groups):
            if rng.random() < p_drop_paragraph and len(removed) < len(ex.groups) - 1:
                removed.append((a, b))
            else:
                removed += [s for s in ex.sources if a <= s[0] < b and rng.random() < p_drop_sentence]
        removed.sort()
        ids = np.array(ex.ids[:ex.context[1]])
        keep = np.ones(len(ids), bool)
        for a, b in removed:
            keep[a:b] = False
        ctx = ids[keep]
        present = [int(t) - I.word0 for t in ctx if I.word0 <= t < I.word0 + N_CATEGORIES * WORDS_PER_CATEGORY]
        if not present:
            ctx, present = ids, [int(t) - I.word0 for t in ids
                                 if I.word0 <= t < I.word0 + N_CATEGORIES * WORDS_PER_CATEGORY]
        seq, lab = list(ctx), [-100] * len(ctx)
        for w in rng.choice(present, n_questions, replace=len(present) < n_questions):
            seq += [I.q, I.cat0 + w // WORDS_PER_CATEGORY, I.word0 + w]
            lab += [-100, -100, I.word0 + w]
        rows.append((seq, lab))
    L = max(len(s) for s, _ in rows)
    ids = torch.full((batch_size, L), tok.pad_token_id, dtype=torch.long)
    labels = torch.full((batch_size, L), -100, dtype=torch.long)
    for i, (s, lab) in enumerate(rows):
        ids[i, :len(s)] = torch.tensor(s)
        labels[i, :len(lab)] = torch.tensor(lab)
    return ids, labels


@dataclass(frozen=True)
class FamilyMember:
    """One model of the family: its GPT-2 size and its training steps."""

    name: str
    n_embd: int
    n_layer: int
    n_head: int
    steps: int


#: The target and its two proxies (the research note's family; the small proxy is under-trained on purpose).
FAMILY = (FamilyMember("target", 96, 3, 4, 150), FamilyMember("proxy-mid", 48, 2, 4, 400),
          FamilyMember("proxy-small", 32, 2, 2, 180))


def _answer_loss(model: nn.Module, batch) -> torch.Tensor:
    dev = module_device(model)
    ids, labels = (t.to(dev) for t in batch)      # a batch drawn on the CPU, moved to the model's device
    logits = model(input_ids=ids).logits[:, :-1]
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                       ignore_index=-100)


def train_member(member: FamilyMember, seed: int, batch_size: int = 32, lr: float = 3e-3,
                 n_positions: int = 96, steps: int | None = None, device=None) -> dict[str, torch.Tensor]:
    """Train one model of the family on answer tokens only (AdamW, one-cycle schedule); return its state_dict.

    Uses ``companion_lib.tinylm``: :func:`word_tokenizer`, :func:`gpt2_config`, :func:`tiny_causal_lm`,
    :func:`train_loop`. Deterministic given ``seed``. ``device`` (default :func:`companion_lib.common.device`:
    the GPU when present, else the CPU) is where the model trains; the weights are drawn and the batches
    built on the CPU as before and moved there, and the state_dict comes back on the CPU.
    """
    tok = task_tokenizer()
    steps = member.steps if steps is None else check_positive_int(steps, "steps")
    dev = resolve_device(device)
    cfg = gpt2_config(len(tok), n_positions, member.n_embd, member.n_layer, member.n_head)
    model = tiny_causal_lm(cfg, seed=seed).to(dev)
    model.train()
    rng = np.random.default_rng([seed, member.n_embd, member.n_layer])
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.2)
    batches = (training_batch(rng, tok, batch_size) for _ in range(steps))
    train_loop(model, _answer_loss, batches, optimizer=opt, grad_clip=1.0,
               callback=lambda step, loss: sched.step())
    model.eval()
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def load_member(member: FamilyMember, state: dict[str, torch.Tensor], n_positions: int = 96,
                device=None) -> nn.Module:
    """A GPT-2 of ``member``'s size holding the trained weights ``state`` (eval mode), on ``device``
    (default :func:`companion_lib.common.device`: the GPU when present, else the CPU); a :class:`~.methods.Scorer`
    wrapping it runs every pass there."""
    tok = task_tokenizer()
    dev = resolve_device(device)
    model = tiny_causal_lm(gpt2_config(len(tok), n_positions, member.n_embd, member.n_layer, member.n_head), seed=0)
    model.load_state_dict(state)
    model.eval()
    return model.to(dev)


def train_family(seed: int, family: tuple[FamilyMember, ...] = FAMILY,
                 device=None, steps: int | None = None) -> dict[str, dict[str, torch.Tensor]]:
    """State dicts of the whole family, keyed by name (wrap in ``disk_cache`` to share between notebooks).

    ``device`` (default :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the
    models train (:func:`train_member`); the state dicts come back on the CPU. ``steps`` (default: each
    member's own :attr:`FamilyMember.steps`) trains every member that many steps instead (the tests' short runs)."""
    torch.manual_seed(seed)
    dev = resolve_device(device)
    return {m.name: train_member(m, seed, device=dev, steps=steps) for m in family}


@torch.no_grad()
def answer_accuracy(model: nn.Module, prompts: list[ContextPrompt]) -> float:
    """Share of answer tokens that are the greedy next token given the full prompt (run where ``model`` is)."""
    hits = total = 0
    dev = module_device(model)
    for pr in prompts:
        logits = model(input_ids=torch.tensor([pr.ids], device=dev)).logits[0]
        for p in pr.response_positions:
            hits += int(logits[p - 1].argmax()) == pr.ids[p]
            total += 1
    return hits / total
