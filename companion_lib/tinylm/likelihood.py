"""Sequence log-likelihoods of responses given prompts, batched and (for small spaces) exact.

For a causal LM :math:`\\pi`, a prompt :math:`x` and a response :math:`y=(y_1,\\dots,y_T)`,

.. math:: \\log\\pi(y\\mid x) = \\sum_{t=1}^{T} \\log\\pi(y_t \\mid x, y_{<t}).

With ``allowed_tokens`` the next-token softmax is restricted to a response vocabulary :math:`V`, so that
:math:`\\sum_{y\\in V^T}\\pi(y\\mid x)=1` exactly; :func:`exact_response_logprobs` enumerates :math:`V^T`.

Padding: prompts of different lengths are left-padded and described by ``prompt_mask``; the padded
positions are then masked out of attention and the position ids count real tokens only, so a padded row
scores exactly as the same row unpadded. :func:`sequence_logprobs` scores Hugging Face-style ``labels``
(``-100`` = not scored); :func:`prefix_cache` and :func:`cached_response_logprobs` score many responses
after one shared context from its key/value cache, with the same result as the uncached call.
"""

from __future__ import annotations

import copy
import inspect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .model import position_ids_from_mask

__all__ = ["response_logprobs", "all_responses", "exact_response_logprobs", "sequence_logprobs",
           "encode_pairs", "PrefixCache", "prefix_cache", "cached_response_logprobs", "cache_kwarg", "crop_cache"]


def _as_ids(x: object, name: str, ndim: int) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(x).__name__}")
    if x.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must hold integer token ids, got dtype {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")
    return x.long()


def _vocab_tensor(allowed_tokens: Sequence[int] | torch.Tensor, device) -> torch.Tensor:
    vocab = torch.as_tensor(list(allowed_tokens) if not isinstance(allowed_tokens, torch.Tensor)
                            else allowed_tokens, dtype=torch.long, device=device).flatten()
    if vocab.numel() == 0:
        raise ValueError("allowed_tokens must not be empty")
    if vocab.unique().numel() != vocab.numel():
        raise ValueError("allowed_tokens must not repeat a token")
    return vocab


def _position_of(tokens: torch.Tensor, vocab: torch.Tensor, name: str) -> torch.Tensor:
    """Index of each token in ``vocab`` (raises if a token is not in it)."""
    match = tokens.unsqueeze(-1) == vocab
    if not bool(match.any(-1).all()):
        raise ValueError(f"{name} contains a token that is not in allowed_tokens")
    return match.long().argmax(-1)


def response_logprobs(model, prompts: torch.Tensor, responses: torch.Tensor,
                      allowed_tokens: Sequence[int] | torch.Tensor | None = None,
                      response_mask: torch.Tensor | None = None, per_token: bool = False,
                      prompt_mask: torch.Tensor | None = None) -> torch.Tensor:
    """:math:`\\log\\pi(y\\mid x)` for each row of ``prompts`` (B, Lp) and ``responses`` (B, Lr).

    Parameters
    ----------
    model:
        A Hugging Face causal LM (anything whose ``model(input_ids=...).logits`` is (B, L, vocab)).
    prompts, responses:
        Integer token ids; prompts of different lengths are left-padded to one length.
    allowed_tokens:
        If given, the next-token distribution is the softmax over these ids only.
    response_mask:
        (B, Lr) of 0/1: positions with 0 (padding) do not count.
    per_token:
        Return the (B, Lr) per-token log-probabilities instead of their sum.
    prompt_mask:
        (B, Lp) of 0/1 for left-padded prompts: pads are masked out of attention and do not shift the
        position ids (None: every prompt token is real).
    """
    prompts = _as_ids(prompts, "prompts", 2)
    responses = _as_ids(responses, "responses", 2)
    if prompts.shape[0] != responses.shape[0]:
        raise ValueError(f"prompts and responses need the same batch size, got {prompts.shape[0]} "
                         f"and {responses.shape[0]}")
    if prompts.shape[1] < 1:
        raise ValueError("prompts must hold at least one token (the LM needs a position to predict y_1 from)")
    lp = prompts.shape[1]
    inputs = torch.cat([prompts, responses], dim=1)
    if prompt_mask is None:
        logits = model(input_ids=inputs).logits[:, lp - 1:-1]
    else:
        if prompt_mask.shape != prompts.shape:
            raise ValueError(f"prompt_mask must have shape {tuple(prompts.shape)}, got {tuple(prompt_mask.shape)}")
        mask = torch.cat([prompt_mask.long(), torch.ones_like(responses)], dim=1)
        logits = model(input_ids=inputs, attention_mask=mask,
                       position_ids=position_ids_from_mask(mask)).logits[:, lp - 1:-1]
    targets = responses
    if allowed_tokens is not None:
        vocab = _vocab_tensor(allowed_tokens, logits.device)
        logits = logits[..., vocab]
        targets = _position_of(responses, vocab, "responses")
    token_lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if response_mask is not None:
        if response_mask.shape != responses.shape:
            raise ValueError(f"response_mask must have shape {tuple(responses.shape)}, "
                             f"got {tuple(response_mask.shape)}")
        token_lp = token_lp * response_mask.to(token_lp.dtype)
    return token_lp if per_token else token_lp.sum(-1)


def all_responses(vocab: Sequence[int] | torch.Tensor, length: int) -> torch.Tensor:
    """Every sequence of ``length`` tokens from ``vocab``, shape (|V|^length, length), last token fastest."""
    if isinstance(length, bool) or not isinstance(length, int):
        raise TypeError(f"length must be an int, got {type(length).__name__}")
    if length < 0:
        raise ValueError(f"length must be >= 0, got {length}")
    vocab = _vocab_tensor(vocab, "cpu")
    rows = list(itertools.product(vocab.tolist(), repeat=length))
    return torch.tensor(rows, dtype=torch.long).reshape(len(rows), length)


def exact_response_logprobs(model, prompts: torch.Tensor, vocab: Sequence[int] | torch.Tensor,
                            length: int) -> torch.Tensor:
    """:math:`\\log\\pi(y\\mid x)` for every prompt (P, Lp) and every response in ``all_responses(vocab, length)``.

    The next-token softmax is restricted to ``vocab``, so each row of ``exp(result)`` sums to 1. One
    forward pass over the |V|^(length-1) prefixes gives all |V|^length probabilities, because a causal
    model's prediction at position t does not depend on later tokens. Returns shape (P, |V|^length).
    """
    prompts = _as_ids(prompts, "prompts", 2)
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"length must be an int >= 1, got {length!r}")
    device = prompts.device
    vocab = _vocab_tensor(vocab, device)
    n_prompts, lp = prompts.shape
    prefixes = all_responses(vocab.cpu(), length - 1).to(device)            # (K, length-1)
    k, v = prefixes.shape[0], vocab.numel()
    inputs = torch.cat([prompts.repeat_interleave(k, 0), prefixes.repeat(n_prompts, 1)], dim=1)
    logits = model(input_ids=inputs).logits[:, lp - 1:, :][..., vocab]      # (P*K, length, V)
    logp = torch.log_softmax(logits.float(), dim=-1).reshape(n_prompts, k, length, v)
    prefix_idx = _position_of(prefixes, vocab, "prefixes")                  # (K, length-1)
    idx = prefix_idx.unsqueeze(0).expand(n_prompts, k, length - 1).unsqueeze(-1)
    prefix_lp = logp[:, :, :-1].gather(-1, idx).squeeze(-1).sum(-1)         # (P, K)
    return (prefix_lp.unsqueeze(-1) + logp[:, :, -1]).reshape(n_prompts, k * v)


