r"""The chapter at full scale: a real target and a smaller proxy of one family, on open-book QA in its public format.

The paper (Liu, Kandpal and Raffel, ICLR 2025, Sec. 4) attributes the responses of Llama 3.1 / Qwen 2.5 targets
on SQuAD 2.0, HotpotQA and QASPER to the sentences of each context, with smaller models of the same family as
proxies, and scores every method by its faithfulness to the target's exact leave-one-out (LOO) against its cost.
This module runs the chapter's own methods (:mod:`.methods`, :func:`.experiment.run_methods`) on such a pair:

* :func:`load_qa` reads **SQuAD 2.0** JSON (``data -> paragraphs -> context, qas -> question, answers``) or
  **HotpotQA distractor** JSON (a list of ``question, answer, context = [[title, [sentences]]]``), detected from
  the file's structure; anything else is refused with an error that names both formats.
* Sources are sentences (HotpotQA gives them; a SQuAD context is split by :func:`split_sentences`, a regular
  expression: the official code uses ``nltk.sent_tokenize``, whose ``punkt`` data is not installed offline in
  the book's environment), groups are paragraphs (HotpotQA's titled paragraphs; a SQuAD context is one).
* :func:`encode_example` builds the prompt (the book's instruction, wrapped in the tokenizer's chat template when
  it has one) piece by piece, so every sentence's token span is exact.
* :func:`full_scale` validates everything (the data's format and size, both checkpoints' classes, their joint
  memory, that the proxy reads the target's tokens, the prompts' lengths) **before any weights are read**, then
  generates the target's greedy responses (or takes the data set's answers) and runs every method on every prompt.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy import stats

from ..common.device import resolve_device
from ..common.validation import check_positive, check_positive_int
from ..tinylm import causal_lm_config, check_fits, load_causal_lm, load_tokenizer, parameter_bytes, resolve_dtype
from .experiment import per_prompt_ap, per_prompt_ratio, run_methods, summarize
from .methods import (Scorer, attention_attribution, check_same_tokenizer, context_cite, gradient_norm_attribution,
                      hierarchical_loo, loo, pruned_loo, similarity_attribution)
from .prompt import ContextPrompt

__all__ = ["QA_FORMATS", "FULL_SCALE_METHODS", "BEST", "INSTRUCTION", "QAExample", "split_sentences", "load_qa",
           "select_examples", "EncodedExample", "encode_example", "greedy_response", "full_scale_specs",
           "FullScaleRun", "full_scale", "full_scale_values", "full_scale_tokens"]

#: The data formats :func:`load_qa` reads, with the structure it expects.
QA_FORMATS = {
    "squad2": "SQuAD 2.0 JSON: {'data': [{'title', 'paragraphs': [{'context', 'qas': [{'id', 'question', "
              "'answers': [{'text', 'answer_start'}], 'is_impossible'}]}]}]} (train-v2.0.json / dev-v2.0.json)",
    "hotpotqa": "HotpotQA distractor JSON: [{'_id', 'question', 'answer', 'context': [[title, [sentence, ...]], "
                "...]}] (hotpot_dev_distractor_v1.json)",
}

#: Every method of the full-scale run, in the order of :func:`full_scale_specs`; ``"exact LOO"`` is the truth.
FULL_SCALE_METHODS = ("exact LOO", "LOO + KV", "hierarchical + KV", "proxy + KV", "proxy + hier + KV",
                      "prune(proxy) + target, KV", "ContextCite", "attention", "gradient norm", "similarity")

#: The combination the claims compare with the baselines (the page's proxy + hierarchical + KV).
BEST = "proxy + hier + KV"

#: The instruction of the prompt (the book's wording; the context and question follow it).
INSTRUCTION = "Answer the question using the context below."

_MARK = "\u2063CONTEXT\u2063"      # an invisible separator around a word no data set contains
_SENT = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'\u201d)\]]))\s+(?=[\"'\u201c(\[]?[A-Z0-9])")


@dataclass(frozen=True)
class QAExample:
    """One question with its context: ``paragraphs`` holds each paragraph's ``(title, sentences)``."""

    id: str
    question: str
    answer: str
    paragraphs: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def n_sources(self) -> int:
        return sum(len(s) for _, s in self.paragraphs)


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: a split after ``.``, ``!`` or ``?`` (and a closing quote or bracket) followed by
    white space and a capital letter, a digit or an opening quote. A regular expression, not a trained
    splitter: an abbreviation before a capitalised word (``Mr. Smith``) splits too."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    return [s.strip() for s in _SENT.split(text.strip()) if s.strip()]


