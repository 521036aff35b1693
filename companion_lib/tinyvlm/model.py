r"""A tiny LLaVA-style vision-language model: patch encoder, projector, and a Hugging Face Llama decoder.

The decoder is a :class:`transformers.LlamaForCausalLM` with a tiny configuration, fed with
``inputs_embeds``. The input sequence of every example has the same layout, as in LLaVA:

.. code-block:: text

    position  0        1 ... 16              17         18 ...
              <bos>    16 image tokens       describe   caption words, ".", <eos>

Image tokens are :math:`\mathrm{proj}(\mathrm{enc}(x_m))` for the 16 patches :math:`x_m\in\mathbb R^{75}`
(row-major cells). For the *base language model* (the world's "Vicuna") the same 16 positions hold the
word embeddings of a text sketch of the scene instead. Because the layout is fixed, the image block is
:data:`IMAGE_SLICE` and the post-image text begins at :data:`TEXT_START`, the analogue of LLaVA-1.5's
``img_start_pos=35, img_length=576``.

Attention runs through a registered :class:`transformers.AttentionInterface` function
(:data:`ATTN_IMPLEMENTATION`), an eager softmax attention that applies the edits and recordings of
:mod:`companion_lib.tinyvlm.hooks`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM

from ..common.device import module_device
from .world import N_PATCHES, TOKEN_ID, VOCAB, decode_caption, patchify

__all__ = [
    "ATTN_IMPLEMENTATION", "IMAGE_SLICE", "TEXT_START", "TinyVLM", "tiny_llama_config", "greedy_captions",
    "as_patches", "caption_batch",
]

ATTN_IMPLEMENTATION = "tinyvlm_eager"
IMAGE_SLICE = slice(1, 1 + N_PATCHES)
TEXT_START = 1 + N_PATCHES


_FUTURE: dict = {}


def _future_mask(q_len: int, k_len: int, device) -> torch.Tensor:
    """The keys each query must not see, ``(q_len, k_len)`` (True above the causal diagonal, which sits at
    ``k_len - q_len`` with a key-value cache); built once per shape and device."""
    key = (q_len, k_len, str(device))
    mask = _FUTURE.get(key)
    if mask is None:
        mask = _FUTURE[key] = ~torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)
    return mask


def _tinyvlm_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Eager causal attention whose post-softmax weights pass through the module's edits.

    ``module._tinyvlm_edits`` is a list of callables ``edit(A, layer_idx) -> A`` on the weights
    ``A`` of shape ``(batch, heads, queries, keys)``, whose rows are absolute query positions (with a
    key-value cache the new rows are placed in a full ``keys x keys`` map for the edits, so an edit never
    needs to know whether a cache is used); ``module._tinyvlm_record`` a list that receives ``A``.
    An edit with a true ``rows`` attribute (the row-wise edits of :mod:`~companion_lib.tinyvlm.hooks`) is
    called as ``edit(A, layer_idx, row0)`` on the new rows alone, ``row0`` the absolute position of the
    first, which spares building the full map at every decoding step and gives the same weights.
    The mask is rebuilt as a plain causal mask (this model never pads on the left).
    """
    # the arithmetic of scores * scaling, masked_fill and softmax, done in place on the fresh scores
    scores = torch.matmul(query, key.transpose(2, 3)).mul_(scaling)
    q_len, k_len = scores.shape[-2], scores.shape[-1]
    if q_len > 1:  # a single (newest) query row sees every key
        scores.masked_fill_(_future_mask(q_len, k_len, scores.device), float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    edits = getattr(module, "_tinyvlm_edits", ())
    if edits and k_len > q_len and not all(getattr(edit, "rows", False) for edit in edits):
        # decoding with a key-value cache: the rows are the last q_len query positions; the edits index
        # absolute positions, so they see the rows in place in a full (keys x keys) map
        full = weights.new_zeros(weights.shape[:2] + (k_len, k_len))
        full[:, :, k_len - q_len:] = weights
        for edit in edits:
            full = edit(full, module.layer_idx)
        weights = full[:, :, k_len - q_len:]
    elif edits:
        for edit in edits:
            weights = edit(weights, module.layer_idx, k_len - q_len) if getattr(edit, "rows", False) \
                else edit(weights, module.layer_idx)
    record = getattr(module, "_tinyvlm_record", None)
    if record is not None:
        record.append(weights)
    out = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return out, weights


AttentionInterface.register(ATTN_IMPLEMENTATION, _tinyvlm_attention)


def tiny_llama_config(vocab_size: int = len(VOCAB), hidden_size: int = 64, n_layer: int = 4, n_head: int = 8,
                      intermediate_size: int = 128, max_positions: int = 40) -> LlamaConfig:
    """A tiny Llama configuration with tied embeddings and the book's attention function."""
    for name, value in (("vocab_size", vocab_size), ("hidden_size", hidden_size), ("n_layer", n_layer),
                        ("n_head", n_head), ("intermediate_size", intermediate_size),
                        ("max_positions", max_positions)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if hidden_size % n_head:
        raise ValueError(f"hidden_size ({hidden_size}) must be divisible by n_head ({n_head})")
    cfg = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=n_layer, num_attention_heads=n_head,
        num_key_value_heads=n_head, intermediate_size=intermediate_size, max_position_embeddings=max_positions,
        tie_word_embeddings=True, pad_token_id=TOKEN_ID["<pad>"], bos_token_id=TOKEN_ID["<bos>"],
        eos_token_id=TOKEN_ID["<eos>"], use_cache=False,
    )
    cfg._attn_implementation = ATTN_IMPLEMENTATION
    return cfg


class TinyVLM(nn.Module):
    """Patch encoder (Linear-GELU-Linear), projector (Linear-GELU-Linear) and a Llama decoder.

    ``encoder`` plays CLIP's part, ``projector`` LLaVA's MLP projector, ``lm`` Vicuna's.
    """

    def __init__(self, config: LlamaConfig | None = None, patch_dim: int = 75, vision_dim: int = 64) -> None:
        super().__init__()
        config = config or tiny_llama_config()
        d = config.hidden_size
        self.encoder = nn.Sequential(nn.Linear(patch_dim, vision_dim), nn.GELU(), nn.Linear(vision_dim, vision_dim))
        self.projector = nn.Sequential(nn.Linear(vision_dim, d), nn.GELU(), nn.Linear(d, d))
        self.lm = LlamaForCausalLM(config)
        self.lm.config._attn_implementation = ATTN_IMPLEMENTATION

    @property
    def n_layers(self) -> int:
        return self.lm.config.num_hidden_layers

    @property
    def n_heads(self) -> int:
        return self.lm.config.num_attention_heads

    @property
    def layers(self):
        return self.lm.model.layers

    def image_tokens(self, patches: torch.Tensor) -> torch.Tensor:
        """Projected image tokens ``(batch, 16, d)`` of patches ``(batch, 16, 75)``."""
        return self.projector(self.encoder(patches))

    def embed(self, text_ids: torch.Tensor, patches: torch.Tensor | None = None,
              sketch_ids: torch.Tensor | None = None) -> torch.Tensor:
        """``inputs_embeds`` for ``<bos>`` + image (or sketch) tokens + text; exactly one of patches/sketch."""
        if (patches is None) == (sketch_ids is None):
            raise ValueError("pass exactly one of patches (image) or sketch_ids (text sketch)")
        emb = self.lm.get_input_embeddings()
        b = text_ids.shape[0]
        bos = emb(torch.full((b, 1), TOKEN_ID["<bos>"], dtype=torch.long, device=text_ids.device))
        middle = self.image_tokens(patches) if patches is not None else emb(sketch_ids)
        return torch.cat([bos, middle, emb(text_ids)], dim=1)

    def forward(self, text_ids: torch.Tensor, patches: torch.Tensor | None = None,
                sketch_ids: torch.Tensor | None = None, output_hidden_states: bool = False):
        """The decoder's output (``.logits`` over the whole sequence) for the layout above."""
        return self.lm(inputs_embeds=self.embed(text_ids, patches, sketch_ids),
                       output_hidden_states=output_hidden_states, use_cache=False)


def as_patches(images) -> torch.Tensor:
    """Images ``(n, 20, 20, 3)`` (array or tensor) to a float tensor of patches ``(n, 16, 75)``."""
    if isinstance(images, torch.Tensor):
        images = images.detach().cpu().numpy()
    return torch.from_numpy(patchify(images))


def caption_batch(captions: list) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded token ids and labels (``-100`` on padding and on ``describe``) of token-id captions.

    ``labels[i, t]`` is the token predicted *at* text position ``t`` (already shifted), so the
    loss of a full sequence is ``cross_entropy(logits[:, TEXT_START:][:, :T], labels)``.
    """
    ids, labels, _ = _padded_captions(captions)
    return torch.from_numpy(ids), torch.from_numpy(labels)


def _padded_captions(captions: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`caption_batch`'s ids and labels as int64 arrays, plus the length of every caption."""
    if not captions:
        raise ValueError("captions must not be empty")
    lengths = np.fromiter((len(c) for c in captions), dtype=np.int64, count=len(captions))
    short = np.flatnonzero(lengths < 2)
    if short.size:
        raise ValueError(f"caption {int(short[0])} is empty: it needs at least 'describe' and one more token")
    n, T = len(captions), int(lengths.max())
    flat = np.fromiter((t for c in captions for t in c), dtype=np.int64, count=int(lengths.sum()))
    inside = np.arange(T)[None, :] < lengths[:, None]          # (n, T): True on each caption's tokens
    ids = np.full((n, T), TOKEN_ID["<pad>"], dtype=np.int64)
    ids[inside] = flat
    labels = np.full((n, T), -100, dtype=np.int64)
    shifted = np.arange(T)[None, :] < (lengths - 1)[:, None]   # the positions that predict a next token
    labels[shifted] = ids[:, 1:][shifted[:, :-1]]              # T >= 2: every caption has two tokens
    return ids, labels, lengths


@torch.no_grad()
def greedy_captions(model: TinyVLM, images=None, sketches=None, max_new_tokens: int = 10,
                    batch_size: int = 1024, use_cache: bool = True) -> list:
    """Greedy captions (lists of object words) of images ``(n, 20, 20, 3)`` or text sketches ``(n, 16)``.

    With ``use_cache`` (the default) the prompt is run once and each step feeds only the new token,
    reusing the keys and values of earlier positions (Hugging Face's cache); the attention edits and
    residual edits of :mod:`~companion_lib.tinyvlm.hooks` see absolute positions either way, so every
    intervention applies exactly as without a cache (``use_cache=False`` re-runs the full sequence at
    each step; a test checks that both give the same captions).

    Decoding runs where the model is (:func:`~companion_lib.common.module_device`: move the model once, e.g.
    ``model.to(device())``, and the patches or sketches follow it); the captions are plain lists.
    """
    if (images is None) == (sketches is None):
        raise ValueError("pass exactly one of images or sketches")
    model.eval()
    dev = module_device(model)
    if images is not None:
        source = as_patches(images)
    else:
        source = torch.as_tensor(np.asarray(sketches), dtype=torch.long)
        if source.ndim != 2 or source.shape[1] != N_PATCHES:
            raise ValueError(f"sketches must have shape (n, {N_PATCHES}), got {tuple(source.shape)}")
    out = []
    stop = torch.tensor(sorted({TOKEN_ID["."], TOKEN_ID["<eos>"]}), device=dev)
    emb = model.lm.get_input_embeddings()
    for start in range(0, source.shape[0], batch_size):
        src = source[start:start + batch_size].to(dev)
        kw = {"patches": src} if images is not None else {"sketch_ids": src}
        ids = torch.full((src.shape[0], 1), TOKEN_ID["describe"], dtype=torch.long, device=dev)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=dev)
        past = None
        for _ in range(max_new_tokens):
            if not use_cache:
                logits = model(ids, **kw).logits[:, -1]
            elif past is None:
                res = model.lm(inputs_embeds=model.embed(ids, **kw), use_cache=True, logits_to_keep=1)
                logits, past = res.logits[:, -1], res.cache
            else:
                res = model.lm(inputs_embeds=emb(ids[:, -1:]), cache=past, use_cache=True, logits_to_keep=1)
                logits, past = res.logits[:, -1], res.cache
            nxt = logits.argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, TOKEN_ID["<pad>"]), nxt)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            done |= torch.isin(nxt, stop)
            if bool(done.all()):
                break
        out.extend(decode_caption(row[1:]) for row in ids.cpu().tolist())
    return out