def sequence_logprobs(model, input_ids: torch.Tensor, labels: torch.Tensor,
                      attention_mask: torch.Tensor | None = None, per_token: bool = False) -> torch.Tensor:
    """Sum of :math:`\\log p(\\text{labels}_t \\mid \\text{input}_{<t})` over the positions whose label is not -100.

    Hugging Face's convention: ``labels`` has the shape of ``input_ids`` and ``labels[:, t]`` is the token at
    position ``t``, predicted from position ``t - 1`` (so ``labels[:, 0]`` is never scored). Position ids
    follow ``attention_mask``, so left padding does not change the result.
    """
    input_ids = _as_ids(input_ids, "input_ids", 2)
    labels = _as_ids(labels, "labels", 2)
    if labels.shape != input_ids.shape:
        raise ValueError(f"labels must have the shape of input_ids {tuple(input_ids.shape)}, got {tuple(labels.shape)}")
    kwargs = {}
    if attention_mask is not None:
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask must have shape {tuple(input_ids.shape)}, "
                             f"got {tuple(attention_mask.shape)}")
        kwargs = dict(attention_mask=attention_mask, position_ids=position_ids_from_mask(attention_mask))
    logits = model(input_ids=input_ids, **kwargs).logits[:, :-1]
    target = labels[:, 1:]
    keep = target != -100
    token_lp = torch.log_softmax(logits.float(), -1).gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    token_lp = token_lp * keep
    return token_lp if per_token else token_lp.sum(-1)


