r"""Leave-one-out context attribution and the AttriBoT tricks (Liu, Kandpal and Raffel, ICLR 2025).

For a context :math:`C=\{c_1,\dots,c_n\}`, a query and a response :math:`R` of a target LM :math:`f`,

.. math::  \mathrm{LOO}(c_i) = \log p_f(R\mid C) - \log p_f(R\mid C\setminus\{c_i\}),
           \qquad \log p_f(R\mid\cdot) = \textstyle\sum_t \log p_f(r_t\mid \cdot, r_{<t}).

Exact LOO costs :math:`n+1` forward passes. The tricks, all composable:

* **KV caching** (exact): the ablation of :math:`c_i=[a_i,b_i)` leaves tokens :math:`[0,a_i)` and their
  keys/values unchanged, so only the suffix from :math:`b_i` is run, on top of the cached prefix.
* **Hierarchical** (approximate): LOO over paragraphs, keep the top ``keep_groups``, then sentence LOO
  inside the pruned context; it assumes the LOO of a paragraph is about the sum of its sentences'.
* **Proxy** (approximate): LOO computed by a smaller model of the same family on the target's response.
* **Proxy pruning + target re-scoring** (approximate): the proxy keeps its top ``keep_sources`` sources;
  the target computes LOO on the pruned context.

Baselines (the four of the official code): attention weights from the response positions, ContextCite
(random ablations and a Lasso surrogate of the response's logit-probability, the target of the
``context-cite`` package the paper ran), the gradient norm of the response log-likelihood with respect to
each source's input embeddings, and the similarity of a source to the response (here the cosine of mean
input embeddings of the target; the official code uses a sentence-transformer, which this book cannot
download). :class:`Scorer` counts cost as tokens processed :math:`\times` non-embedding parameters and
FLOPs as twice that (forward pass); a gradient pass counts three forward passes.

Ground truth: the *outlier* sources of exact target LOO (:func:`outlier_sources`: z-score above ``z``,
the top source when none is).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy import stats
from sklearn.linear_model import Lasso
from sklearn.metrics import average_precision_score
from transformers import DynamicCache

from ..common.device import module_device
from ..common.validation import check_positive_int, check_probability
from ..tinylm import cache_kwarg, crop_cache
from .prompt import ContextPrompt
from .task import non_embedding_params

__all__ = ["Scorer", "Attribution", "check_same_tokenizer", "loo", "hierarchical_loo", "pruned_loo",
           "context_cite", "lasso_surrogate", "attention_attribution", "generate_response",
           "average_precision", "topk_recall", "faithfulness", "pareto_front", "FLOOR", "outlier_sources",
           "gradient_norm_attribution", "similarity_attribution", "TARGETS"]

#: What a score sums over the response tokens: the log-probability, or the logit-probability
#: :math:`\log p - \log(1-p)` of the ``context-cite`` package.
TARGETS = ("loglik", "logit")

#: Rank score given to a source a method did not score (plus a tie-break in nats), below every real score.
FLOOR = -1e9


class Scorer:
    r"""A causal LM with its tokenizer and a cost meter.

    ``cost`` accumulates tokens processed :math:`\times` non-embedding parameters over every forward pass;
    ``flops`` is twice that plus any extra arithmetic a method declares (:meth:`add_flops`); ``passes``
    counts the passes. All methods but the gradient norm run under ``torch.no_grad``. Every pass runs where
    ``model`` is (:attr:`device`: move the model, e.g. ``model.to(companion_lib.common.device())``, and the
    token ids follow); scores come back as Python floats or CPU arrays.
    """

    def __init__(self, model, tokenizer, name: str = "model") -> None:
        if not hasattr(model, "config") or not callable(model):
            raise TypeError("model must be a Hugging Face causal LM")
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.n_params = non_embedding_params(model)
        self._kw = cache_kwarg(model)
        self._eager = None
        self.reset()

    def reset(self) -> None:
        self.tokens, self.passes, self._extra_flops = 0, 0, 0.0

    @property
    def device(self) -> torch.device:
        """Where the model is (:func:`~companion_lib.common.module_device`), so where its passes run."""
        return module_device(self.model)

    def _ids(self, ids, dev: torch.device | None = None) -> torch.Tensor:
        """A (1, T) tensor of token ids on ``dev`` (default: the model's device)."""
        return torch.tensor([ids], device=self.device if dev is None else dev)

    @property
    def cost(self) -> float:
        return float(self.tokens) * self.n_params

    @property
    def flops(self) -> float:
        """Counted FLOPs: 2 x tokens x non-embedding parameters over the passes, plus declared extras."""
        return 2.0 * self.cost + self._extra_flops

    def add_flops(self, n: float) -> None:
        """Count arithmetic done outside a forward pass (e.g. the similarity baseline's dot products)."""
        self._extra_flops += float(n)

    def _count(self, n: int) -> None:
        self.tokens += int(n)
        self.passes += 1

    @staticmethod
    def _sum_logprobs(logits: torch.Tensor, ids: list[int], positions: list[int], offset: int = 0,
                      target: str = "loglik") -> torch.Tensor:
        # logits[j] predicts token offset + j + 1
        dev = logits.device
        rows = torch.tensor([p - 1 - offset for p in positions], device=dev)
        z = logits[rows].float()
        tokens = torch.tensor([ids[p] for p in positions], device=dev)
        if target == "loglik":
            return torch.log_softmax(z, -1)[torch.arange(len(positions), device=dev), tokens].sum()
        if target == "logit":       # context-cite: the correct logit minus the logsumexp of the others
            correct = z[torch.arange(len(positions), device=dev), tokens]
            others = z.scatter(-1, tokens[:, None], -torch.inf).logsumexp(-1)
            return (correct - others).sum()
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")

    @torch.no_grad()
    def loglik(self, ids: list[int], positions: list[int], target: str = "loglik") -> float:
        r""":math:`\sum_t \log p(r_t\mid\cdot)` over the tokens at ``positions`` of ``ids`` (one full pass);
        with ``target="logit"`` the sum of :math:`\log p(r_t\mid\cdot) - \log(1 - p(r_t\mid\cdot))`."""
        if target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
        self._count(len(ids))
        logits = self.model(input_ids=self._ids(ids)).logits[0]
        return float(self._sum_logprobs(logits, ids, positions, target=target))

    @torch.no_grad()
    def cached_pass(self, ids: list[int], positions: list[int]) -> tuple[float, DynamicCache]:
        """The log-likelihood and the key/value cache of the full sequence (one full pass)."""
        self._count(len(ids))
        out = self.model(input_ids=self._ids(ids), use_cache=True)
        cache = getattr(out, "cache", None) or out.past_key_values
        return float(self._sum_logprobs(out.logits[0], ids, positions)), cache

    @torch.no_grad()
    def loglik_after_prefix(self, cache: DynamicCache, prefix_len: int, ids: list[int],
                            positions: list[int]) -> float:
        """Log-likelihood of ``ids``, whose first ``prefix_len`` tokens are those cached in ``cache``.

        Only ``ids[prefix_len:]`` is run (positions ``prefix_len, ...``), attending to a cropped copy of the
        cached keys and values; every response position must lie after ``prefix_len``.
        """
        if prefix_len <= 0:
            return self.loglik(ids, positions)
        if min(positions) <= prefix_len:
            raise ValueError("every response position must lie after the cached prefix")
        prefix = crop_cache(cache, prefix_len)      # companion_lib.tinylm: a copy of the first prefix_len positions
        suffix = ids[prefix_len:]
        self._count(len(suffix))
        dev = self.device
        pos = torch.arange(prefix_len, len(ids), device=dev)[None]
        logits = self.model(input_ids=self._ids(suffix, dev), position_ids=pos, **{self._kw: prefix}).logits[0]
        return float(self._sum_logprobs(logits, ids, positions, offset=prefix_len))

    @torch.no_grad()
    def attentions(self, ids: list[int]) -> torch.Tensor:
        """Attention weights (layers, heads, T, T) of one pass with eager attention (SDPA returns none)."""
        if self._eager is None:
            self._eager = copy.deepcopy(self.model)
            self._eager.set_attn_implementation("eager")
        self._count(len(ids))
        out = self._eager(input_ids=torch.tensor([ids], device=module_device(self._eager)), output_attentions=True)
        return torch.stack([a[0] for a in out.attentions])


@dataclass
class Attribution:
    """Scores of one method on one prompt; ``nan`` where the method gave no score (pruned away).

    ``tiebreak`` orders the unscored sources (e.g. by their paragraph's or the proxy's score).
    """

    scores: np.ndarray
    tiebreak: np.ndarray = None
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.scores = np.asarray(self.scores, dtype=float)
        self.tiebreak = np.zeros_like(self.scores) if self.tiebreak is None else np.asarray(self.tiebreak, float)

    @property
    def rank_scores(self) -> np.ndarray:
        """Scores for ranking: unscored sources get ``FLOOR + tiebreak``, below every scored one."""
        return np.where(np.isnan(self.scores), FLOOR + self.tiebreak, self.scores)

    @property
    def filled(self) -> np.ndarray:
        """Scores with the unscored sources set to 0 (no attribution), for correlations."""
        return np.nan_to_num(self.scores, nan=0.0)


def check_same_tokenizer(target: Scorer, proxy: Scorer) -> None:
    """A proxy must read the target's token ids: same vocabulary, else a ``ValueError`` naming ``proxy``."""
    if target.tokenizer.get_vocab() != proxy.tokenizer.get_vocab():
        raise ValueError(f"proxy {proxy.name!r} has a tokenizer different from the target's; "
                         "re-tokenize the response or use a proxy of the same family")


def _check_keep(k: int, n: int, name: str) -> int:
    check_positive_int(k, name)
    if k > n:
        raise ValueError(f"{name} = {k} is larger than the number of units ({n})")
    return k


def loo(scorer: Scorer, prompt: ContextPrompt, kv_cache: bool = False, units: str = "sources") -> Attribution:
    r"""Exact leave-one-out over ``units`` (``"sources"`` or ``"groups"``): :math:`n+1` passes.

    With ``kv_cache`` the full pass keeps its keys/values and each ablation of :math:`[a_i,b_i)` runs only
    the tokens from :math:`b_i` on (exact: the first :math:`a_i` tokens and their keys/values are unchanged).
    """
    if not isinstance(prompt, ContextPrompt):
        raise TypeError(f"prompt must be a ContextPrompt, got {type(prompt).__name__}")
    spans = {"sources": prompt.sources, "groups": prompt.groups}.get(units)
    if spans is None:
        raise ValueError(f"units must be 'sources' or 'groups', got {units!r}")
    if not spans:
        raise ValueError("the prompt has no groups")
    ids, pos = list(prompt.ids), list(prompt.response_positions)
    if kv_cache:
        full, cache = scorer.cached_pass(ids, pos)
    else:
        full = scorer.loglik(ids, pos)
    scores = []
    for a, b in spans:
        ab_ids, ab_pos = prompt.ablate([(a, b)])
        ablated = (scorer.loglik_after_prefix(cache, a, ab_ids, ab_pos) if kv_cache
                   else scorer.loglik(ab_ids, ab_pos))
        scores.append(full - ablated)
    return Attribution(np.array(scores), info={"loglik": full})


def hierarchical_loo(scorer: Scorer, prompt: ContextPrompt, keep_groups: int, kv_cache: bool = False) -> Attribution:
    """Paragraph LOO, keep the top ``keep_groups`` paragraphs, then sentence LOO in the pruned context.

    Sentences of dropped paragraphs get no score (their tie-break is their paragraph's LOO).
    """
    _check_keep(keep_groups, len(prompt.groups), "keep_groups")
    coarse = loo(scorer, prompt, kv_cache, units="groups").scores
    top = np.argsort(-coarse, kind="stable")[:keep_groups]
    members = prompt.group_members()
    kept = sorted(i for g in top for i in members[g])
    pruned, index = prompt.restrict(kept)
    fine = loo(scorer, pruned, kv_cache).scores
    scores = np.full(prompt.n_sources, np.nan)
    scores[index] = fine
    tiebreak = np.empty(prompt.n_sources)
    for g, m in enumerate(members):
        tiebreak[m] = coarse[g]
    return Attribution(scores, tiebreak, info={"group_scores": coarse})


def pruned_loo(proxy: Scorer, target: Scorer, prompt: ContextPrompt, keep_sources: int,
               kv_cache: bool = False) -> Attribution:
    """Proxy LOO on the full context, keep its top ``keep_sources``, target LOO on the pruned context."""
    check_same_tokenizer(target, proxy)
    _check_keep(keep_sources, prompt.n_sources, "keep_sources")
    rough = loo(proxy, prompt, kv_cache).scores
    kept = np.sort(np.argsort(-rough, kind="stable")[:keep_sources])
    pruned, index = prompt.restrict(kept)
    scores = np.full(prompt.n_sources, np.nan)
    scores[index] = loo(target, pruned, kv_cache).scores
    return Attribution(scores, rough, info={"proxy_scores": rough})


def lasso_surrogate(masks: np.ndarray, y: np.ndarray, alpha: float = 0.01) -> np.ndarray:
    r"""ContextCite's surrogate: Lasso of ``y`` on standardized ablation masks, weights rescaled to mask units.

    Minimises :math:`\frac1{2m}\lVert y - b - Z w\rVert^2 + \alpha\lVert w\rVert_1` with
    :math:`Z_{ij}=(M_{ij}-\bar M_j)/s_j` and returns :math:`w_j/s_j` (0 for a constant column). The
    coordinate descent runs to convergence: scikit-learn's default cap of 1000 sweeps stopped early on
    some prompts of the chapter (a ``ConvergenceWarning``), which left the baseline short of its own fit.
    """
    masks = np.asarray(masks, dtype=float)
    y = np.asarray(y, dtype=float)
    if masks.ndim != 2 or y.shape != (masks.shape[0],):
        raise ValueError(f"masks must be (m, n) and y (m,), got {masks.shape} and {y.shape}")
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    mean, std = masks.mean(0), masks.std(0)
    ok = std > 0
    w = np.zeros(masks.shape[1])
    if ok.any():
        Z = (masks[:, ok] - mean[ok]) / std[ok]
        w[ok] = Lasso(alpha=alpha, fit_intercept=True, max_iter=100_000).fit(Z, y).coef_ / std[ok]
    return w


def context_cite(scorer: Scorer, prompt: ContextPrompt, n_ablations: int, rng: np.random.Generator,
                 keep_prob: float = 0.5, alpha: float = 0.01, target: str = "logit") -> Attribution:
    """ContextCite: ``n_ablations`` random contexts (each source kept with ``keep_prob``), Lasso surrogate.

    The regressed quantity is the response's summed logit-probability (``target="logit"``, the
    ``context-cite`` package's ``ContextCiter``, which the paper ran) or its log-likelihood
    (``target="loglik"``, the official repository's simpler baseline). It is divided by the number of
    response tokens before the fit and the weights multiplied back, as both codes do.
    """
    check_positive_int(n_ablations, "n_ablations")
    check_probability(keep_prob, "keep_prob", include_zero=False, include_one=False)
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    n, T = prompt.n_sources, len(prompt.response_positions)
    masks = rng.random((n_ablations, n)) < keep_prob
    y = []
    for m in masks:
        ids, pos = prompt.ablate([s for s, k in zip(prompt.sources, m) if not k])
        y.append(scorer.loglik(ids, pos, target=target) / T)
    return Attribution(lasso_surrogate(masks, np.array(y), alpha) * T)


def attention_attribution(scorer: Scorer, prompt: ContextPrompt) -> Attribution:
    """Mean attention (over layers, heads and the positions that predict response tokens) on each source."""
    att = scorer.attentions(list(prompt.ids))
    rows = [p - 1 for p in prompt.response_positions]
    a = att[:, :, rows, :].mean(dim=(0, 1, 2)).cpu().numpy()
    return Attribution(np.array([a[s:e].sum() for s, e in prompt.sources]))


@torch.no_grad()
def generate_response(scorer: Scorer, prompt: ContextPrompt) -> list[int]:
    """Greedy decoding with a key/value cache: the prompt once, then one token per step.

    The question tokens between answers are fed as given (teacher forcing); each answer is the argmax.
    Returns the generated answer ids; the meter counts every token once.
    """
    first = prompt.response_positions[0]
    ids = list(prompt.ids[:first])
    scorer._count(len(ids))
    dev = scorer.device
    out = scorer.model(input_ids=scorer._ids(ids, dev), use_cache=True)
    cache, logits = getattr(out, "cache", None) or out.past_key_values, out.logits[0, -1]
    answers = []
    for p in range(first, len(prompt.ids)):
        tok = int(logits.argmax()) if p in prompt.response_positions else prompt.ids[p]
        if p in prompt.response_positions:
            answers.append(tok)
        if p == len(prompt.ids) - 1:
            break
        scorer._count(1)
        out = scorer.model(input_ids=scorer._ids([tok], dev), position_ids=torch.tensor([[p]], device=dev),
                           **{scorer._kw: cache}, use_cache=True)
        cache, logits = getattr(out, "cache", None) or out.past_key_values, out.logits[0, -1]
    return answers


def gradient_norm_attribution(scorer: Scorer, prompt: ContextPrompt) -> Attribution:
    r"""Gradient norm (the official ``GradientNormAttributor``): :math:`\lVert\nabla_{e_{a:b}}\log p(R\mid C)\rVert_2`,
    the norm of the gradient of the response log-likelihood with respect to the token embeddings of each
    source (flattened over its tokens). One forward and one backward pass, counted as three forward passes."""
    ids, pos = list(prompt.ids), list(prompt.response_positions)
    model = scorer.model
    with torch.enable_grad():
        emb = model.get_input_embeddings()(scorer._ids(ids)).detach().requires_grad_(True)
        logits = model(inputs_embeds=emb).logits[0]
        (grad,) = torch.autograd.grad(scorer._sum_logprobs(logits, ids, pos), emb)
    scorer._count(3 * len(ids))
    g = grad[0]
    return Attribution(np.array([float(g[a:b].norm()) for a, b in prompt.sources]))


@torch.no_grad()
def similarity_attribution(scorer: Scorer, prompt: ContextPrompt) -> Attribution:
    """Similarity (the official ``SimAttributor``, without its sentence-transformer): cosine of the mean input
    embedding of each source's tokens with the mean input embedding of the response tokens. No forward pass;
    the dot products are counted as FLOPs."""
    E = scorer.model.get_input_embeddings().weight
    ids = list(prompt.ids)
    resp = E[[ids[p] for p in prompt.response_positions]].mean(0)
    src = torch.stack([E[ids[a:b]].mean(0) for a, b in prompt.sources])
    scores = torch.nn.functional.cosine_similarity(src, resp[None], dim=-1)
    scorer.add_flops(2 * E.shape[1] * (sum(b - a for a, b in prompt.sources) + len(prompt.response_positions)
                                       + 3 * prompt.n_sources))
    return Attribution(scores.cpu().numpy().astype(float))


def outlier_sources(truth, z: float = 2.0) -> np.ndarray:
    r"""The relevant sources of a prompt: those whose exact LOO is an outlier, :math:`(x_i-\bar x)/s > z` with the
    population standard deviation :math:`s` over the prompt's sources; when none is, the top source alone.

    The paper scores the recovery of outlier sources; its exact rule was not available to us, so this rule
    (and its ``z``) is the book's."""
    t = np.asarray(truth, float)
    if t.ndim != 1 or t.size == 0 or not np.all(np.isfinite(t)):
        raise ValueError("truth must be a non-empty 1-D array of finite LOO scores")
    if not z > 0:
        raise ValueError(f"z must be > 0, got {z}")
    sd = t.std()
    rel = (t - t.mean()) > z * sd if sd > 0 else np.zeros(t.size, bool)
    if not rel.any():
        rel[int(np.argmax(t))] = True
    return rel


def average_precision(scores, relevant) -> float:
    """Average precision of ranking the ``relevant`` sources (bool array) by ``scores`` (ties: sklearn's rule)."""
    relevant = np.asarray(relevant, bool)
    if not relevant.any():
        raise ValueError("relevant has no positive entry: average precision is undefined")
    return float(average_precision_score(relevant, np.asarray(scores, float)))


def topk_recall(scores, relevant, k: int) -> float:
    """Share of the ``relevant`` sources among the top ``k`` by ``scores`` (stable order on ties)."""
    relevant = np.asarray(relevant, bool)
    _check_keep(k, len(relevant), "k")
    if not relevant.any():
        raise ValueError("relevant has no positive entry: recall is undefined")
    top = np.argsort(-np.asarray(scores, float), kind="stable")[:k]
    return float(relevant[top].sum() / relevant.sum())


def faithfulness(attributions: list[Attribution], truths: list[np.ndarray], z: float = 2.0,
                 k: int = 4) -> dict[str, float]:
    """Faithfulness to exact target LOO: mAP and recall@k of the outlier sources (:func:`outlier_sources`),
    Pearson and Spearman correlation over all (prompt, source) pairs."""
    if len(attributions) != len(truths) or not truths:
        raise ValueError("attributions and truths must be non-empty lists of the same length")
    aps, recalls = [], []
    for att, t in zip(attributions, truths):
        rel = outlier_sources(t, z)
        aps.append(average_precision(att.rank_scores, rel))
        recalls.append(topk_recall(att.rank_scores, rel, k))
    x = np.concatenate([a.filled for a in attributions])
    y = np.concatenate([np.asarray(t, float) for t in truths])
    return {"mAP": float(np.mean(aps)), f"recall@{k}": float(np.mean(recalls)),
            "pearson": float(stats.pearsonr(x, y)[0]), "spearman": float(stats.spearmanr(x, y)[0]),
            "n_prompts": len(aps)}


def pareto_front(speedup, quality) -> np.ndarray:
    """Mask of the points no other point beats in both speed-up and quality (both maximised)."""
    s, q = np.asarray(speedup, float), np.asarray(quality, float)
    if s.shape != q.shape or s.ndim != 1:
        raise ValueError("speedup and quality must be 1-D arrays of the same length")
    dominated = ((s[None] >= s[:, None]) & (q[None] >= q[:, None]) & ((s[None] > s[:, None]) | (q[None] > q[:, None])))
    return ~dominated.any(1)


def timed(fn: Callable, *args, wall: bool = False, **kwargs):
    """``(result, seconds)`` of one call: process time (which a shared machine inflates less), or wall time
    (``time.perf_counter``) with ``wall=True``."""
    clock = time.perf_counter if wall else time.process_time
    t0 = clock()
    out = fn(*args, **kwargs)
    return out, clock() - t0
