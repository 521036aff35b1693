r"""A synthetic table-top world and a tiny LLaVA-style vision-language model, shared by the chapters on
hallucination heads (16) and on the logit lens of image tokens (17).

* :mod:`.world` -- scenes with a trigger->partner co-occurrence prior and occluded-but-mentioned partners,
  images, captions, text sketches, natural and trigger-only splits, exact CHAIR.
* :mod:`.model` -- :class:`TinyVLM` (patch encoder, projector, a tiny ``LlamaForCausalLM`` fed with
  ``inputs_embeds``) and :func:`greedy_captions`.
* :mod:`.hooks` -- head masks, module ablation, attention re-weighting and AD-HH, residual edits and
  recording of attention maps and of the residual stream, as context managers that always clean up.
* :mod:`.train` -- LLaVA's three stages (text pre-training, alignment with the LM frozen, tuning),
  deterministic and cached: :func:`trained_world`, :func:`build_model`.
* :mod:`.llava` -- the same hooks on a real ``LlavaForConditionalGeneration``: the book's attention in its
  language model, image-token positions, the logit lens; :func:`tiny_llava_config` for tests without downloads.
* :mod:`.coco` -- COCO's object annotations in their real format and CHAIR on free-text captions
  (:func:`load_coco_objects`, :func:`load_coco_folder`, :func:`coco_chair`; the table-top world's exact CHAIR stays :func:`chair`).
* :mod:`.checkpoint` -- the worlds of the default seeds, shipped as checkpoints that ``make worlds`` writes
  and the test suite re-trains and compares (bit for bit where the processor rounds as the one that made them;
  elsewhere the recipe stage by stage, :func:`stage_prefixes`, and the behaviour the chapters read);
  :func:`trained_world` loads them.
"""

from .coco import (COCO_CATEGORIES, SYNONYMS, CocoObjects, caption_objects, load_coco_folder, load_coco_objects,
                   object_mentions)
from .coco import chair as coco_chair
from .hooks import (adaptive_deactivation, attention_edit, check_heads, head_mask, module_ablation,
                    record_attention, record_residual, residual_edit, reweight_image, reweight_text)
from .llava import (SUPPORTED_VLMS, LoadedVLM, image_slice, image_token_positions, language_model_parts,
                    load_llava, logit_lens, tiny_llava_config, use_book_attention)
from .model import (ATTN_IMPLEMENTATION, IMAGE_SLICE, TEXT_START, TinyVLM, as_patches, caption_batch,
                    greedy_captions, tiny_llama_config)
from .train import STAGES, TrainConfig, World, build_model, caption_loss, stage_prefixes, train_world, trained_world
from .world import (CANONICAL_ORDER, N_PATCHES, OBJECTS, PAIRS, PARTNERS, TOKEN_ID, TRIGGERS, VOCAB, Scene,
                    Split, WorldConfig, chair, decode_caption, encode_caption, make_split, patchify, render,
                    sketch_tokens)

__all__ = [
    "ATTN_IMPLEMENTATION", "CANONICAL_ORDER", "IMAGE_SLICE", "N_PATCHES", "OBJECTS", "PAIRS", "PARTNERS",
    "Scene", "Split", "TEXT_START", "TOKEN_ID", "TRIGGERS", "TinyVLM", "TrainConfig", "VOCAB", "World",
    "WorldConfig", "adaptive_deactivation", "as_patches", "attention_edit", "build_model", "caption_batch",
    "caption_loss", "chair", "check_heads", "decode_caption", "encode_caption", "greedy_captions",
    "head_mask", "make_split", "module_ablation", "patchify", "record_attention", "record_residual", "render",
    "residual_edit", "reweight_image", "reweight_text", "sketch_tokens", "STAGES", "stage_prefixes", "train_world",
    "trained_world", "image_slice", "image_token_positions", "language_model_parts", "logit_lens",
    "tiny_llava_config", "use_book_attention", "SUPPORTED_VLMS", "LoadedVLM", "load_llava",
    "COCO_CATEGORIES", "SYNONYMS", "CocoObjects", "caption_objects", "coco_chair", "load_coco_objects",
    "object_mentions", "load_coco_folder",
]
