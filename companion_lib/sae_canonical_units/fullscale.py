r"""At full scale: the chapter's measurements on a real language model's residual stream.

The paper trains its SAEs on the residual stream of GPT-2 small before block 8 (``blocks.8.hook_resid_pre``,
layer 8 in :mod:`companion_lib.tinylm`'s numbering) over OpenWebText, stitches SAEs of different widths and
trains a meta-SAE on a wide SAE's decoder rows. :func:`full_scale` runs the same measurements with this
chapter's own trainer (:func:`~.training.train_saes`) and analyses (:mod:`.evaluation`, :mod:`.stitching`) on
any supported checkpoint (:data:`companion_lib.tinylm.SUPPORTED_CAUSAL_LMS`) and a text file:

* :func:`load_texts` -- documents from a ``.txt`` file (blank-line separated) or JSON lines with a
  ``"text"`` field (the format of a Hugging Face ``datasets`` dump of OpenWebText), format checked;
* :func:`residual_activations` -- the layer-:math:`\ell` states of every token of the texts, cut into
  blocks of ``context`` tokens (batched forward passes under :func:`companion_lib.tinylm.capture_activations`);
* :func:`sae_memory_bytes` -- the memory the batched SAE training needs (checked before any weights load);
* :func:`full_scale` -- validate everything, then load, collect, train, analyse.

A real model has no ground-truth atoms, entities or rare features: only the measurements that need none
are made here (BatchTopK against TopK, the insertion deltas and their max-cos proxy, the stitching path,
the meta-SAE's explained variance against a null and its resemblance to the small SAE's latents).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from ..common.device import module_device, resolve_device
from ..common.validation import json_lines
from .evaluation import alive_latents, max_cosine, mean_l0, nmse
from .experiment import _fve, _spearman
from .stitching import insertion_deltas, stitching_path_gram
from .training import train_meta_saes, train_saes
from .world import _unit

__all__ = ["TEXT_FORMATS", "load_texts", "residual_activations", "sae_memory_bytes",
           "full_scale"]

#: The text formats :func:`load_texts` reads, by file suffix.
TEXT_FORMATS = {".txt": "plain text, documents separated by blank lines",
                ".jsonl": 'JSON lines, one object per line with a string "text" field',
                ".json": 'JSON lines, one object per line with a string "text" field'}


def _formats() -> str:
    return "; ".join(f"{k}: {v}" for k, v in TEXT_FORMATS.items())


def load_texts(path: str | Path) -> list[str]:
    """The documents of a text file in one of :data:`TEXT_FORMATS` (non-empty documents only).

    Raises ``ValueError`` naming the file and the supported formats when it does not exist, has another
    suffix, holds a line that is not a JSON object with a string ``"text"`` field, or holds no text."""
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise TypeError(f"data must be the path of a text file ({_formats()}), got {type(path).__name__}")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"data file {str(path)!r} does not exist; give a text file ({_formats()})")
    suffix = path.suffix.lower()
    if suffix not in TEXT_FORMATS:
        raise ValueError(f"data file {str(path)!r} has the suffix {suffix!r}; supported: {_formats()}")
    if suffix == ".txt":
        texts = [t.strip() for t in path.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n\n")]
    else:
        texts = []
        for where, obj in json_lines(path, TEXT_FORMATS[".jsonl"]):
            if not isinstance(obj.get("text"), str):
                raise ValueError(f"{where} has no string \"text\" field; expected {TEXT_FORMATS['.jsonl']}")
            texts.append(obj["text"].strip())
    texts = [t for t in texts if t]
    if not texts:
        raise ValueError(f"data file {str(path)!r} holds no text; supported: {_formats()}")
    return texts


def _token_stream(tokenizer, texts: list[str]) -> list[int]:
    """The texts' token ids, concatenated, each document followed by the end-of-text token when the
    tokenizer has one (else its beginning-of-sequence token, else nothing)."""
    sep = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.bos_token_id
    ids: list[int] = []
    for start in range(0, len(texts), 256):
        for row in tokenizer(texts[start:start + 256], add_special_tokens=False)["input_ids"]:
            ids.extend(row)
            if sep is not None:
                ids.append(int(sep))
    return ids


def _blocks(ids: list[int], n_rows: int, context: int) -> torch.Tensor:
    """The first blocks of ``context`` tokens that hold ``n_rows`` kept positions (positions 1..context-1)."""
    per_block = context - 1
    n_blocks = math.ceil(n_rows / per_block)
    if n_blocks * context > len(ids):
        have = (len(ids) // context) * per_block
        raise ValueError(f"the text gives {len(ids)} tokens, {have} activation rows in blocks of {context}; the run "
                         f"needs {n_rows} (n_tokens + n_test): give more text or lower n_tokens/n_test")
    return torch.tensor(ids[:n_blocks * context], dtype=torch.long).reshape(n_blocks, context)


def residual_activations(model: torch.nn.Module, input_blocks: torch.Tensor, layer: int, n_rows: int,
                         batch_size: int = 32) -> np.ndarray:
    r"""The (n_rows, d) float32 states $h^{(\ell)}$ of ``layer`` (layer $\ell$ is the input of block $\ell$,
    the paper's ``hook_resid_pre``) at positions $1,\dots,$ context$-1$ of each block of ``input_blocks``
    (blocks x context token ids, every token real), ``batch_size`` blocks per forward pass. Position 0 is left
    out: its state has a norm far above the others' in GPT-2 and would dominate every squared error."""
    from ..tinylm import capture_activations

    if input_blocks.ndim != 2 or input_blocks.shape[1] < 2:
        raise ValueError(f"input_blocks must be (blocks, context >= 2) token ids, got {tuple(input_blocks.shape)}")
    dev = module_device(model)
    parts, have = [], 0
    with torch.no_grad(), capture_activations(model, layer) as acts:
        for start in range(0, input_blocks.shape[0], batch_size):
            model(input_ids=input_blocks[start:start + batch_size].to(dev))
            h = acts[layer][:, 1:].float().reshape(-1, acts[layer].shape[-1]).cpu()
            parts.append(h)
            have += h.shape[0]
            if have >= n_rows:
                break
    X = torch.cat(parts)[:n_rows].numpy()
    if X.shape[0] < n_rows:
        raise ValueError(f"got {X.shape[0]} activation rows, need {n_rows}")
    if not np.isfinite(X).all():
        raise ValueError(f"layer {layer} states contain NaN or infinite values (try dtype='float32' or 'bfloat16')")
    return X


def sae_memory_bytes(n_tokens: int, d: int, widths, n_seeds: int, batch_size: int, steps: int, k: int) -> int:
    r"""Bytes that :func:`~.training.train_saes` holds on its device for ``n_seeds`` SAEs of the largest
    width at once: the stacked activations (float32, one copy per seed), the batch indices of every step
    (int64), parameters with gradients and Adam's two moments (four float32 copies of $W_{enc}$, $W_{dec}$),
    and a step's activations (pre-activations, their ReLU, the codes and a reconstruction's worth, about
    six batch x width float32 arrays per seed)."""
    w = max(int(v) for v in widths)
    data = 4 * n_seeds * n_tokens * d
    indices = 8 * steps * n_seeds * batch_size
    params = 4 * 4 * n_seeds * (2 * d * w + w + d)
    step = 4 * 6 * n_seeds * batch_size * (w + d) + 8 * n_seeds * batch_size * k
    return int(data + indices + params + step)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def full_scale(model: str | Path, data: str | Path, *, layer: int = 8, widths=(768, 1536, 3072, 6144), k: int = 32,
               seeds=(0, 1, 2), n_tokens: int = 2**18, n_test: int = 2**14, n_stitch: int = 4096, context: int = 128,
               steps: int = 2000, batch_size: int = 4096, lr: float = 3e-4, k_aux: int = 512, dead_after: int = 200,
               meta_width: int = 256, meta_k: int = 4, meta_steps: int = 3000, dtype: str | None = None,
               lm_batch: int = 32, device=None, free_bytes: int | None = None) -> dict:
    r"""The chapter's measurements on a real checkpoint: residual-stream states of ``model`` at ``layer`` over
    the texts of ``data``, BatchTopK SAEs of every width in ``widths`` (and a TopK SAE at the stitched large
    width) for every seed in ``seeds`` (a replicate: the SAEs' initialisation and batches; the activations are
    the same), stitching of the narrowest SAE A into the middle one B (``sorted(widths)[len // 2]``, as the
    page's tiny run), and meta-SAEs on the widest SAE's alive decoder rows and on as many random unit
    vectors (the null).

    **Checks first**, each with an error naming the problem and the choices, before any weights are read:
    the sizes; ``data``'s format (:func:`load_texts`); the checkpoint's class
    (:func:`companion_lib.tinylm.causal_lm_config`); ``layer`` against its depth; the memory of the model and
    the SAE training (:func:`sae_memory_bytes`) against the device's free memory (``free_bytes`` overrides it);
    the tokenizer, and whether the text gives ``n_tokens + n_test`` rows. Then the weights load
    (:func:`companion_lib.tinylm.load_causal_lm`, half precision on a GPU), the states are collected and
    divided by one scalar, the root mean squared norm of the training rows (the SAEs' learning rate is
    tuned for unit-scale data; directions, NMSE and cosines do not change), and the model is freed.

    Defaults: the paper's GPT-2 setting (layer 8, widths from 768, ``k = 32``, batch 4096, ``lr = 3e-4`` and
    ``k_aux = 512`` from the official BatchTopK code's config; meta-SAE ``k = 4`` as in the paper), at a token
    budget that fits a Colab GPU (the paper trains on hundreds of millions of tokens). The meta-SAEs' width is
    ``meta_width`` capped at the fewest alive rows of a seed. ``device`` is where the model runs and the SAEs
    train (default: the GPU when present); the analyses after training run on the CPU. ``lm_batch`` is the
    number of contexts per forward pass. Returns a dict:
    ``"table"`` (one row per seed: the numbers the claims read), ``"sweep"`` (per seed and SAE: NMSE, L0,
    alive latents), ``"stitch"`` (per seed: max-cos, insertion deltas, paths), ``"config"`` and
    ``"scale"``."""
    import pandas as pd

    from ..tinylm import causal_lm_config, check_fits, load_causal_lm, load_tokenizer, parameter_bytes, resolve_dtype

    # 1. sizes
    widths = sorted({_positive_int("every width", w) for w in widths})
    if len(widths) < 2:
        raise ValueError(f"widths must hold at least two different widths (A and B of the stitching), got {widths}")
    seeds = [int(s) for s in seeds]
    if len(seeds) < 2:
        raise ValueError(f"seeds must hold at least two seeds (the claims' intervals need two replicates), got {seeds}")
    k = _positive_int("k", k)
    if k > widths[0]:
        raise ValueError(f"k ({k}) must be <= the narrowest width ({widths[0]})")
    for name, value in dict(n_tokens=n_tokens, n_test=n_test, n_stitch=n_stitch, steps=steps, batch_size=batch_size,
                            k_aux=k_aux, dead_after=dead_after, meta_width=meta_width, meta_k=meta_k,
                            meta_steps=meta_steps, lm_batch=lm_batch).items():
        _positive_int(name, value)
    if _positive_int("context", context) < 2:
        raise ValueError(f"context must be >= 2 tokens, got {context}")
    if meta_k > meta_width:
        raise ValueError(f"meta_k ({meta_k}) must be <= meta_width ({meta_width})")
    if n_stitch > n_test:
        raise ValueError(f"n_stitch ({n_stitch}) must be <= n_test ({n_test})")
    # 2. data, 3. class and depth, 4. memory
    texts = load_texts(data)
    config = causal_lm_config(model)
    n_layers = int(config.num_hidden_layers)
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer <= n_layers:
        raise ValueError(f"layer must be an int in [0, {n_layers}] for {str(model)!r} ({n_layers} blocks; the "
                         f"paper: 8 of GPT-2 small), got {layer!r}")
    dev = resolve_device(device)
    dtype, torch_dtype = resolve_dtype(dtype, dev)
    d = int(config.hidden_size)
    need_lm = parameter_bytes(config, torch_dtype) * 1.2
    need_sae = sae_memory_bytes(n_tokens, d, widths, len(seeds), batch_size, steps, k)
    check_fits(need_lm + need_sae, dev,
               f"the run ({need_lm / 2**30:.2f} GiB for {str(model)!r} in {dtype}, {need_sae / 2**30:.2f} for "
               f"training {len(seeds)} SAEs of width {widths[-1]} on {n_tokens} tokens)",
               "lower n_tokens, the number of seeds, the widths or batch_size, or use a larger GPU", free_bytes)
    # 5. tokenizer and token count
    tokenizer = load_tokenizer(str(model))
    blocks = _blocks(_token_stream(tokenizer, texts), n_tokens + n_test, context)
    # the long work: weights, states, SAEs
    lm = load_causal_lm(model, device=dev, dtype=dtype, free_bytes=free_bytes, tokenizer=tokenizer)
    rows = residual_activations(lm.model, blocks, int(layer), n_tokens + n_test, batch_size=lm_batch)
    del lm
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    scale = float(np.sqrt((rows[:n_tokens].astype(np.float64) ** 2).sum(1).mean()))
    if not scale > 0:
        raise ValueError(f"layer {layer} states are all zero")
    rows /= scale
    X, Xt = rows[:n_tokens], rows[n_tokens:]
    small_w, large_w, widest = widths[0], widths[len(widths) // 2], widths[-1]
    Xs = [torch.as_tensor(X)] * len(seeds)
    kw = dict(steps=steps, batch_size=batch_size, lr=lr, k_aux=k_aux, dead_after=dead_after, seeds=seeds, device=dev)
    saes = {w: train_saes(Xs, w, k, "batchtopk", **kw)[0] for w in widths}
    topk = train_saes(Xs, large_w, k, "topk", **kw)[0]
    del Xs
    # 6. analyses, per seed
    Xs_stitch = Xt[:n_stitch]
    table, sweep, stitch, meta_rows = [], [], [], []
    for i, s in enumerate(seeds):
        for m in [*(saes[w][i] for w in widths), topk[i]]:
            sweep.append(dict(seed=s, kind=m.kind, width=m.width, nmse=nmse(m, Xt), l0=mean_l0(m, Xt),
                              alive=int(alive_latents(m, Xt).sum())))
        A, B = saes[small_w][i], saes[large_w][i]
        alive_B = alive_latents(B, Xt)
        B_alive = B.as_dictionary().subset(np.flatnonzero(alive_B))
        delta = insertion_deltas(A, B_alive, Xs_stitch)
        maxcos = max_cosine(B_alive.W_dec, A)
        full, moves = stitching_path_gram(A, B_alive, Xs_stitch, greedy=True, stop=False)
        up = np.flatnonzero(np.diff(full) >= 0)
        n_stop = int(up[0]) if len(up) else len(moves)
        stitch.append(dict(seed=s, delta=delta, maxcos=maxcos, path_full=full, path_greedy=full[:n_stop + 1],
                           mse_B=float(((Xs_stitch - B_alive.reconstruct(Xs_stitch.astype(np.float64))) ** 2).sum(1).mean())))
        big = saes[widest][i]
        meta_rows.append(big.W_dec.detach().numpy()[alive_latents(big, Xt)])
    R = len(seeds)
    nulls = [_unit(np.random.default_rng([s, 2]).standard_normal(r.shape)).astype(np.float32)
             for s, r in zip(seeds, meta_rows)]
    if min(len(r) for r in meta_rows) < meta_k:
        raise ValueError(f"the widest SAE has fewer alive latents than meta_k ({meta_k}) on some seed: train longer")
    metas, _ = train_meta_saes(meta_rows + nulls, min(meta_width, min(len(r) for r in meta_rows)), meta_k,
                               steps=meta_steps, seeds=seeds * 2, device=dev)
    for i, s in enumerate(seeds):
        st, sw = stitch[i], {(r["kind"], r["width"]): r for r in sweep if r["seed"] == s}
        path = st["path_full"]
        table.append(dict(
            seed=s, nmse_batchtopk=sw[("batchtopk", large_w)]["nmse"], nmse_topk=sw[("topk", large_w)]["nmse"],
            l0_batchtopk=sw[("batchtopk", large_w)]["l0"], l0_topk=sw[("topk", large_w)]["l0"],
            spearman=_spearman(st["maxcos"], st["delta"]) if len(st["delta"]) > 1 else 0.0,
            novel_share=float((st["delta"] < 0).mean()) if len(st["delta"]) else 0.0,
            monotone_full=float(np.mean(np.diff(path) <= 1e-4)) if len(path) > 1 else 1.0,
            monotone_strict=float(np.mean(np.diff(path) <= 0)) if len(path) > 1 else 1.0,
            path_start=float(path[0]), full_end=float(path[-1]), path_end=float(st["path_greedy"][-1]),
            mse_B=st["mse_B"], n_moves=len(path) - 1,
            meta_fve=_fve(metas[i], meta_rows[i]), meta_fve_null=_fve(metas[R + i], nulls[i]),
            meta_maxcos_small=float(max_cosine(metas[i], saes[small_w][i]).mean()),
            meta_maxcos_null=float(max_cosine(metas[R + i], saes[small_w][i]).mean()),
            meta_rows=int(len(meta_rows[i]))))
    config_out = dict(model=str(model), layer=int(layer), widths=tuple(widths), k=k, small=small_w, large=large_w,
                      widest=widest, n_tokens=n_tokens, n_test=n_test, context=context, steps=steps,
                      batch_size=batch_size, meta_width=int(metas[0].width), meta_k=meta_k, device=str(dev),
                      dtype=dtype, d=d)
    return dict(table=pd.DataFrame(table).set_index("seed"), sweep=pd.DataFrame(sweep), stitch=stitch,
                config=config_out, scale=scale)