def _format_error(path, what: str) -> ValueError:
    choices = "; ".join(f"{k}: {v}" for k, v in QA_FORMATS.items())
    return ValueError(f"{path}: {what}. The supported formats are {choices}")


def _squad(obj, path) -> list[QAExample]:
    out = []
    try:
        for art in obj["data"]:
            title = str(art.get("title", ""))
            for par in art["paragraphs"]:
                sentences = tuple(split_sentences(par["context"]))
                for qa in par["qas"]:
                    answers = [a["text"] for a in qa.get("answers", [])]
                    if qa.get("is_impossible", False) or not answers or len(sentences) < 2:
                        continue        # unanswerable questions and one-sentence contexts are left out
                    out.append(QAExample(str(qa["id"]), str(qa["question"]), str(answers[0]), ((title, sentences),)))
    except (KeyError, TypeError, AttributeError) as exc:
        raise _format_error(path, f"looks like SQuAD 2.0 but a record lacks or mistypes {exc}") from None
    return out


def _hotpot(obj, path) -> list[QAExample]:
    out = []
    try:
        for i, rec in enumerate(obj):
            paragraphs = []
            for title, sents in rec["context"]:
                if isinstance(sents, str):
                    raise TypeError("a paragraph's sentences must be a list of strings")
                s = tuple(x.strip() for x in sents if x.strip())
                if s:
                    paragraphs.append((str(title), s))
            ex = QAExample(str(rec.get("_id", i)), str(rec["question"]), str(rec["answer"]), tuple(paragraphs))
            if ex.n_sources >= 2:
                out.append(ex)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _format_error(path, f"looks like HotpotQA but a record lacks or mistypes {exc}") from None
    return out


def load_qa(path: str | Path) -> tuple[str, list[QAExample]]:
    """``(format, examples)`` of a SQuAD 2.0 or HotpotQA distractor JSON file (:data:`QA_FORMATS`), detected
    from its structure. Examples with fewer than two sentences, and SQuAD's unanswerable questions, are left
    out (LOO ranks at least two sources; the answer is the response when ``response="answer"``).

    Raises ``ValueError`` naming the file and the supported formats when it is missing, not JSON, or neither
    format."""
    if not isinstance(path, (str, Path)):
        raise TypeError(f"data must be the path of a JSON file, got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise _format_error(path, "no such file")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _format_error(path, f"not a JSON file ({exc})") from None
    if isinstance(obj, dict) and isinstance(obj.get("data"), list) and obj["data"] \
            and isinstance(obj["data"][0], dict) and "paragraphs" in obj["data"][0]:
        fmt, examples = "squad2", _squad(obj, path)
    elif isinstance(obj, list) and obj and isinstance(obj[0], dict) \
            and {"question", "answer", "context"} <= set(obj[0]):
        fmt, examples = "hotpotqa", _hotpot(obj, path)
    else:
        raise _format_error(path, "neither SQuAD 2.0 nor HotpotQA distractor JSON")
    if not examples:
        raise _format_error(path, f"read as {fmt} but holds no answerable question with two or more sentences")
    return fmt, examples


def select_examples(examples: list[QAExample], n: int, seed: int = 0) -> list[QAExample]:
    """``n`` examples drawn without replacement by ``default_rng([seed, 12])`` (in file order when all are taken)."""
    check_positive_int(n, "n_examples")
    if n > len(examples):
        raise ValueError(f"n_examples = {n} but the data holds {len(examples)} usable examples")
    idx = np.sort(np.random.default_rng([seed, 12]).permutation(len(examples))[:n])
    return [examples[i] for i in idx]


@dataclass(frozen=True)
class EncodedExample:
    """A prompt's token ids before its response, with its sentence and paragraph spans and the context's span."""

    ids: tuple[int, ...]
    sources: tuple[tuple[int, int], ...]
    groups: tuple[tuple[int, int], ...]
    context: tuple[int, int]

    def with_response(self, response: list[int]) -> ContextPrompt:
        """The :class:`~.prompt.ContextPrompt` of this prompt followed by the ``response`` token ids."""
        response = [int(t) for t in response]
        if not response:
            raise ValueError("the response is empty: it needs at least one token")
        n = len(self.ids)
        return ContextPrompt(self.ids + tuple(response), self.sources, self.groups,
                             tuple(range(n, n + len(response))), self.context)


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []


def encode_example(tokenizer, example: QAExample) -> EncodedExample:
    """Token ids of ``INSTRUCTION``, the context and the question, in the tokenizer's chat template (a user
    turn and the assistant's generation prompt) when it has one, else as plain text after the BOS token and
    before ``Answer:``. Each piece is tokenized on its own: paragraphs are separated by a blank line, a title
    opens its paragraph, sentences follow one another after a space; a sentence's span is its own tokens."""
    if not isinstance(example, QAExample):
        raise TypeError(f"example must be a QAExample, got {type(example).__name__}")
    text = f"{INSTRUCTION}\n\nContext:\n{_MARK}\n\nQuestion: {example.question}"
    if getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                 add_generation_prompt=True)
        if rendered.count(_MARK) != 1:
            raise ValueError("the tokenizer's chat template does not pass the user's message through unchanged; "
                             "use a tokenizer without a chat template or one that renders the message verbatim")
        head, tail = rendered.split(_MARK)
        ids = _encode(tokenizer, head)
    else:
        head, tail = text.split(_MARK)
        tail += "\nAnswer:"
        ids = ([] if tokenizer.bos_token_id is None else [int(tokenizer.bos_token_id)]) + _encode(tokenizer, head)
    c0 = len(ids)
    sources, groups = [], []
    for j, (title, sentences) in enumerate(example.paragraphs):
        g0 = len(ids)
        if title:
            ids += _encode(tokenizer, f"{title}: ")
        for k, s in enumerate(sentences):
            piece = _encode(tokenizer, s if k == 0 and not title else " " + s)
            if piece:
                sources.append((len(ids), len(ids) + len(piece)))
                ids += piece
        if j < len(example.paragraphs) - 1:
            ids += _encode(tokenizer, "\n\n")
        if len(ids) > g0:
            groups.append((g0, len(ids)))
    c1 = len(ids)
    ids += _encode(tokenizer, tail)
    # a group with no sentence (a title alone) is dropped from the groups; its tokens stay in the context
    groups = [g for g in groups if any(g[0] <= a and b <= g[1] for a, b in sources)]
    return EncodedExample(tuple(ids), tuple(sources), tuple(groups), (c0, c1))


