r"""DPO on a real checkpoint and real preference pairs: the 3D-properties measured at full scale.

Yan et al. (ICLR 2025), Section 3 and Figs. 2 and 4: trained with DPO, a language model lowers the
log-likelihood :math:`\log\pi_\theta(y^-\mid x)` of the rejected responses much faster than it raises that of
the chosen ones (*drastic drop*, Corollary 1), the chosen one may fall as well (*degradation*, Corollary 2),
and the mass leaves the responses of the data for responses nobody wrote (*dispersion*, Corollary 3).
Flex-DPO (:math:`\beta^-<\beta^+`, Section 4.3) damps the push on :math:`\pi^-`.

:func:`full_scale` makes that measurement on a Hugging Face checkpoint of a supported class
(:data:`companion_lib.tinylm.SUPPORTED_CAUSAL_LMS`) and preference pairs in the common public formats (JSON
lines ``{"prompt": ..., "chosen": ..., "rejected": ...}`` of strings, UltraFeedback-binarized's message lists,
or Anthropic HH-RLHF's transcripts; :func:`load_preference_pairs`). The policy starts from the checkpoint, the
reference is the same checkpoint frozen: its sequence log-likelihoods
:math:`\log\pi_{\mathrm{ref}}(y^\pm\mid x)` of the training pairs are computed once before the first step
(the policy *is* the reference then), so no second copy of the weights is held. During training the
function records, at fixed steps, :math:`\log\pi_\theta(y^\pm\mid x)` of a fixed subset of the training
pairs and of held-out pairs the policy never trains on (their responses are *unseen* responses: the
measurable trace of dispersion on a model whose response space cannot be enumerated).

Everything is checked before a weight is read: the arguments, the data's format and size, the checkpoint's
class (:func:`companion_lib.tinylm.causal_lm_config`), the memory that training needs on the device, and the
tokenizer (the pairs that fit ``max_length`` tokens).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np
import torch

from ..common.device import device as default_device
from ..common.validation import json_lines
from ..tinylm import (DTYPES, causal_lm_config, check_fits, encode_pairs, load_causal_lm, load_tokenizer, minibatches,
                      parameter_bytes, sequence_logprobs, train_loop)
from .losses import dpo_loss

__all__ = ["PAIR_FIELDS", "PreferencePair", "load_preference_pairs", "step_activation_bytes", "training_memory_bytes",
           "full_scale"]

#: The fields of one preference pair, each a non-empty string once read (:func:`load_preference_pairs`).
PAIR_FIELDS = ("prompt", "chosen", "rejected")
_HH_TURN = "\n\nAssistant:"
_FORMAT = ('JSON lines (gzipped if the name ends in .gz), one object per line: the strings "prompt", "chosen" and '
           '"rejected"; or "chosen"/"rejected" as lists of chat messages (UltraFeedback-binarized); or only '
           '"chosen"/"rejected" transcripts that share the prompt up to the last "\\n\\nAssistant:" (HH-RLHF)')


@dataclass(frozen=True)
class PreferencePair:
    """One preference pair :math:`(x, y^+, y^-)`: a prompt, the chosen and the rejected response."""

    prompt: str
    chosen: str
    rejected: str


def _response(value, field: str, where: str) -> str:
    """A response string: as given, or the last assistant reply of a list of chat messages."""
    if isinstance(value, list):           # UltraFeedback-binarized: [{"role": ..., "content": ...}, ...]
        replies = [m.get("content") for m in value if isinstance(m, dict) and m.get("role") == "assistant"]
        if not replies or not isinstance(replies[-1], str):
            raise ValueError(f"{where}: field {field!r} is a list without an assistant message "
                             f'{{"role": "assistant", "content": <string>}}; expected {_FORMAT}')
        value = replies[-1]
    return value


def _pair_of(record: dict, where: str) -> PreferencePair:
    """One line's record as a :class:`PreferencePair` (any of the three accepted layouts, checked)."""
    if "prompt" not in record and isinstance(record.get("chosen"), str) and isinstance(record.get("rejected"), str):
        chosen, rejected = record["chosen"], record["rejected"]        # HH-RLHF: two whole transcripts
        cut = chosen.rfind(_HH_TURN)
        if cut < 0:
            raise ValueError(f"{where} has no field 'prompt' and its 'chosen' text has no {_HH_TURN!r} turn to "
                             f"split it at; expected {_FORMAT}")
        cut += len(_HH_TURN)
        if rejected[:cut] != chosen[:cut]:
            raise ValueError(f"{where}: the chosen and rejected transcripts differ before the last {_HH_TURN!r} "
                             f"turn, so they share no prompt; expected {_FORMAT}")
        record = {"prompt": chosen[:cut], "chosen": chosen[cut:], "rejected": rejected[cut:]}
    missing = [k for k in PAIR_FIELDS if k not in record]
    if missing:
        raise ValueError(f"{where} lacks the field(s) {', '.join(missing)}; expected {_FORMAT}")
    values = {}
    for k in PAIR_FIELDS:
        v = record[k] if k == "prompt" else _response(record[k], k, where)
        if not isinstance(v, str):
            raise ValueError(f"{where}: field {k!r} is a {type(v).__name__}, not a string; expected {_FORMAT}")
        if not v.strip():
            raise ValueError(f"{where}: field {k!r} is empty; expected {_FORMAT}")
        values[k] = v
    if values["chosen"] == values["rejected"]:
        raise ValueError(f"{where}: the chosen and rejected responses are identical (no preference)")
    return PreferencePair(**values)


