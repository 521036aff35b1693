r"""A synthetic world of facts whose pretraining frequencies are set by hand (Merullo et al., Sec. 3-4 in miniature).

Twelve relations (``R0`` ... ``R11``); each has its own 16 subjects and 4 objects, subject :math:`i` of a
relation having object :math:`i \bmod 4`. A training sequence packs facts ``R s o .`` after ``<bos>``.
Facts are drawn with probability proportional to a per-subject *mention rate*:

* 4 *background* relations at rate 64 from step 0 (they make the model competent early, as OLMo is at
  its first checkpoint);
* 8 *target* relations at rates :math:`2^k`, :math:`k=0,\dots,7`, entering the corpus at ``intro_step``;
* every subject's rate carries a lognormal jitter :math:`e^{\sigma z}`, so items inside a relation differ.

The whole token stream is generated up front from one seed, so the corpus the model saw is known exactly
and co-occurrences can be counted over it (:func:`~.frequency.cooccurrence_counts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..tinylm import word_tokenizer

__all__ = ["FactWorld", "make_world", "token_stream", "fact_prompts"]


@dataclass(frozen=True)
class FactWorld:
    """Token layout, facts and mention rates of the synthetic world."""

    n_relations: int
    n_subjects: int
    n_objects: int
    rates: np.ndarray = field(repr=False)        # (R, S) mention rate of each (relation, subject) fact
    background: np.ndarray = field(repr=False)   # (R,) bool: present from step 0
    intro_step: int = 100
    facts_per_sequence: int = 8
    tokenizer: object = field(repr=False, default=None)

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    @property
    def relation_tokens(self) -> np.ndarray:
        """(R,) token id of each relation."""
        return np.array(self.tokenizer.convert_tokens_to_ids([f"R{r}" for r in range(self.n_relations)]))

    @property
    def subject_tokens(self) -> np.ndarray:
        """(R, S) token id of each subject."""
        names = [f"s{r}_{i}" for r in range(self.n_relations) for i in range(self.n_subjects)]
        return np.array(self.tokenizer.convert_tokens_to_ids(names)).reshape(self.n_relations, self.n_subjects)

    @property
    def object_tokens(self) -> np.ndarray:
        """(R, O) token id of each object of each relation."""
        names = [f"o{r}_{j}" for r in range(self.n_relations) for j in range(self.n_objects)]
        return np.array(self.tokenizer.convert_tokens_to_ids(names)).reshape(self.n_relations, self.n_objects)

    @property
    def answer_index(self) -> np.ndarray:
        """(S,) which of a relation's objects each subject maps to (:math:`i \\bmod O`)."""
        return np.arange(self.n_subjects) % self.n_objects

    @property
    def answer_tokens(self) -> np.ndarray:
        """(R, S) token id of each subject's object."""
        return self.object_tokens[:, self.answer_index]

    @property
    def targets(self) -> np.ndarray:
        """Indices of the target (non-background) relations."""
        return np.flatnonzero(~self.background)

    def sequence_length(self) -> int:
        return 1 + 4 * self.facts_per_sequence