def _stop_ids(scorer: Scorer) -> set[int]:
    ids = set()
    for src in (getattr(scorer.tokenizer, "eos_token_id", None),
                getattr(getattr(scorer.model, "generation_config", None), "eos_token_id", None)):
        if src is None:
            continue
        ids |= {int(t) for t in (src if isinstance(src, (list, tuple)) else [src])}
    return ids


@torch.no_grad()
def greedy_response(scorer: Scorer, ids: list[int], max_new_tokens: int) -> list[int]:
    """The target's greedy response to ``ids`` with a key/value cache: the prompt once, then one token per
    step, until an end-of-sequence token (not included) or ``max_new_tokens``; at least one token (the
    first step never ends the response). The scorer's meter counts every token once."""
    check_positive_int(max_new_tokens, "max_new_tokens")
    stop = _stop_ids(scorer)
    dev = scorer.device
    scorer._count(len(ids))
    out = scorer.model(input_ids=scorer._ids(list(ids), dev), use_cache=True)
    cache, logits = getattr(out, "cache", None) or out.past_key_values, out.logits[0, -1].float()
    response = []
    for step in range(max_new_tokens):
        if step == 0 and stop:
            logits = logits.clone()
            logits[sorted(stop)] = -torch.inf
        tok = int(logits.argmax())
        if tok in stop:
            break
        response.append(tok)
        if step == max_new_tokens - 1:
            break
        scorer._count(1)
        out = scorer.model(input_ids=scorer._ids([tok], dev), position_ids=torch.tensor([[len(ids) + step]], device=dev),
                           **{scorer._kw: cache}, use_cache=True)
        cache, logits = getattr(out, "cache", None) or out.past_key_values, out.logits[0, -1].float()
    return response


