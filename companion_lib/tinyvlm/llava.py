r"""The hooks of :mod:`companion_lib.tinyvlm` on a real LLaVA (``LlavaForConditionalGeneration``).

LLaVA-1.5 (the model of chapters 16 and 17) is a CLIP vision tower, an MLP projector and a Llama/Vicuna
language model; the processor expands one ``<image>`` placeholder of the prompt into one image token per
patch feature (576 for LLaVA-1.5 at 336 px), at positions that depend on the prompt. The tiny VLM has the
same three parts at a fixed layout (:data:`~companion_lib.tinyvlm.model.IMAGE_SLICE`). What a real LLaVA
needs in addition, and this module gives:

* :func:`use_book_attention` -- run the language model's attention through the book's registered
  function (:data:`~companion_lib.tinyvlm.model.ATTN_IMPLEMENTATION`), which the attention edits and
  recordings of :mod:`companion_lib.tinyvlm.hooks` act on (``sdpa`` or flash attention would bypass them);
* :func:`image_token_positions` and :func:`image_slice` -- where the image tokens are, from the config's
  ``image_token_id``, so the image-attention edits know which keys are the image;
* :func:`language_model_parts` and :func:`logit_lens` -- the decoder's blocks, final norm and LM head, and
  the logit lens :math:`W_U\,\mathrm{norm}(h)` of a residual state (chapter 17);
* :func:`load_llava` -- a LLaVA checkpoint (hub id or folder) with its processor, on the book's attention,
  after checking its class and that its parameters fit the device's memory, before any weights are read;
* :func:`tiny_llava_config` -- a tiny randomly initialisable LLaVA configuration, for tests without downloads.

The book's attention function builds a plain causal mask: batches of a real LLaVA must not be padded on
the left (score one prompt at a time, or pad on the right and read real positions only).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..common.device import device as _device
from .model import ATTN_IMPLEMENTATION

__all__ = ["SUPPORTED_VLMS", "LoadedVLM", "load_llava", "tiny_llava_config", "use_book_attention", "language_model_parts", "image_token_positions",
           "image_slice", "logit_lens"]


def _is_llava(model: object) -> bool:
    return type(model).__name__ == "LlavaForConditionalGeneration"


def _check_llava(model: object) -> None:
    if not _is_llava(model):
        raise TypeError(f"model must be a transformers LlavaForConditionalGeneration, got {type(model).__name__}")


def tiny_llava_config(vocab_size: int = 40, hidden_size: int = 16, n_layer: int = 2, n_head: int = 2,
                      image_size: int = 8, patch_size: int = 4, vision_hidden: int = 16):
    """A tiny ``LlavaConfig`` (CLIP vision tower, Llama text model) with LLaVA-1.5's feature selection
    (second-to-last vision layer, CLS dropped), image token id ``vocab_size - 1`` and the book's attention
    in the text model: ``(image_size // patch_size) ** 2`` image tokens per image."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    for name, value in (("vocab_size", vocab_size), ("hidden_size", hidden_size), ("n_layer", n_layer),
                        ("n_head", n_head), ("image_size", image_size), ("patch_size", patch_size),
                        ("vision_hidden", vision_hidden)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if vocab_size < 3:
        raise ValueError(f"vocab_size must be at least 3 (padding, text and the image token), got {vocab_size}")
    if hidden_size % n_head or vision_hidden % n_head:
        raise ValueError(f"hidden_size ({hidden_size}) and vision_hidden ({vision_hidden}) must be divisible by "
                         f"n_head ({n_head})")
    if image_size % patch_size:
        raise ValueError(f"image_size ({image_size}) must be a multiple of patch_size ({patch_size})")
    vision = CLIPVisionConfig(hidden_size=vision_hidden, intermediate_size=2 * vision_hidden,
                              num_hidden_layers=2, num_attention_heads=n_head, image_size=image_size,
                              patch_size=patch_size, projection_dim=vision_hidden)
    text = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=n_layer,
                       num_attention_heads=n_head, num_key_value_heads=n_head, intermediate_size=2 * hidden_size,
                       max_position_embeddings=4 * (image_size // patch_size) ** 2 + 64, pad_token_id=0)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_id=vocab_size - 1,
                         vision_feature_layer=-2, vision_feature_select_strategy="default")
    config.text_config._attn_implementation = ATTN_IMPLEMENTATION
    return config


#: Architectures (the ``architectures`` entry of a checkpoint's config) that :func:`load_llava` accepts.
SUPPORTED_VLMS = ("LlavaForConditionalGeneration",)

@dataclass(frozen=True)
class LoadedVLM:
    """A loaded LLaVA (eval mode, on ``device``, on the book's attention), its processor, and its source."""

    model: nn.Module
    processor: object
    source: str
    device: torch.device
    dtype: torch.dtype


def load_llava(model: str | Path, *, device: str | torch.device | None = None, dtype: str | None = None,
               headroom: float = 1.2, free_bytes: int | None = None) -> LoadedVLM:
    """Load a LLaVA checkpoint (``"llava-hf/llava-1.5-7b-hf"`` or a folder written by ``save_pretrained``) and its
    processor, after checking that the hooks support it and that it fits.

    Checked before any weights are read: the config loads and names an architecture of
    :data:`SUPPORTED_VLMS` (the error lists the choices); the parameters (counted on the ``meta`` device) times
    ``headroom`` fit the device's free memory (``free_bytes`` overrides the reading, for tests). ``dtype``
    defaults to ``float16`` on a GPU (LLaVA-1.5's released precision) and ``float32`` on the CPU. The language
    model is switched to the book's attention (:func:`use_book_attention`), which the hooks need.
    """
    from transformers import AutoConfig, AutoProcessor, LlavaForConditionalGeneration

    from ..tinylm.hub import check_fits, resolve_dtype

    if isinstance(model, Path):
        model = str(model)
    if not isinstance(model, str) or not model.strip():
        raise TypeError(f"model must be a hub id (e.g. 'llava-hf/llava-1.5-7b-hf') or a local folder, "
                        f"got {type(model).__name__}")
    dev = _device(None if device is None else str(device))
    dtype, torch_dtype = resolve_dtype(dtype, dev)
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or headroom < 1:
        raise ValueError(f"headroom must be a number >= 1, got {headroom!r}")
    try:
        config = AutoConfig.from_pretrained(model)
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"cannot load the config of {model!r} (a hub id needs network access; a folder needs "
                         f"the config.json that save_pretrained writes): {exc}") from None
    archs = list(getattr(config, "architectures", None) or [])
    if not any(a in SUPPORTED_VLMS for a in archs):
        raise ValueError(f"{model!r} is a {', '.join(archs) or type(config).__name__} checkpoint; the book's "
                         f"vision-language hooks support {', '.join(SUPPORTED_VLMS)}")
    with torch.device("meta"):
        skeleton = LlavaForConditionalGeneration(config)
    need = sum(p.numel() for p in skeleton.parameters()) * torch.empty((), dtype=torch_dtype).element_size()
    check_fits(need * headroom, dev, f"{model!r} (its parameters in {dtype}, x{headroom} with activations)",
               "use dtype='float16' or a GPU with more memory", free_bytes)
    try:
        processor = AutoProcessor.from_pretrained(model)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"cannot load the processor of {model!r}: {exc}") from None
    from safetensors import SafetensorError

    try:
        vlm = LlavaForConditionalGeneration.from_pretrained(model, dtype=torch_dtype)
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:   # a corrupt weights file
        raise ValueError(f"cannot load the weights of {model!r}: {exc}") from None
    vlm = use_book_attention(vlm.to(dev).eval())
    return LoadedVLM(model=vlm, processor=processor, source=model, device=dev, dtype=torch_dtype)