def make_world(n_background: int = 4, n_target: int = 8, n_subjects: int = 16, n_objects: int = 4,
               background_rate: float = 64.0, jitter: float = 0.5, intro_step: int = 100,
               facts_per_sequence: int = 8, seed: int = 0) -> FactWorld:
    r"""The world of the note: target relation :math:`k` has rate :math:`2^k` times a lognormal jitter."""
    for name, v in (("n_target", n_target), ("n_subjects", n_subjects), ("n_objects", n_objects),
                    ("facts_per_sequence", facts_per_sequence)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    if isinstance(n_background, bool) or not isinstance(n_background, int) or n_background < 0:
        raise ValueError(f"n_background must be an int >= 0, got {n_background!r}")
    if n_objects > n_subjects:
        raise ValueError(f"n_objects ({n_objects}) must not exceed n_subjects ({n_subjects})")
    if not background_rate > 0 or jitter < 0:
        raise ValueError("background_rate must be > 0 and jitter >= 0")
    if isinstance(intro_step, bool) or not isinstance(intro_step, int) or intro_step < 0:
        raise ValueError(f"intro_step must be an int >= 0, got {intro_step!r}")
    rng = np.random.default_rng(seed)
    n_rel = n_background + n_target
    base = np.concatenate([np.full(n_background, background_rate), 2.0 ** np.arange(n_target)])
    rates = base[:, None] * np.exp(jitter * rng.standard_normal((n_rel, n_subjects)))
    words = ([".", *[f"R{r}" for r in range(n_rel)]]
             + [f"s{r}_{i}" for r in range(n_rel) for i in range(n_subjects)]
             + [f"o{r}_{j}" for r in range(n_rel) for j in range(n_objects)])
    background = np.arange(n_rel) < n_background
    return FactWorld(n_rel, n_subjects, n_objects, rates, background, intro_step, facts_per_sequence,
                     word_tokenizer(words))


def token_stream(world: FactWorld, steps: int, batch_size: int, seed: int = 0,
                 order: str = "relation-first") -> torch.Tensor:
    """The training corpus: (steps, batch_size, length) token ids, batch ``t`` being the one of step ``t``.

    Facts of step ``t`` are drawn i.i.d. with probability proportional to ``world.rates``, the target
    relations counting only from ``world.intro_step`` on. A fact reads ``R s o .`` (relation-first) or
    ``s R o .`` (subject-first).
    """
    if order not in ("relation-first", "subject-first"):
        raise ValueError(f"order must be 'relation-first' or 'subject-first', got {order!r}")
    for name, v in (("steps", steps), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    rng = np.random.default_rng(seed)
    n_rel, n_subj = world.rates.shape
    k = world.facts_per_sequence
    rel_tok, subj_tok, ans_tok = world.relation_tokens, world.subject_tokens, world.answer_tokens
    dot, bos = world.tokenizer.convert_tokens_to_ids(["."])[0], world.tokenizer.bos_token_id
    early = np.where(world.background[:, None], world.rates, 0.0).ravel()
    late = world.rates.ravel()
    out = np.empty((steps, batch_size, 1 + 4 * k), dtype=np.int64)
    out[:, :, 0] = bos
    for t in range(steps):
        w = late if t >= world.intro_step else early
        if w.sum() == 0:
            raise ValueError("no fact has a positive rate before intro_step: add background relations")
        flat = rng.choice(w.size, size=(batch_size, k), p=w / w.sum())
        r, s = np.divmod(flat, n_subj)
        first, second = (rel_tok[r], subj_tok[r, s]) if order == "relation-first" else (subj_tok[r, s], rel_tok[r])
        out[t, :, 1::4], out[t, :, 2::4] = first, second
        out[t, :, 3::4], out[t, :, 4::4] = ans_tok[r, s], dot
    return torch.from_numpy(out)


def fact_prompts(world: FactWorld, relation: int, subjects: np.ndarray | list[int] | None = None,
                 order: str = "relation-first") -> torch.Tensor:
    """Prompts whose next token is the object: ``<bos> R s`` (relation-first) or ``<bos> s R`` (subject-first).

    Returns (n, 3) token ids; the subject sits at position 2 (relation-first) or 1 (subject-first).
    """
    if isinstance(relation, bool) or not isinstance(relation, (int, np.integer)) or not 0 <= relation < world.n_relations:
        raise ValueError(f"relation must be an int in [0, {world.n_relations}), got {relation!r}")
    subjects = np.arange(world.n_subjects) if subjects is None else np.asarray(subjects)
    if subjects.size == 0:
        raise ValueError("subjects must not be empty")
    if subjects.min() < 0 or subjects.max() >= world.n_subjects:
        raise ValueError(f"subjects must lie in [0, {world.n_subjects})")
    bos = world.tokenizer.bos_token_id
    rel, subj = world.relation_tokens[relation], world.subject_tokens[relation, subjects]
    if order == "relation-first":
        rows = [[bos, rel, s] for s in subj]
    elif order == "subject-first":
        rows = [[bos, s, rel] for s in subj]
    else:
        raise ValueError(f"order must be 'relation-first' or 'subject-first', got {order!r}")
    return torch.tensor(rows, dtype=torch.long)