def full_scale_specs(target: Scorer, proxy: Scorer, keep_groups: int = 2, keep_sources: int = 4,
                     n_ablations: int = 16, seed: int = 0) -> dict:
    """Name -> (scorers it uses, callable(prompt) -> Attribution) for :data:`FULL_SCALE_METHODS`: the methods of
    :func:`~.experiment.method_specs` with one proxy. ``keep_groups`` and ``keep_sources`` are capped per prompt
    at its number of paragraphs and sentences (a SQuAD context is one paragraph)."""
    for v, name in ((keep_groups, "keep_groups"), (keep_sources, "keep_sources"), (n_ablations, "n_ablations")):
        check_positive_int(v, name)
    check_same_tokenizer(target, proxy)
    rng = np.random.default_rng([seed, 12])
    kg = lambda p: min(keep_groups, len(p.groups))
    ks = lambda p: min(keep_sources, p.n_sources)
    return {
        "exact LOO": ([target], lambda p: loo(target, p)),
        "LOO + KV": ([target], lambda p: loo(target, p, kv_cache=True)),
        "hierarchical + KV": ([target], lambda p: hierarchical_loo(target, p, kg(p), kv_cache=True)),
        "proxy + KV": ([proxy], lambda p: loo(proxy, p, kv_cache=True)),
        "proxy + hier + KV": ([proxy], lambda p: hierarchical_loo(proxy, p, kg(p), kv_cache=True)),
        "prune(proxy) + target, KV": ([proxy, target], lambda p: pruned_loo(proxy, target, p, ks(p), kv_cache=True)),
        "ContextCite": ([target], lambda p: context_cite(target, p, n_ablations, rng)),
        "attention": ([target], lambda p: attention_attribution(target, p)),
        "gradient norm": ([target], lambda p: gradient_norm_attribution(target, p)),
        "similarity": ([target], lambda p: similarity_attribution(target, p)),
    }


@dataclass
class FullScaleRun:
    """What :func:`full_scale` measured: the prompts (with their responses), every method's attributions and
    costs (:func:`~.experiment.run_methods`), the summary table (:func:`~.experiment.summarize`) and the
    generation's per-prompt wall seconds and FLOPs."""

    data_format: str
    examples: list
    prompts: list
    results: dict
    table: pd.DataFrame
    generation: dict
    info: dict = field(default_factory=dict)