def encode_pairs(tokenizer, contexts: Sequence[str], responses: Sequence[str]) -> dict[str, torch.Tensor]:
    """Tokenise (context, response) pairs into left-padded ``input_ids``, ``attention_mask`` and ``labels``.

    ``labels`` is ``-100`` on the context and the padding, so :func:`sequence_logprobs` gives
    :math:`\\log p(\\text{response}\\mid\\text{context})`. Works with any Hugging Face tokenizer with a pad token.
    """
    if isinstance(contexts, str) or isinstance(responses, str):
        raise TypeError("contexts and responses must be sequences of strings, not single strings")
    if len(contexts) != len(responses) or not contexts:
        raise ValueError(f"contexts and responses must be non-empty and of equal length, got {len(contexts)} "
                         f"and {len(responses)}")
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer needs a pad token")
    rows, resp_lens = [], []
    for c, r in zip(contexts, responses):
        c_ids = tokenizer(c, add_special_tokens=False)["input_ids"]
        r_ids = tokenizer(r, add_special_tokens=False)["input_ids"]
        if not c_ids or not r_ids:
            raise ValueError(f"context and response must both be non-empty after tokenisation: {c!r}, {r!r}")
        rows.append(c_ids + r_ids)
        resp_lens.append(len(r_ids))
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    labels = torch.full_like(input_ids, -100)
    for i, (row, n_resp) in enumerate(zip(rows, resp_lens)):
        input_ids[i, width - len(row):] = torch.tensor(row)
        mask[i, width - len(row):] = 1
        labels[i, width - n_resp:] = torch.tensor(row[-n_resp:])
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def cache_kwarg(model) -> str:
    """The name under which this transformers version takes the key/value cache (``cache`` in 5.x,
    where ``past_key_values`` is deprecated; ``past_key_values`` before)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


_cache_kwarg = cache_kwarg  # the former private name


def crop_cache(cache, length: int):
    """A new :class:`~transformers.DynamicCache` holding the first ``length`` positions of ``cache``.

    The keys and values of a shared prefix do not depend on what follows it, so a sequence that agrees
    with the cached one on its first ``length`` tokens can run only its remaining tokens on top of this
    copy (positions ``length, length + 1, ...``). ``cache`` itself is left untouched (unlike
    ``DynamicCache.crop``, which works in place and in transformers 5 takes a negative count).
    """
    from transformers import DynamicCache

    layers = getattr(cache, "layers", None)
    if layers is None:
        raise TypeError(f"cache must be a transformers DynamicCache, got {type(cache).__name__}")
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be a non-negative int, got {length!r}")
    cached = cache.get_seq_length()
    if length > cached:
        raise ValueError(f"length = {length} is longer than the cached sequence ({cached} positions)")
    prefix = DynamicCache()
    for layer_idx, layer in enumerate(layers):
        prefix.update(layer.keys[:, :, :length], layer.values[:, :, :length], layer_idx)
    return prefix


@dataclass
class PrefixCache:
    """The key/value cache of a context, its last next-token logits and its attention mask."""

    cache: object                 # a transformers Cache
    last_logits: torch.Tensor     # (B, vocab): the prediction for the first response token
    attention_mask: torch.Tensor  # (B, Lc)


def prefix_cache(model, context_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> PrefixCache:
    """Run the context once and keep its key/value cache (for :func:`cached_response_logprobs`)."""
    context_ids = _as_ids(context_ids, "context_ids", 2)
    mask = torch.ones_like(context_ids) if attention_mask is None else attention_mask.long()
    if mask.shape != context_ids.shape:
        raise ValueError(f"attention_mask must have shape {tuple(context_ids.shape)}, got {tuple(mask.shape)}")
    out = model(input_ids=context_ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), use_cache=True)
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    if cache is None:
        raise TypeError(f"{type(model).__name__} returned no key/value cache")
    return PrefixCache(cache, out.logits[:, -1], mask)


def cached_response_logprobs(model, prefix: PrefixCache, responses: torch.Tensor, per_token: bool = False
                             ) -> torch.Tensor:
    """:func:`response_logprobs` of ``responses`` (B, Lr) after the cached context, without re-running it.

    A context of batch 1 is shared by every response row. The cache is copied first, so ``prefix`` can be
    reused for any number of calls.
    """
    responses = _as_ids(responses, "responses", 2)
    if not isinstance(prefix, PrefixCache):
        raise TypeError(f"prefix must be a PrefixCache from prefix_cache(), got {type(prefix).__name__}")
    n, nc = responses.shape[0], prefix.attention_mask.shape[0]
    cache = copy.deepcopy(prefix.cache)
    mask, last = prefix.attention_mask, prefix.last_logits
    if nc == 1 and n > 1:
        cache.batch_repeat_interleave(n)
        mask, last = mask.expand(n, -1), last.expand(n, -1)
    elif nc != n:
        raise ValueError(f"responses has {n} rows but the context has {nc} (give 1 or {n} contexts)")
    full = torch.cat([mask, torch.ones_like(responses)], dim=1)
    pos = position_ids_from_mask(full)[:, mask.shape[1]:]
    logits = model(input_ids=responses, attention_mask=full, position_ids=pos,
                   **{_cache_kwarg(model): cache}, use_cache=True).logits
    logits = torch.cat([last.unsqueeze(1), logits[:, :-1]], dim=1)
    token_lp = torch.log_softmax(logits.float(), -1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    return token_lp if per_token else token_lp.sum(-1)
