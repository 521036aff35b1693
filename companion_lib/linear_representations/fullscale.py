r"""The chapter at full scale: LREs of a real checkpoint (OLMo, Pythia, Llama, GPT-2) on the paper's relation files.

Merullo et al. (2025, Sec. 3) fit, for each of the RELATIONS data set's factual relations (Hernandez et al.,
2024) and each pretraining checkpoint of OLMo, the LRE of Eq. 1 from 8 subjects in 5-shot prompts, then
measure its faithfulness and causality on the other subjects and set them beside the subject-object
co-occurrence counts of the batches seen so far (Fig. 2). This module does the same on any checkpoint
that :func:`companion_lib.tinylm.load_causal_lm` supports:

* :func:`load_relations` -- the relation files in their real format (one JSON per relation: ``"name"``,
  ``"prompt_templates"`` with ``"{}"`` for the subject, ``"samples"`` of ``{"subject", "object"}``, optional
  ``"properties"``), a folder of them or one file;
* :func:`load_counts` -- co-occurrence counts as JSON lines (:data:`COUNTS_FORMAT`). No reader can compute
  the paper's counts without the pretraining corpus: they came from Batch Search over OLMo's tokenized Dolma
  batches (WIMBD-style counts for GPT-J), so they are an optional input;
* :func:`icl_prompt`, :func:`subject_jacobian` -- the few-shot prompt with the position of the subject's last
  token, and :math:`\partial\mathbf o/\partial\mathbf s` computed a chunk of output coordinates at a time
  (a 2048-wide model's Jacobian in one vectorised call would hold 2048 backward passes at once);
* :func:`measure_relation` -- fit the LRE (mean Jacobian and bias, β by faithfulness and the pseudo-inverse
  rank by hard causality, both on the fitting subjects) and measure every held-out subject;
* :func:`check_full_scale` -- the model's class, every checkpoint's config, the layer, the memory and the data's
  format, checked before any weights are read (the page calls it before its tiny runs);
* :func:`full_scale` -- everything above for every relation and checkpoint (hub revisions, as OLMo publishes
  its intermediate checkpoints), after checking the model class, the memory, the layer and the data's format;
* :func:`full_scale_statistics` -- the statistics of the page's full-scale claims rows.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..common.device import module_device
from ..common.validation import json_lines
from ..tinylm import capture_activations, decode_hidden, layer_adapter, patch_activations
from .lre import LRE, edit_delta, edited_logits

__all__ = ["RELATION_FORMAT", "COUNTS_FORMAT", "Relation", "load_relations", "load_counts", "icl_prompt",
           "object_token", "subject_jacobian", "measure_relation", "FullScalePlan", "check_full_scale", "full_scale",
           "full_scale_statistics"]

#: The relation files' format (Hernandez et al. 2024, ``data/factual/*.json`` of their RELATIONS data set).
RELATION_FORMAT = ('one JSON object per file: {"name": str, "prompt_templates": [str with one "{}" for the '
                   'subject, ...], "samples": [{"subject": str, "object": str}, ...], "properties": {...} '
                   '(optional)}')
#: The co-occurrence counts' format: one JSON object per line.
COUNTS_FORMAT = ('JSON lines, one object per line: {"relation": the relation\'s "name", "subject": str, '
                 '"object": str, "count": int >= 0 (training sequences holding both, up to the checkpoint), '
                 '"checkpoint": the revision name (optional; a line without it counts for every checkpoint)}')


@dataclass(frozen=True)
class Relation:
    """One relation of the RELATIONS data set: its name, prompt templates and (subject, object) samples."""

    name: str
    templates: tuple[str, ...]
    samples: tuple[tuple[str, str], ...]
    properties: dict = field(default_factory=dict, compare=False)


def _relation_error(path: Path, problem: str) -> ValueError:
    return ValueError(f"{path} is not a relation file ({problem}); expected {RELATION_FORMAT}")


def _read_relation(path: Path) -> Relation:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _relation_error(path, f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise _relation_error(path, f"a {type(raw).__name__} at the top level")
    missing = [k for k in ("name", "prompt_templates", "samples") if k not in raw]
    if missing:
        raise _relation_error(path, f"missing {', '.join(missing)}")
    name, templates, samples = raw["name"], raw["prompt_templates"], raw["samples"]
    if not isinstance(name, str) or not name.strip():
        raise _relation_error(path, "name must be a non-empty string")
    if not isinstance(templates, list) or not templates or \
            not all(isinstance(t, str) and t.count("{}") == 1 for t in templates):
        raise _relation_error(path, 'prompt_templates must be a non-empty list of strings with one "{}" each')
    if not isinstance(samples, list) or not samples or not all(
            isinstance(s, dict) and isinstance(s.get("subject"), str) and isinstance(s.get("object"), str)
            and s["subject"].strip() and s["object"].strip() for s in samples):
        raise _relation_error(path, 'samples must be a non-empty list of {"subject": str, "object": str}')
    props = raw.get("properties", {})
    return Relation(name, tuple(templates), tuple((s["subject"], s["object"]) for s in samples),
                    props if isinstance(props, dict) else {})


def load_relations(path: str | Path) -> list[Relation]:
    """The relations of a folder of relation files (every ``*.json`` under it, sorted) or of one file.

    Raises ``ValueError`` naming the file and the expected format (:data:`RELATION_FORMAT`) for a missing path,
    a folder without ``.json`` files, a file that is not JSON or lacks a key, and for two relations of one name.
    """
    if not isinstance(path, (str, Path)):
        raise TypeError(f"data must be a folder of relation files or one file, got {type(path).__name__}")
    path = Path(path)
    if not path.exists():
        raise ValueError(f"no relation data at {path}: pass a folder of relation files (e.g. the RELATIONS data "
                         f"set's data/factual) or one file; expected {RELATION_FORMAT}")
    files = sorted(path.rglob("*.json")) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"{path} holds no .json relation files; expected {RELATION_FORMAT}")
    relations = [_read_relation(f) for f in files]
    names = [r.name for r in relations]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"relation names must be unique, {dupes} repeat under {path}")
    return relations


def load_counts(path: str | Path, relations: list[Relation] | None = None) -> pd.DataFrame:
    """Co-occurrence counts from a JSON-lines file (:data:`COUNTS_FORMAT`), one row per line.

    Columns ``relation, subject, object, count, checkpoint`` (``checkpoint`` is None where a line has none).
    With ``relations``, a relation name that none of them has is an error (it lists the known names).
    """
    if not isinstance(path, (str, Path)):
        raise TypeError(f"counts must be a path to a JSON-lines file, got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"no counts file at {path}; expected {COUNTS_FORMAT}")
    rows = []
    for where, row in json_lines(path, COUNTS_FORMAT):
        ok = (all(isinstance(row.get(k), str) for k in ("relation", "subject", "object"))
              and isinstance(row.get("count"), int) and not isinstance(row["count"], bool) and row["count"] >= 0
              and isinstance(row.get("checkpoint", ""), str))
        if not ok:
            raise ValueError(f"{where}: {json.dumps(row)[:80]} is not a count; expected {COUNTS_FORMAT}")
        rows.append({"relation": row["relation"], "subject": row["subject"], "object": row["object"],
                     "count": row["count"], "checkpoint": row.get("checkpoint")})
    if not rows:
        raise ValueError(f"{path} holds no counts; expected {COUNTS_FORMAT}")
    counts = pd.DataFrame(rows)
    if relations is not None:
        known = {r.name for r in relations}
        unknown = sorted(set(counts.relation) - known)
        if unknown:
            raise ValueError(f"{path} counts relations {unknown} that the relation files do not have "
                             f"(they have {sorted(known)})")
    return counts


def icl_prompt(template: str, subject: str, demonstrations=()) -> tuple[str, int]:
    """The few-shot prompt ``template(s_1) o_1 \\n ... \\n template(subject)`` and where the subject ends.

    Returns ``(text, end)``: ``text[:end]`` ends with the subject's last character (the LRE reads
    :math:`\\mathbf s` at the token holding it).
    """
    if not isinstance(template, str) or template.count("{}") != 1:
        raise ValueError(f'template must be a string with one "{{}}", got {template!r}')
    lines = [template.format(s) + " " + o for s, o in demonstrations]
    head = "\n".join(lines) + ("\n" if lines else "") + template[:template.index("{}")]
    return head + subject + template[template.index("{}") + 2:], len(head) + len(subject)


def _encode(tokenizer, text: str, end: int) -> tuple[torch.Tensor, int]:
    """Token ids (1, length) of ``text`` and the index of the token holding character ``end - 1``."""
    enc = tokenizer(text, return_offsets_mapping=True)
    ids, spans = enc["input_ids"], enc["offset_mapping"]
    hits = [i for i, (a, b) in enumerate(spans) if a < end and b > a]
    if not hits:
        raise ValueError(f"cannot find the subject's last token in {text!r}")
    return torch.tensor([ids]), hits[-1]


def object_token(tokenizer, obj: str) -> int:
    """The id of the first token of ``" " + obj`` (the LM's next token when it answers ``obj``)."""
    ids = tokenizer(" " + obj, add_special_tokens=False)["input_ids"]
    if not ids or ids[0] == tokenizer.unk_token_id:
        raise ValueError(f"the tokenizer has no token for the object {obj!r}")
    return int(ids[0])


def subject_jacobian(model: nn.Module, input_ids: torch.Tensor, layer: int, subject_position: int,
                     chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r""":math:`J=\partial\mathbf o/\partial\mathbf s` of one prompt (Eq. 1), ``chunk`` output coordinates at a time.

    :math:`\mathbf s` is the state of ``layer`` at ``subject_position``, :math:`\mathbf o` the last block's
    output at the last position. One forward pass keeps the graph; each chunk of rows of :math:`J` is one
    batched backward pass (``is_grads_batched``), so memory grows with ``chunk``, not with the width.
    Returns ``(J, s, o)`` in float32: (d, d), (d,), (d,). The same numbers as
    :func:`companion_lib.tinylm.hidden_jacobian` (tested).
    """
    n_layers = layer_adapter(model).n_layers
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must have shape (1, length), got {tuple(input_ids.shape)}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be an int >= 1, got {chunk!r}")
    input_ids = input_ids.to(module_device(model))
    with torch.no_grad(), capture_activations(model, [layer]) as acts:
        model(input_ids=input_ids)
    s = acts[layer][0, subject_position].clone().requires_grad_(True)
    with torch.enable_grad(), patch_activations(model, layer, s[None], position=subject_position), \
            capture_activations(model, n_layers, detach=False) as out:
        model(input_ids=input_ids)
        o = out[n_layers][0, -1]
        d = o.shape[0]
        eye = torch.eye(d, dtype=o.dtype, device=o.device)
        rows = [torch.autograd.grad(o, s, grad_outputs=eye[a:a + chunk], is_grads_batched=True,
                                    retain_graph=a + chunk < d)[0] for a in range(0, d, chunk)]
    return torch.cat(rows).float(), s.detach().float(), o.detach().float()


def _lm(model, ids, layer, pos):
    """The LM's own (s, o, log-probabilities of the next token) of one prompt, in float32."""
    n_layers = layer_adapter(model).n_layers
    ids = ids.to(module_device(model))
    with torch.no_grad(), capture_activations(model, [layer, n_layers]) as acts:
        logits = model(input_ids=ids).logits[0, -1]
    return acts[layer][0, pos].float(), acts[n_layers][0, -1].float(), torch.log_softmax(logits.float(), -1)


def _decode(model, lre: LRE, s: torch.Tensor) -> torch.Tensor:
    """Log-probabilities of the LRE's prediction :math:`\\beta W\\mathbf s+\\mathbf b`, decoded by the LM."""
    dtype = next(model.parameters()).dtype
    with torch.no_grad():
        return torch.log_softmax(decode_hidden(model, lre(s).to(dtype)).float(), -1)


def _edit_pairs(objects: list[int]) -> list[tuple[int, int]]:
    """One edit per item: (item, the next item, cyclically, whose object token differs)."""
    n, pairs = len(objects), []
    for i in range(n):
        j = next(((i + k) % n for k in range(1, n) if objects[(i + k) % n] != objects[i]), None)
        if j is not None:
            pairs.append((i, j))
    return pairs


def _edit_success(model, lre, items, pairs, rank):
    """Hard and soft causality of each edit ``i -> j`` at ``rank`` (lists of bools)."""
    hard, soft = [], []
    for i, j in pairs:
        ids, pos, s, o, _, obj, _ = items[i]
        o_target, obj_target = items[j][3], items[j][5]
        s_new = s + edit_delta(lre, o[None], o_target[None], rank)[0]
        with torch.no_grad():
            logits = edited_logits(model, ids, lre.layer, s_new[None], pos)[0]
        hard.append(bool(logits.argmax() == obj_target))
        soft.append(bool(logits[obj_target] > logits[obj]))
    return hard, soft


def measure_relation(model: nn.Module, tokenizer, relation: Relation, layer: int, n_shots: int = 5,
                     n_fit: int = 8, n_test: int | None = None, betas=(1.0, 2.0, 4.0, 8.0),
                     ranks=(8, 16, 32, 64, 128, 256), chunk: int = 64) -> pd.DataFrame:
    """Fit one relation's LRE and measure it on held-out subjects; one row per test subject.

    The samples are taken in file order (no randomness): the first ``n_shots`` are the demonstrations of
    every prompt (the first template), the next ``n_fit`` fit :math:`W` and :math:`\\mathbf b` (Eq. 1) and
    choose β (faithfulness) and the rank (hard causality of edits among themselves), the next ``n_test``
    (default: all the rest) are tested. Columns: ``subject, object, lm_correct, lm_logprob, faith,
    faith_prob, hard, soft, beta, rank``; ``hard``/``soft`` are NaN for a subject with no edit (every other
    test object has its first token).
    """
    if n_test is not None and (isinstance(n_test, bool) or not isinstance(n_test, int) or n_test < 1):
        raise ValueError(f"n_test must be None or an int >= 1, got {n_test!r}")
    for name, v in (("n_shots", n_shots), ("n_fit", n_fit)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "n_shots" else 1):
            raise ValueError(f"{name} must be an int >= {0 if name == 'n_shots' else 1}, got {v!r}")
    samples = relation.samples
    if len(samples) < n_shots + n_fit + 2:
        raise ValueError(f"relation {relation.name!r} has {len(samples)} samples; it needs n_shots + n_fit + 2 = "
                         f"{n_shots + n_fit + 2} (two to test)")
    demos, fit = samples[:n_shots], samples[n_shots:n_shots + n_fit]
    test = samples[n_shots + n_fit:] if n_test is None else samples[n_shots + n_fit:n_shots + n_fit + n_test]
    template = relation.templates[0]
    d = model.config.hidden_size
    ranks = [r for r in ranks if r <= d] or [d]

    def item(subject, obj, jacobian=False):
        ids, pos = _encode(tokenizer, *icl_prompt(template, subject, demos))
        s, o, lp = _lm(model, ids, layer, pos)
        jac = subject_jacobian(model, ids, layer, pos, chunk)[0] if jacobian else None
        return ids, pos, s, o, lp, object_token(tokenizer, obj), jac

    fit_items = [item(s, o, jacobian=True) for s, o in fit]
    jac = torch.stack([it[6] for it in fit_items])
    s_fit = torch.stack([it[2] for it in fit_items])
    o_fit = torch.stack([it[3] for it in fit_items])
    weight = jac.mean(0)
    bias = (o_fit - torch.einsum("nij,nj->ni", jac, s_fit)).mean(0)
    lre = LRE(weight, bias, layer)
    top_fit = torch.stack([it[4].argmax() for it in fit_items])
    faith_of = {b: float((_decode(model, lre.with_beta(b), s_fit).argmax(-1) == top_fit).float().mean())
                for b in betas}
    lre = lre.with_beta(max(betas, key=lambda b: (faith_of[b], -b)))
    fit_pairs = _edit_pairs([it[5] for it in fit_items])
    if fit_pairs:
        score = {r: np.mean(_edit_success(model, lre, fit_items, fit_pairs, r)[0]) for r in ranks}
        rank = max(ranks, key=lambda r: (score[r], -r))
    else:
        rank = ranks[len(ranks) // 2]
    test_items = [item(s, o) for s, o in test]
    pairs = _edit_pairs([it[5] for it in test_items])
    hard, soft = _edit_success(model, lre, test_items, pairs, rank)
    edit_of = {i: (h, sf) for (i, _), h, sf in zip(pairs, hard, soft)}
    rows = []
    for k, ((subject, obj), (_, _, s, _, lp, tok, _)) in enumerate(zip(test, test_items)):
        lre_lp = _decode(model, lre, s[None])[0]
        h, sf = edit_of.get(k, (math.nan, math.nan))
        rows.append(dict(subject=subject, object=obj, lm_correct=float(lp.argmax() == tok),
                         lm_logprob=float(lp[tok]), faith=float(lre_lp.argmax() == lp.argmax()),
                         faith_prob=float(lre_lp[tok]), hard=float(h), soft=float(sf), beta=lre.beta, rank=rank))
    return pd.DataFrame(rows)


def _checkpoints(model: str, revisions) -> list[tuple[str, str, str | None]]:
    """``(label, source, revision)`` per checkpoint: a local folder's revisions are its sub-folders."""
    if revisions is None:
        return [("final", model, None)]
    if isinstance(revisions, str) or not all(isinstance(r, str) and r.strip() for r in revisions) or not revisions:
        raise TypeError(f"revisions must be None or a non-empty list of revision names, got {revisions!r}")
    out = []
    for rev in revisions:
        sub = Path(model) / rev
        out.append((rev, str(sub), None) if sub.is_dir() else (rev, model, rev))
    return out


@dataclass(frozen=True)
class FullScalePlan:
    """What :func:`check_full_scale` verified: the relations, the counts, the checkpoints and the layer."""

    model: str
    relations: list
    counts: pd.DataFrame | None
    checkpoints: list
    layer: int
    n_layers: int
    hidden_size: int
    parameter_bytes: int


def check_full_scale(model: str | Path, data: str | Path, *, counts: str | Path | None = None, revisions=None,
                     layer: int | None = None, n_shots: int = 5, n_fit: int = 8, device=None,
                     dtype: str | None = None, headroom: float = 1.2, free_bytes: int | None = None) -> FullScalePlan:
    """Check everything :func:`full_scale` needs, reading no weights (seconds, not a download).

    The relation files and the counts (their format), the model's class and the config of every checkpoint
    (:func:`companion_lib.tinylm.causal_lm_config`: an unsupported class names the supported ones), the layer,
    each relation's number of samples, and whether the parameters fit the device's free memory (as
    :func:`companion_lib.tinylm.load_causal_lm` checks it). Raises ``ValueError``/``TypeError`` naming the problem.
    """
    from ..common.device import device as _device
    from ..tinylm import causal_lm_config, check_fits, parameter_bytes, resolve_dtype

    relations = load_relations(data)
    count_table = None if counts is None else load_counts(counts, relations)
    if not isinstance(model, (str, Path)):
        raise TypeError(f"model must be a hub id or a local folder, got {type(model).__name__}")
    model = str(model)
    checkpoints = _checkpoints(model, revisions)
    configs = [causal_lm_config(src) if rev is None else causal_lm_config(src, revision=rev)
               for _, src, rev in checkpoints]
    n_layers = configs[0].num_hidden_layers
    layer = n_layers // 2 if layer is None else layer
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n_layers:
        raise ValueError(f"layer must be an int in [0, {n_layers - 1}] for {model!r} ({n_layers} blocks), got {layer!r}")
    too_few = [r.name for r in relations if len(r.samples) < n_shots + n_fit + 2]
    if too_few:
        raise ValueError(f"relations {too_few} have fewer than n_shots + n_fit + 2 = {n_shots + n_fit + 2} samples")
    dev = _device(None if device is None else str(device))
    dtype, torch_dtype = resolve_dtype(dtype, dev)
    need = parameter_bytes(configs[0], torch_dtype)
    check_fits(need * headroom, dev, f"{model!r} (its parameters in {dtype}, x{headroom} with activations)",
               "choose a smaller model, dtype='float16'/'bfloat16', or a GPU", free_bytes)
    return FullScalePlan(model, relations, count_table, checkpoints, layer, n_layers, configs[0].hidden_size, need)


def full_scale(model: str | Path, data: str | Path, *, counts: str | Path | None = None, revisions=None,
               layer: int | None = None, n_shots: int = 5, n_fit: int = 8, n_test: int | None = None,
               betas=(1.0, 2.0, 4.0, 8.0), ranks=(8, 16, 32, 64, 128, 256), chunk: int = 64,
               device=None, dtype: str | None = None, free_bytes: int | None = None) -> dict:
    """The paper's measurement on a real checkpoint: an LRE per relation and checkpoint, beside its counts.

    Parameters
    ----------
    model:
        A hub id (e.g. ``"allenai/OLMo-1B-hf"``) or a local folder of a class in
        :data:`companion_lib.tinylm.SUPPORTED_CAUSAL_LMS`.
    data:
        The relation files (:func:`load_relations`).
    counts:
        Optional co-occurrence counts (:func:`load_counts`); without them ``cooc`` is NaN.
    revisions:
        Checkpoints to measure (hub revisions such as OLMo's ``"step20000-tokens84B"``; for a local folder,
        its sub-folders of those names); default the final weights only.
    layer:
        The layer of :math:`\\mathbf s` (default: the middle one, ``n_layers // 2``; the paper sweeps it).
    n_shots, n_fit, n_test, betas, ranks, chunk:
        As in :func:`measure_relation` (the paper: 5-shot prompts, 8 fitting subjects).
    device, dtype, free_bytes:
        As in :func:`companion_lib.tinylm.load_causal_lm` (the GPU and float16 when present).

    Everything is checked first (:func:`check_full_scale`), before any weights are read. Returns
    ``{"examples": one row per (checkpoint, relation, test subject), "points": their means per (checkpoint,
    relation), "layer": the layer, "architecture": the class}``.
    """
    from ..tinylm import load_causal_lm

    plan = check_full_scale(model, data, counts=counts, revisions=revisions, layer=layer, n_shots=n_shots,
                            n_fit=n_fit, device=device, dtype=dtype, free_bytes=free_bytes)
    frames, arch = [], None
    for label, src, rev in plan.checkpoints:
        kw = {} if rev is None else {"revision": rev}
        loaded = load_causal_lm(src, device=device, dtype=dtype, free_bytes=free_bytes, **kw)
        arch = loaded.architecture
        for rel in plan.relations:
            df = measure_relation(loaded.model, loaded.tokenizer, rel, plan.layer, n_shots, n_fit, n_test, betas,
                                  ranks, chunk)
            df.insert(0, "relation", rel.name)
            df.insert(0, "checkpoint", label)
            frames.append(df)
        del loaded
    examples = pd.concat(frames, ignore_index=True)
    examples["cooc"] = _match_counts(examples, plan.counts)
    cols = ["cooc", "lm_correct", "lm_logprob", "faith", "faith_prob", "hard", "soft"]
    points = examples.groupby(["checkpoint", "relation"], sort=False, as_index=False)[cols].mean()
    points["n_test"] = examples.groupby(["checkpoint", "relation"], sort=False).size().to_numpy()
    return {"examples": examples, "points": points, "layer": plan.layer, "architecture": arch}


def _match_counts(examples: pd.DataFrame, counts: pd.DataFrame | None) -> np.ndarray:
    """Each example's count: the line of its checkpoint if there is one, else a line without checkpoint."""
    if counts is None:
        return np.full(len(examples), np.nan)
    key = lambda c: zip(c.relation, c.subject, c.object)
    exact = {(*k, ck): n for k, ck, n in zip(key(counts), counts.checkpoint, counts["count"]) if ck is not None}
    anyck = {k: n for k, ck, n in zip(key(counts), counts.checkpoint, counts["count"]) if ck is None}
    return np.array([exact.get((*k, ck), anyck.get(k, np.nan))
                     for k, ck in zip(key(examples), examples.checkpoint)], dtype=float)


def full_scale_statistics(points: pd.DataFrame, threshold: float) -> dict[str, float]:
    """The full-scale claims' statistics over (checkpoint, relation) points (NaN where undefined).

    ``corr``: Pearson r of log10(co-occurrences + 1) and hard causality (Fig. 2); ``threshold``: mean hard
    causality of the points with at least ``threshold`` co-occurrences; ``causality_vs_accuracy``: that r
    minus the r of accuracy; ``acc_close``: mean |accuracy - hard causality| over the relations at the last
    checkpoint (no counts needed).
    """
    need = {"checkpoint", "cooc", "hard", "lm_correct"}
    if not need <= set(points.columns):
        raise ValueError(f"points must have the columns {sorted(need)}")
    last = points[points.checkpoint == points.checkpoint.iloc[-1]].dropna(subset=["hard"])
    out = {"acc_close": float((last.lm_correct - last.hard).abs().mean()) if len(last) else math.nan}
    p = points.dropna(subset=["cooc", "hard"])
    x = np.log10(p.cooc.to_numpy() + 1)

    def r(y):
        y = np.asarray(y, float)
        return float(np.corrcoef(x, y)[0, 1]) if len(x) > 2 and x.std() > 0 and y.std() > 0 else math.nan

    out["corr"] = r(p.hard)
    out["causality_vs_accuracy"] = out["corr"] - r(p.lm_correct)
    above = p[p.cooc >= threshold]
    out["threshold"] = float(above.hard.mean()) if len(above) else math.nan
    return out