def _max_positions(config) -> int | None:
    for name in ("max_position_embeddings", "n_positions"):
        v = getattr(config, name, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def full_scale(model: str | Path, proxy_model: str | Path, data: str | Path, *, n_examples: int = 100,
               response: str = "generate", max_new_tokens: int = 64, keep_groups: int = 2, keep_sources: int = 4,
               n_ablations: int = 16, z: float = 2.0, dtype: str | None = None, device=None,
               headroom: float = 1.2, free_bytes: int | None = None, seed: int = 0) -> FullScaleRun:
    """Attribute a real target's responses on real open-book QA with every method of the chapter.

    Parameters
    ----------
    model, proxy_model:
        The target and its proxy: hub ids or local folders of supported causal LMs
        (:data:`companion_lib.tinylm.SUPPORTED_CAUSAL_LMS`) with the same tokenizer (one family).
    data:
        A SQuAD 2.0 or HotpotQA distractor JSON file (:func:`load_qa`).
    n_examples:
        Prompts drawn from the data (:func:`select_examples` with ``seed``).
    response:
        ``"generate"``: the target's greedy response (:func:`greedy_response`; the paper samples at a low
        temperature), up to ``max_new_tokens``; ``"answer"``: the data set's reference answer.
    keep_groups, keep_sources, n_ablations:
        Paragraphs the hierarchical methods keep, sentences the proxy keeps for pruning, ContextCite's ablations.
    z:
        The outlier rule of the faithfulness metric (:func:`~.methods.outlier_sources`).
    dtype, device, headroom, free_bytes:
        As in :func:`companion_lib.tinylm.load_causal_lm` (default float16 on a GPU); here the check covers
        the target, the proxy and the attention baseline's eager copy of the target together.

    Every check (data format and size, both models' classes, joint memory, same tokenizer, prompt lengths)
    runs before any weights are read.
    """
    for v, name in ((n_examples, "n_examples"), (max_new_tokens, "max_new_tokens"), (keep_groups, "keep_groups"),
                    (keep_sources, "keep_sources"), (n_ablations, "n_ablations")):
        check_positive_int(v, name)
    check_positive(z, "z")
    if response not in ("generate", "answer"):
        raise ValueError(f"response must be 'generate' (the target's greedy response) or 'answer' (the data "
                         f"set's), got {response!r}")
    if proxy_model is None:
        raise ValueError("the full-scale run needs proxy_model: a smaller model of the target's family "
                         "(e.g. 'HuggingFaceTB/SmolLM2-360M-Instruct' for 'HuggingFaceTB/SmolLM2-1.7B-Instruct')")
    # 1. the data (format, size)
    fmt, pool = load_qa(data)
    examples = select_examples(pool, n_examples, seed)
    # 2. the checkpoints' classes and their joint memory
    configs = {"target": causal_lm_config(model), "proxy": causal_lm_config(proxy_model)}
    dev = resolve_device(device)
    dtype, torch_dtype = resolve_dtype(dtype, dev)
    t_bytes, p_bytes = (parameter_bytes(configs[k], torch_dtype) for k in ("target", "proxy"))
    # the attention baseline runs an eager copy of the target
    check_fits((2 * t_bytes + p_bytes) * headroom, dev,
               f"the target {str(model)!r} and proxy {str(proxy_model)!r} (in {dtype}: two copies of the target, one "
               f"of the proxy, x{headroom} for activations)",
               "choose a smaller pair (e.g. SmolLM2-1.7B-Instruct with SmolLM2-360M-Instruct), "
               "dtype='float16'/'bfloat16', or a larger GPU", free_bytes)
    # 3. one tokenizer for both, and prompts that fit the models' positions
    toks = {key: load_tokenizer(str(src)) for key, src in (("target", model), ("proxy", proxy_model))}
    if toks["target"].get_vocab() != toks["proxy"].get_vocab():
        raise ValueError(f"the proxy {str(proxy_model)!r} has a tokenizer different from the target {str(model)!r}'s: "
                         "choose a proxy of the same family (the same tokenizer), e.g. SmolLM2-360M-Instruct for "
                         "SmolLM2-1.7B-Instruct, or Llama-3.1-8B-Instruct for Llama-3.1-70B-Instruct")
    tok = toks["target"]
    encoded = [encode_example(tok, ex) for ex in examples]
    answers = [_encode(tok, ex.answer) for ex in examples]
    limits = [x for x in (_max_positions(c) for c in configs.values()) if x is not None]
    limit = min(limits) if limits else None
    for ex, enc, ans in zip(examples, encoded, answers):
        longest = len(enc.ids) + (max_new_tokens if response == "generate" else len(ans))
        if limit is not None and longest > limit:
            raise ValueError(f"example {ex.id!r} needs {longest} positions (prompt and response) but the models take "
                             f"{limit}: choose shorter contexts, a smaller max_new_tokens, or another model")
        if response == "answer" and not ans:
            raise ValueError(f"example {ex.id!r} has an empty answer: use response='generate'")
    # 4. the weights, then the work
    loaded = {k: load_causal_lm(src, device=dev, dtype=dtype, headroom=headroom, free_bytes=free_bytes,
                                tokenizer=toks[k]) for k, src in (("target", model), ("proxy", proxy_model))}
    target = Scorer(loaded["target"].model, loaded["target"].tokenizer, "target")
    proxy = Scorer(loaded["proxy"].model, loaded["proxy"].tokenizer, "proxy")
    prompts, gen = [], {"wall": [], "flops": [], "tokens": []}
    for enc, ans in zip(encoded, answers):
        target.reset()
        w0 = time.perf_counter()
        resp = greedy_response(target, list(enc.ids), max_new_tokens) if response == "generate" else ans
        gen["wall"].append(time.perf_counter() - w0)
        gen["flops"].append(target.flops)
        gen["tokens"].append(len(resp))
        prompts.append(enc.with_response(resp))
    specs = full_scale_specs(target, proxy, keep_groups, keep_sources, n_ablations, seed)
    results = run_methods(specs, prompts)
    table = summarize(results, z=z, k=min(keep_sources, min(p.n_sources for p in prompts)))   # recall@k: k capped
    info = {"target": str(model), "proxy": str(proxy_model), "architecture": loaded["target"].architecture,
            "device": str(dev), "dtype": dtype, "response": response,
            "target params": target.n_params, "proxy params": proxy.n_params,
            "sources": np.array([p.n_sources for p in prompts]), "prompt tokens": np.array([len(p.ids) for p in prompts])}
    return FullScaleRun(fmt, examples, prompts, results, table, {k: np.array(v) for k, v in gen.items()}, info)


def full_scale_values(run: FullScaleRun, z: float = 2.0) -> dict:
    """Per claim key, ``(per-prompt values, paired baseline or None)`` of a full-scale run: the proxy's Pearson
    r with the target's LOO, the KV cache's wall-time ratio, the mAP leads of :data:`BEST` over each baseline and
    its wall-time ratios over ContextCite, exact LOO and the generation of the response."""
    if not isinstance(run, FullScaleRun):
        raise TypeError(f"run must be a FullScaleRun, got {type(run).__name__}")
    res = run.results
    truth = [a.scores for a in res["exact LOO"]["attributions"]]
    r = np.array([stats.pearsonr(a.scores, t)[0] for a, t in zip(res["proxy + KV"]["attributions"], truth)])
    ap = {name: per_prompt_ap(res, name, z=z) for name in (BEST, "attention", "ContextCite", "gradient norm",
                                                           "similarity")}
    return {
        "proxy_corr": (r, None),
        "kv_wall": (per_prompt_ratio(res, "exact LOO", "LOO + KV"), None),
        "lead_attention": (ap[BEST], ap["attention"]),
        "lead_contextcite": (ap[BEST], ap["ContextCite"]),
        "lead_gradnorm": (ap[BEST], ap["gradient norm"]),
        "lead_similarity": (ap[BEST], ap["similarity"]),
        "speed_vs_contextcite": (per_prompt_ratio(res, "ContextCite", BEST), None),
        "speedup_300": (per_prompt_ratio(res, "exact LOO", BEST), None),
        "faster_than_generation": (run.generation["wall"] / res[BEST]["wall"], None),
    }


def full_scale_tokens(n_examples: int, context_tokens: float, other_tokens: float, response_tokens: float,
                      n_sources: int, n_groups: int, keep_groups: int, keep_sources: int, n_ablations: int,
                      proxy_ratio: float) -> pd.Series:
    r"""Planned tokens per method of a full-scale run, in *target-equivalent* tokens (a proxy token counts
    ``proxy_ratio`` = proxy parameters / target parameters), for ``n_examples`` prompts of ``context_tokens``
    context tokens spread evenly over ``n_sources`` sentences in ``n_groups`` paragraphs, ``other_tokens``
    of instruction and question and ``response_tokens`` of response (an estimate for a plan, not a count).

    Exact LOO runs :math:`n+1` full sequences of :math:`L` tokens; with a KV cache an ablation runs only the
    tokens after its source (on average half the context plus the question and response); the hierarchical
    methods run one such pass per paragraph, then per sentence of the ``keep_groups`` kept paragraphs;
    ContextCite runs ``n_ablations`` sequences of about half the context; attention one pass, the gradient
    norm three, the generation the prompt and one token per response token.
    """
    for v, name in ((n_examples, "n_examples"), (n_sources, "n_sources"), (n_groups, "n_groups"),
                    (keep_groups, "keep_groups"), (keep_sources, "keep_sources"), (n_ablations, "n_ablations")):
        check_positive_int(v, name)
    for v, name in ((context_tokens, "context_tokens"), (response_tokens, "response_tokens"),
                    (proxy_ratio, "proxy_ratio")):
        check_positive(v, name)
    if other_tokens < 0:
        raise ValueError(f"other_tokens must be >= 0, got {other_tokens}")
    C, R, O = float(context_tokens), float(response_tokens), float(other_tokens)
    L = C + O + R
    kg, ks = min(keep_groups, n_groups), min(keep_sources, n_sources)

    def kv(n_units: float, ctx: float) -> float:          # one full pass and n suffix passes
        return (ctx + O + R) + n_units * (ctx / 2 + O + R)

    hier = kv(n_groups, C) + kv(n_sources * kg / n_groups, C * kg / n_groups)
    tokens = {"exact LOO": (n_sources + 1) * L, "LOO + KV": kv(n_sources, C), "hierarchical + KV": hier,
              "proxy + KV": proxy_ratio * kv(n_sources, C), "proxy + hier + KV": proxy_ratio * hier,
              "prune(proxy) + target, KV": proxy_ratio * kv(n_sources, C) + kv(ks, C * ks / n_sources),
              "ContextCite": n_ablations * (C / 2 + O + R), "attention": L, "gradient norm": 3 * L,
              "similarity": 0.0, "generation": L}
    return pd.Series({k: n_examples * v for k, v in tokens.items()}, name="target-equivalent tokens")