def load_preference_pairs(path: str | Path, limit: int | None = None) -> list[PreferencePair]:
    """Read preference pairs from a JSON-lines file (gzipped when its name ends in ``.gz``).

    Each line is one JSON object in one of the public layouts:

    * ``{"prompt", "chosen", "rejected"}``, three strings (the common export format);
    * the same with ``chosen`` and ``rejected`` lists of chat messages, as in UltraFeedback-binarized: the
      response is the content of the last ``"assistant"`` message;
    * ``{"chosen", "rejected"}``, two whole transcripts as in Anthropic's HH-RLHF files: the prompt is their
      text up to and including the last ``"\n\nAssistant:"``, which both must share; the responses are the rest.

    Blank lines are skipped; ``limit`` keeps the first ``limit`` pairs. Raises ``ValueError`` naming the file,
    the line and the accepted layouts when a line is not a JSON object, lacks a field, holds a non-string or
    an empty response, or when the chosen and rejected responses are identical (DPO's margin is then zero
    whatever the model).
    """
    if not isinstance(path, (str, Path)):
        raise TypeError(f"data must be a path to a JSON-lines file, got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no data file {str(path)!r}; expected {_FORMAT}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive int or None, got {limit!r}")
    pairs = []
    for where, record in json_lines(path, _FORMAT):
        pairs.append(_pair_of(record, where))
        if limit is not None and len(pairs) == limit:
            break
    if not pairs:
        raise ValueError(f"{str(path)!r} holds no preference pair; expected {_FORMAT}")
    return pairs


def step_activation_bytes(n_layers: int, hidden: int, intermediate: int, vocab: int, batch_size: int,
                          max_length: int) -> int:
    """Float32 activations that one DPO step keeps for its backward pass (an estimate).

    The step runs ``2 * batch_size`` sequences (chosen and rejected) of at most ``max_length`` tokens. Per token
    and block, a pre-norm block keeps about :math:`6d + 4d_{ff}` numbers (norms, queries/keys/values, the
    attention output and residuals; the MLP's input, gate, up and product); the head keeps the logits, their
    float32 log-softmax and its gradient (three times ``vocab`` numbers per token).
    """
    for name, value in (("n_layers", n_layers), ("hidden", hidden), ("intermediate", intermediate),
                        ("vocab", vocab), ("batch_size", batch_size), ("max_length", max_length)):
        _check_int(value, name)
    tokens = 2 * batch_size * max_length
    return 4 * tokens * (n_layers * (6 * hidden + 4 * intermediate) + 3 * vocab)


def training_memory_bytes(config, dtype: str = "float32", batch_size: int = 8, max_length: int = 512,
                          headroom: float = 1.2) -> int:
    """Device memory that :func:`full_scale` needs (an estimate, counted before any weight is read).

    The weights in ``dtype`` times ``headroom``, their gradient and AdamW's two moments (three more copies in
    ``dtype``), and the activations of a step (:func:`step_activation_bytes`, with the block sizes that
    ``config`` gives; an MLP without ``intermediate_size``, GPT-2's, is four times the width).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    weights = parameter_bytes(config, getattr(torch, dtype))
    hidden = int(config.hidden_size)
    inner = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * hidden
    acts = step_activation_bytes(int(config.num_hidden_layers), hidden, int(inner), int(config.vocab_size),
                                 batch_size, max_length)
    return int(weights * headroom + 3 * weights + acts)


def _check_int(value, name: str, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def _check_float(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _load_tokenizer(source: str):
    tokenizer = load_tokenizer(source)
    if tokenizer.pad_token_id is None:           # GPT-2 and others: pad with the end-of-text token
        if tokenizer.eos_token_id is None:
            raise ValueError(f"the tokenizer of {source!r} has neither a pad nor an end-of-sequence token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def _pair_length(tokenizer, pair: PreferencePair) -> int:
    """Tokens of the longer of (prompt + chosen) and (prompt + rejected), as :func:`encode_pairs` builds them."""
    def n(text):
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])
    return n(pair.prompt) + max(n(pair.chosen), n(pair.rejected))


def _logps(model, tokenizer, prompts: list[str], responses: list[str]) -> torch.Tensor:
    """(B,) float32 :math:`\\log\\pi(\\text{response}\\mid\\text{prompt})` on the model's device (with grad)."""
    dev = next(model.parameters()).device
    enc = {k: v.to(dev) for k, v in encode_pairs(tokenizer, prompts, responses).items()}
    return sequence_logprobs(model, enc["input_ids"], enc["labels"], enc["attention_mask"])


