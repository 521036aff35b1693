"""Sequence log-likelihoods of responses given prompts, batched and (for small spaces) exact.

For a causal LM :math:`\\pi`, a prompt :math:`x` and a response :math:`y=(y_1,\\dots,y_T)`,

.. math:: \\log\\pi(y\\mid x) = \\sum_{t=1}^{T} \\log\\pi(y_t \\mid x, y_{<t}).

With ``allowed_tokens`` the next-token softmax is restricted to a response vocabulary :math:`V`, so that
:math:`\\sum_{y\\in V^T}\\pi(y\\mid x)=1` exactly; :func:`exact_response_logprobs` enumerates :math:`V^T`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

__all__ = ["response_logprobs", "all_responses", "exact_response_logprobs"]


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
                      response_mask: torch.Tensor | None = None, per_token: bool = False) -> torch.Tensor:
    """:math:`\\log\\pi(y\\mid x)` for each row of ``prompts`` (B, Lp) and ``responses`` (B, Lr).

    Parameters
    ----------
    model:
        A Hugging Face causal LM (anything whose ``model(input_ids=...).logits`` is (B, L, vocab)).
    prompts, responses:
        Integer token ids; all prompts of a batch have the same length (left-pad them if needed).
    allowed_tokens:
        If given, the next-token distribution is the softmax over these ids only.
    response_mask:
        (B, Lr) of 0/1: positions with 0 (padding) do not count.
    per_token:
        Return the (B, Lr) per-token log-probabilities instead of their sum.
    """
    prompts = _as_ids(prompts, "prompts", 2)
    responses = _as_ids(responses, "responses", 2)
    if prompts.shape[0] != responses.shape[0]:
        raise ValueError(f"prompts and responses need the same batch size, got {prompts.shape[0]} "
                         f"and {responses.shape[0]}")
    if prompts.shape[1] < 1:
        raise ValueError("prompts must hold at least one token (the LM needs a position to predict y_1 from)")
    lp = prompts.shape[1]
    logits = model(input_ids=torch.cat([prompts, responses], dim=1)).logits[:, lp - 1:-1]
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