def use_book_attention(model: nn.Module) -> nn.Module:
    """Make the language model of a LLaVA attend through the book's attention function (in place;
    returns ``model``), so that :func:`~companion_lib.tinyvlm.hooks.record_attention` and the attention edits
    see its weights. The outputs do not change (the same softmax attention, computed eagerly)."""
    _check_llava(model)
    model.set_attn_implementation({"text_config": ATTN_IMPLEMENTATION})
    return model


def language_model_parts(model: nn.Module) -> tuple[nn.ModuleList, nn.Module, nn.Module]:
    """The language model's decoder blocks, final norm and LM head of a LLaVA."""
    _check_llava(model)
    lm = model.model.language_model
    return lm.layers, lm.norm, model.lm_head


def image_token_positions(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Positions ``(batch, n_image_tokens)`` of the image tokens in ``input_ids`` (the processor's output).

    Raises ``ValueError`` when a row holds no image token or the rows hold different numbers of them."""
    _check_llava(model)
    if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2:
        raise ValueError("input_ids must be a (batch, length) tensor of token ids")
    token = model.config.image_token_id
    hits = input_ids == token
    counts = hits.sum(1)
    if bool((counts == 0).any()):
        raise ValueError(f"a row of input_ids holds no image token (id {token}): was the prompt built by the "
                         f"LLaVA processor with an image?")
    if bool((counts != counts[0]).any()):
        raise ValueError(f"the rows hold different numbers of image tokens ({counts.tolist()})")
    return hits.nonzero()[:, 1].reshape(input_ids.shape[0], int(counts[0]))


def image_slice(model: nn.Module, input_ids: torch.Tensor) -> slice:
    """The image block as a ``slice`` (what :func:`~companion_lib.tinyvlm.hooks.reweight_image` takes), when
    every row has one contiguous block of image tokens at the same positions; else ``ValueError``."""
    pos = image_token_positions(model, input_ids)
    first, last = int(pos[0, 0]), int(pos[0, -1])
    if bool((pos != pos[0]).any()) or last - first + 1 != pos.shape[1]:
        raise ValueError("the image tokens are not one block at the same positions in every row")
    return slice(first, last + 1)


def logit_lens(model: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    r"""Logits :math:`W_U\,\mathrm{norm}(h)` of residual states ``hidden`` (..., d) of a LLaVA's language
    model: at the last layer, the model's own logits; at earlier layers, the logit lens of chapter 17."""
    _, norm, head = language_model_parts(model)
    return head(norm(hidden))