@torch.no_grad()
def _score(model, tokenizer, pairs: list[PreferencePair], field: str, batch: int) -> torch.Tensor:
    out = [_logps(model, tokenizer, [p.prompt for p in pairs[i:i + batch]],
                  [getattr(p, field) for p in pairs[i:i + batch]]) for i in range(0, len(pairs), batch)]
    return torch.cat(out).float()


def full_scale(model: str | Path, data: str | Path, *, n_train: int = 512, n_monitor: int = 64,
               n_heldout: int = 64, steps: int = 200, batch_size: int = 4, lr: float = 5e-6, beta: float = 0.1,
               flex_beta_rejected: float | None = 0.04, max_length: int = 512, eval_every: int = 20,
               eval_batch: int = 16, seed: int = 0, device=None, dtype: str = "float32",
               free_bytes: int | None = None, headroom: float = 1.2) -> dict:
    r"""Train a real checkpoint with DPO (and Flex-DPO) on real pairs and record the 3D-properties.

    Parameters
    ----------
    model:
        A hub id (e.g. ``"HuggingFaceTB/SmolLM2-135M-Instruct"``) or a folder written by ``save_pretrained``,
        of a class in :data:`companion_lib.tinylm.SUPPORTED_CAUSAL_LMS`. It is the policy's start and, frozen,
        the reference :math:`\pi_{\mathrm{ref}}`.
    data:
        A JSON-lines file of preference pairs (:func:`load_preference_pairs`). Taken in a seeded order, pairs
        longer than ``max_length`` tokens skipped, the first ``n_train`` are the training pairs and the next
        ``n_heldout`` the held-out pairs.
    n_train, n_monitor, n_heldout:
        Training pairs; how many of them (the first ``n_monitor``) are scored at every evaluation; held-out
        pairs scored at every evaluation (never trained on). Each monitored or held-out pair is one replicate
        of the page's claims, so both need at least 2.
    steps, batch_size, lr:
        AdamW steps (no weight decay, gradient norm clipped to 1) on minibatches of ``batch_size`` pairs,
        cycling through the training pairs in a seeded order.
    beta, flex_beta_rejected:
        :math:`\beta^+=\beta^-=\beta` for DPO; a second run from the same start with
        :math:`\beta^-=` ``flex_beta_rejected`` (Flex-DPO), or ``None`` for none.
    max_length, eval_every, eval_batch:
        Longest pair (prompt plus the longer response, in tokens); the evaluation interval in steps (step 0
        and the last step are always evaluated); the batch of the scoring passes.
    device, dtype, free_bytes, headroom:
        Where and in which precision the policy trains (default: :func:`companion_lib.common.device` and
        float32, the master precision of fine-tuning); the free memory to check against (default: the
        device's); the factor on the weights for everything else (see :func:`training_memory_bytes`).

    Returns
    -------
    dict
        ``source``, ``architecture``, ``device``, ``steps`` (the evaluated steps), ``n_skipped`` (pairs over
        ``max_length`` passed over while selecting), ``beta`` and ``runs``: for ``"dpo"`` (and ``"flex"``) the
        arrays ``logp_chosen``, ``logp_rejected`` (evaluations x ``n_monitor``, nats), ``heldout_chosen``,
        ``heldout_rejected`` (evaluations x ``n_heldout``), ``loss`` (per step), ``beta_rejected`` and
        ``seconds`` (its wall time).

    The model stays in eval mode (no dropout), as the reference that scored the pairs before the first step.

    Every check (arguments, data format and size, checkpoint class, training memory, tokenizer and pair
    lengths) runs before the weights are loaded, so a wrong choice fails in seconds.
    """
    for name, value in (("n_train", n_train), ("steps", steps), ("batch_size", batch_size),
                        ("max_length", max_length), ("eval_every", eval_every), ("eval_batch", eval_batch)):
        _check_int(value, name)
    for name, value in (("n_monitor", n_monitor), ("n_heldout", n_heldout)):
        _check_int(value, name, low=2)
    _check_int(seed, "seed", low=0)
    if n_monitor > n_train:
        raise ValueError(f"n_monitor ({n_monitor}) must not exceed n_train ({n_train})")
    if batch_size > n_train:
        raise ValueError(f"batch_size ({batch_size}) must not exceed n_train ({n_train})")
    lr, beta = _check_float(lr, "lr"), _check_float(beta, "beta")
    if flex_beta_rejected is not None:
        flex_beta_rejected = _check_float(flex_beta_rejected, "flex_beta_rejected")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or headroom < 1:
        raise ValueError(f"headroom must be a number >= 1, got {headroom!r}")

    # 1. the data: format and size
    pairs = load_preference_pairs(data)
    if len(pairs) < n_train + n_heldout:
        raise ValueError(f"{str(data)!r} holds {len(pairs)} pairs; n_train + n_heldout = {n_train + n_heldout} "
                         "are needed (lower them or give more data)")
    # 2. the checkpoint: class, memory, tokenizer (no weights yet)
    config = causal_lm_config(model)
    dev = default_device(None if device is None else str(device))
    check_fits(training_memory_bytes(config, dtype, batch_size, max_length, headroom), dev,
               f"training {str(model)!r} with DPO in {dtype} (weights, gradient, AdamW moments and the activations of "
               f"{2 * batch_size} sequences of {max_length} tokens)",
               "choose a smaller batch_size or max_length, a smaller checkpoint, or a larger GPU", free_bytes)
    tokenizer = _load_tokenizer(str(model))
    # the pairs in a seeded order, those over max_length skipped, until n_train + n_heldout are found (a large
    # file is tokenised only as far as needed)
    needed, chosen_pairs, skipped = n_train + n_heldout, [], 0
    for i in torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed)).tolist():
        if _pair_length(tokenizer, pairs[i]) <= max_length:
            chosen_pairs.append(pairs[i])
            if len(chosen_pairs) == needed:
                break
        else:
            skipped += 1
    if len(chosen_pairs) < needed:
        raise ValueError(f"only {len(chosen_pairs)} of the {len(pairs)} pairs of {str(data)!r} fit max_length="
                         f"{max_length} tokens; n_train + n_heldout = {needed} are needed "
                         "(raise max_length or lower the counts)")
    train, heldout = chosen_pairs[:n_train], chosen_pairs[n_train:]
    monitor = train[:n_monitor]

    # 3. the weights
    loaded = load_causal_lm(model, device=dev, dtype=dtype, headroom=headroom, free_bytes=free_bytes,
                            tokenizer=tokenizer)
    policy = loaded.model
    policy.config.use_cache = False                 # training never reuses a key-value cache
    for p in policy.parameters():
        p.requires_grad_(True)
    ref_c = _score(policy, tokenizer, train, "chosen", eval_batch)       # the frozen reference, once
    ref_r = _score(policy, tokenizer, train, "rejected", eval_batch)
    start = {k: v.detach().to("cpu", copy=True) for k, v in policy.state_dict().items()} \
        if flex_beta_rejected is not None else None
    evaluated = sorted({0, steps, *range(eval_every, steps + 1, eval_every)})

    def run(beta_rejected):
        hist = {k: [] for k in ("logp_chosen", "logp_rejected", "heldout_chosen", "heldout_rejected")}

        def record():
            for key, items, field in (("logp_chosen", monitor, "chosen"), ("logp_rejected", monitor, "rejected"),
                                      ("heldout_chosen", heldout, "chosen"), ("heldout_rejected", heldout, "rejected")):
                hist[key].append(_score(policy, tokenizer, items, field, eval_batch).cpu().numpy())

        def loss_fn(m, idx):
            chunk = [train[i] for i in idx.tolist()]
            prompts = [p.prompt for p in chunk]
            lp = _logps(m, tokenizer, prompts + prompts, [p.chosen for p in chunk] + [p.rejected for p in chunk])
            lp_c, lp_r = lp.chunk(2)
            idx = idx.to(lp.device)
            return dpo_loss(lp_c, lp_r, ref_c[idx], ref_r[idx], beta, beta_rejected).loss

        def callback(step, _):
            if step + 1 in evaluated:
                record()

        t0 = time.perf_counter()
        record()
        g = torch.Generator().manual_seed(seed)
        epochs = -(-steps * batch_size // n_train) + 1
        batches = islice(minibatches(n_train, batch_size, epochs=epochs, generator=g), steps)
        opt = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
        losses = train_loop(policy, loss_fn, batches, optimizer=opt, grad_clip=1.0, callback=callback)
        out = {k: np.stack(v) for k, v in hist.items()}
        out.update(loss=np.asarray(losses), beta_rejected=beta if beta_rejected is None else beta_rejected,
                   seconds=time.perf_counter() - t0)
        return out

    runs = {"dpo": run(None)}
    if flex_beta_rejected is not None:
        policy.load_state_dict(start)
        runs["flex"] = run(flex_beta_rejected)
    return {"source": loaded.source, "architecture": loaded.architecture, "device": str(dev),
            "steps": np.asarray(evaluated), "n_skipped": skipped, "beta": beta, "runs": runs}
