r"""The chapter's measurements on a real LLaVA (``LlavaForConditionalGeneration``, e.g. the paper's
``llava-hf/llava-1.5-7b-hf``) and COCO val2014 in its released format: what the reproduce page's
"At full scale" section runs when its ``model`` parameter names a checkpoint.

* :func:`load_coco_split` -- COCO images and their ground-truth categories (the CHAIR ground truth of
  :func:`companion_lib.tinyvlm.coco.load_coco_objects`), drawn at random as the paper's 500 val2014 images;
* :func:`class_token_ids` -- the sub-tokens of each category name (the paper's :math:`\mathcal V_o`);
* :func:`llava_lens` -- the logit lens of the image tokens,
  :math:`P_l(\cdot\mid t_m)=\operatorname{softmax}(W_U\,h_l(t_m))` at every layer :math:`l` and image
  position :math:`m`, reduced to each category's probability (max over its sub-tokens): the per-layer maximum
  over image tokens and the per-patch maximum over layers (the localisation map :math:`M_o`); the internal
  confidence :math:`c_o=\max_l\max_m\max_{v\in\mathcal V_o}P_l(v\mid t_m)` is their maximum;
* :func:`llava_text_embedding` and :func:`llava_captions` -- ProjectAway on a real LLaVA: the object's text
  embedding :math:`\mathbf t=h_{l_T}(\text{last token of }o)` of the word fed alone, removed from every image
  token at the output of block :math:`l_I` (:func:`~companion_lib.vlm_editing.project_away`), in the prefill
  pass only (later steps read the edited keys and values from the cache), then captions by greedy or beam
  search with the paper's prompt;
* :func:`fold_statistics` -- the page's claim statistics on one fold of test images;
* :func:`full_scale` -- the whole run in one call: every check first (parameters, the checkpoint's class and
  size, the data's format), then the weights, the lens, the captions, CHAIR, the calibrated threshold, and
  self-selected and oracle-selected ProjectAway.

The lens defaults are those of the paper's code for LLaVA: ``lm_head`` on the raw hidden state (no final
norm) and a softmax over the top 50 logits (``use_final_norm=True, top_k=None`` gives the tiny page's lens).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..common.validation import check_int, check_positive_int
from ..tinyvlm.hooks import record_residual, residual_edit
from .lens import auroc, calibrate_threshold, detection_rates
from .project_away import _check_alpha, project_away

__all__ = ["PAPER_MODEL", "PAPER_PROMPT", "COCO_LAYOUT", "CocoSplit", "load_coco_split", "llava_prompt",
           "patch_centres", "pointing", "model_image_tokens",
           "class_token_ids", "LensResult", "llava_lens", "llava_text_embedding", "llava_captions",
           "fold_statistics", "FullScaleRun", "full_scale"]

#: The paper's model (LLaVA-1.5-7B in the Hugging Face format).
PAPER_MODEL = "llava-hf/llava-1.5-7b-hf"
#: The paper's captioning instruction (official code, ``methods/llava_utils.py``).
PAPER_PROMPT = "Write a detailed description."
#: Where :func:`load_coco_split` looks inside ``data``: the layout of COCO's ``annotations_trainval2014.zip``
#: and ``val2014.zip`` unpacked into one folder (the captions file is optional; CHAIR adds the categories its
#: reference captions name to the ground truth).
COCO_LAYOUT = {"instances": "annotations/instances_val2014.json", "captions": "annotations/captions_val2014.json",
               "images": "val2014"}


def llava_prompt(instruction: str = PAPER_PROMPT) -> str:
    """LLaVA-1.5's conversation format around one image: ``USER: <image>\\n{instruction} ASSISTANT:``."""
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError(f"instruction must be a non-empty string, got {instruction!r}")
    return f"USER: <image>\n{instruction} ASSISTANT:"


# ---- data ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CocoSplit:
    """COCO images (ids, files, sizes) with their ground-truth categories and instance boxes, and the categories
    of the file."""

    image_ids: tuple
    files: tuple
    truth: tuple
    categories: tuple
    boxes: tuple = ()       # per image: category -> tuple of COCO boxes (x, y, width, height) in pixels
    sizes: tuple = ()       # per image: (width, height) in pixels

    def __len__(self) -> int:
        return len(self.image_ids)


def _layout_text() -> str:
    return (f"expected a folder holding {COCO_LAYOUT['instances']}, optionally {COCO_LAYOUT['captions']}, and the "
            f"images in {COCO_LAYOUT['images']}/ (COCO's annotations_trainval2014.zip and val2014.zip from "
            f"cocodataset.org, unpacked into one folder)")


def load_coco_split(data: str | Path, n_images: int, seed: int = 0) -> CocoSplit:
    """``n_images`` COCO val2014 images with at least one ground-truth category, drawn without replacement
    by ``numpy.random.default_rng(seed)`` from the instances file's images (the paper draws 500 at random).

    ``data`` is a folder in the layout of :data:`COCO_LAYOUT`. Raises ``ValueError`` naming the problem and the
    expected layout for a missing folder or file, a file in another format
    (:func:`~companion_lib.tinyvlm.coco.load_coco_objects`'s checks), too few annotated images, or a drawn image
    whose file is missing or not an image (only the headers are read here; the pixels when it is captioned)."""
    from ..tinyvlm.coco import load_coco_objects

    n_images = check_positive_int(n_images, "n_images")
    if isinstance(data, str):
        data = Path(data)
    if not isinstance(data, Path):
        raise TypeError(f"data must be a path to a COCO folder, got {type(data).__name__}; {_layout_text()}")
    if not data.is_dir():
        raise ValueError(f"data {str(data)!r} is not a folder; {_layout_text()}")
    inst, caps, img_dir = (data / COCO_LAYOUT[k] for k in ("instances", "captions", "images"))
    if not inst.is_file():
        raise ValueError(f"data {str(data)!r} has no {COCO_LAYOUT['instances']}; {_layout_text()}")
    if not img_dir.is_dir():
        raise ValueError(f"data {str(data)!r} has no image folder {COCO_LAYOUT['images']}/; {_layout_text()}")
    try:
        objects = load_coco_objects(inst, caps if caps.is_file() else None)
    except (ValueError, TypeError, KeyError, FileNotFoundError) as exc:
        raise ValueError(f"the COCO annotations in {str(data)!r} are not in COCO's format: {exc}") from None
    ids = sorted(i for i in objects if objects[i])
    if len(ids) < n_images:
        raise ValueError(f"n_images={n_images} but the instances file has only {len(ids)} images with annotations")
    drawn = [int(i) for i in np.random.default_rng(seed).choice(ids, size=n_images, replace=False)]
    files = [objects.image_path(img_dir, i) for i in drawn]
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise ValueError(f"{len(missing)} of the {n_images} drawn images are missing, e.g. {missing[0]}; "
                         f"{_layout_text()}")
    from PIL import Image, UnidentifiedImageError

    sizes = []
    for f in files:                 # the header only: a file that is not an image stops here, not mid-run
        try:
            with Image.open(f) as im:
                sizes.append(tuple(im.size))
        except (UnidentifiedImageError, OSError) as exc:
            raise ValueError(f"{f} is not an image PIL can read ({exc}); {_layout_text()}") from None
    return CocoSplit(image_ids=tuple(drawn), files=tuple(files), truth=tuple(objects[i] for i in drawn),
                     categories=tuple(objects.categories), boxes=_boxes(inst, drawn), sizes=tuple(sizes))


def _boxes(instances_json: Path, image_ids: list) -> tuple:
    """The instance boxes (COCO's ``bbox``: x, y, width, height) of each image, by category name."""
    import json

    data = json.loads(instances_json.read_text())
    names = {int(c["id"]): str(c["name"]) for c in data["categories"]}
    wanted = {i: {} for i in image_ids}
    for a in data["annotations"]:
        iid = int(a["image_id"])
        if iid in wanted:
            box = a.get("bbox")
            if not isinstance(box, (list, tuple)) or len(box) != 4:
                raise ValueError(f"an annotation of image {iid} has no 'bbox' [x, y, width, height] (COCO's "
                                 f"instances format): {str(a)[:200]}")
            wanted[iid].setdefault(names[int(a["category_id"])], []).append(tuple(float(v) for v in box))
    return tuple({c: tuple(b) for c, b in wanted[i].items()} for i in image_ids)


def _size_field(size, key: str):
    return size.get(key) if isinstance(size, dict) else getattr(size, key, None)


def patch_centres(image_processor, width: int, height: int, side: int) -> np.ndarray:
    r"""Where the centre of each image token's patch lies in the original image: ``(side * side, 2)`` pixel
    coordinates :math:`(x, y)`, row by row, for a CLIP image processor that resizes the shortest edge and crops
    the centre (LLaVA-1.5's: shortest edge 336, crop 336 x 336, a 24 x 24 grid), or that resizes to a fixed
    height and width. ``ValueError`` for other settings."""
    side = check_positive_int(side, "side")
    W, H = float(width), float(height)
    r, c = np.divmod(np.arange(side * side), side)
    short = _size_field(image_processor.size, "shortest_edge") if getattr(image_processor, "do_resize", True) else None
    crop = image_processor.crop_size if getattr(image_processor, "do_center_crop", False) else None
    if short and crop is not None:
        ch, cw = float(_size_field(crop, "height")), float(_size_field(crop, "width"))
        scale = float(short) / min(W, H)
        ox, oy = (W * scale - cw) / 2, (H * scale - ch) / 2
        x = ((c + 0.5) * cw / side + ox) / scale
        y = ((r + 0.5) * ch / side + oy) / scale
    elif (not short and crop is None and _size_field(image_processor.size, "height")
          and _size_field(image_processor.size, "width")):
        x, y = (c + 0.5) / side * W, (r + 0.5) / side * H
    else:
        raise ValueError("the image processor neither resizes the shortest edge and crops the centre nor resizes "
                         "to a fixed size: the patches cannot be placed on the image")
    return np.stack([x, y], axis=1)


def pointing(patch_map: np.ndarray, boxes, centres: np.ndarray) -> tuple[float, float]:
    r"""The pointing game of a localisation map :math:`M_o` (one value per patch): ``(hit, chance)``, where
    ``hit`` is 1 when the centre of the arg-max patch lies in one of the object's ``boxes`` (COCO's
    x, y, width, height) and ``chance`` the share of patches whose centres do (a random patch's hit rate)."""
    patch_map = np.asarray(patch_map, dtype=float).ravel()
    if patch_map.size != len(centres):
        raise ValueError(f"the map has {patch_map.size} patches, the centres {len(centres)}")
    inside = np.zeros(len(centres), dtype=bool)
    for x, y, w, h in boxes:
        inside |= ((centres[:, 0] >= x) & (centres[:, 0] <= x + w) & (centres[:, 1] >= y)
                   & (centres[:, 1] <= y + h))
    return float(inside[int(np.argmax(patch_map))]), float(inside.mean())


def class_token_ids(tokenizer, classes) -> list:
    r"""The sub-token ids :math:`\mathcal V_o` of each category name (no special tokens; the paper's
    ``tokenizer.encode(o)[1:]``). ``ValueError`` naming the category when it has none or one is unknown."""
    classes = list(classes)
    if not classes:
        raise ValueError("classes must not be empty")
    out = []
    unk = getattr(tokenizer, "unk_token_id", None)
    for name in classes:
        ids = list(tokenizer(name, add_special_tokens=False)["input_ids"])
        if not ids or (unk is not None and unk in ids):
            raise ValueError(f"the tokenizer cannot spell the category {name!r} (got ids {ids})")
        out.append(ids)
    return out


# ---- the lens -----------------------------------------------------------------------------------------

@dataclass
class LensResult:
    """The lens of :func:`llava_lens` over ``n`` images, ``L + 1`` lens layers, ``M`` image tokens and ``C``
    categories: ``layer_max`` ``(n, L + 1, C)`` (max over image tokens), ``patch_max`` ``(n, M, C)`` (max over
    layers: the localisation map), and ``confidence`` ``(n, C)``, the internal confidence (max of both)."""

    layer_max: np.ndarray
    patch_max: np.ndarray

    @property
    def confidence(self) -> np.ndarray:
        return self.layer_max.max(axis=1)


def _encode(loaded, image, prompt: str):
    enc = loaded.processor(images=image, text=prompt, return_tensors="pt")
    enc = {k: v.to(loaded.device) for k, v in enc.items()}
    enc["pixel_values"] = enc["pixel_values"].to(loaded.dtype)
    return enc


def _open(image):
    from PIL import Image

    if isinstance(image, (str, Path)):
        with Image.open(image) as im:
            return im.convert("RGB")
    return image


def _class_index(token_ids: list, dev) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(t) for t in token_ids)
    idx = torch.zeros(len(token_ids), width, dtype=torch.long)
    valid = torch.zeros(len(token_ids), width, dtype=torch.bool)
    for c, ids in enumerate(token_ids):
        idx[c, :len(ids)] = torch.tensor(ids)
        valid[c, :len(ids)] = True
    return idx.to(dev), valid.to(dev)


@torch.no_grad()
def llava_lens(loaded, images, token_ids: list, *, prompt: str | None = None, use_final_norm: bool = False,
               top_k: int | None = 50) -> LensResult:
    r"""The logit lens of the image tokens of each image (a path or a PIL image) for categories with
    sub-tokens ``token_ids`` (:func:`class_token_ids`): one prefill pass of the prompt per image, the residual
    stream at every lens layer (input of block 0, then every block's output), ``lm_head`` applied to each
    image token in float32 (after the final norm when ``use_final_norm``), a softmax over the ``top_k`` largest logits
    (``None``: the whole vocabulary), and each category's probability as the max over its sub-tokens.

    ``loaded`` is :func:`companion_lib.tinyvlm.load_llava`'s result. The image tokens' hidden states do not
    depend on the answer (causal attention), so no caption is needed."""
    from ..tinyvlm.llava import image_token_positions, language_model_parts

    model = loaded.model
    prompt = llava_prompt() if prompt is None else prompt
    if top_k is not None:
        top_k = check_positive_int(top_k, "top_k")
    _, norm, head = language_model_parts(model)
    # W_U in float32 (one copy per call): raw mid-layer states can be large, and half-precision logits overflow
    w_u = head.weight.float()
    b_u = None if getattr(head, "bias", None) is None else head.bias.float()
    idx, valid = _class_index(token_ids, loaded.device)
    layer_max, patch_max = [], []
    for image in images:
        enc = _encode(loaded, _open(image), prompt)
        pos = image_token_positions(model, enc["input_ids"])[0]
        with record_residual(model) as rec:
            model(**enc, use_cache=False)
        per_layer = []
        for h in rec:
            h = h[0, pos]
            if use_final_norm:
                h = norm(h)
            logits = torch.nn.functional.linear(h.float(), w_u, b_u)   # (M, V)
            if top_k is not None and top_k < logits.shape[-1]:
                kth = logits.topk(top_k, dim=-1).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            p = torch.softmax(logits, dim=-1)
            sub = p[:, idx].masked_fill(~valid, 0.0)                   # (M, C, S)
            per_layer.append(sub.max(dim=-1).values)                   # (M, C)
        P = torch.stack(per_layer)                                     # (L + 1, M, C)
        layer_max.append(P.max(dim=1).values.cpu().numpy())
        patch_max.append(P.max(dim=0).values.cpu().numpy())
    if not layer_max:
        raise ValueError("images must not be empty")
    return LensResult(layer_max=np.stack(layer_max), patch_max=np.stack(patch_max))


# ---- ProjectAway on LLaVA -----------------------------------------------------------------------------

@torch.no_grad()
def llava_text_embedding(loaded, word: str, text_layer: int = 1) -> torch.Tensor:
    r"""The text embedding :math:`\mathbf t` of ``word`` (the paper's ``get_hidden_text_embedding``): the word
    fed alone (with the tokenizer's own special tokens, ``<s> word`` for LLaVA-1.5), no image; the residual
    stream at lens layer ``text_layer`` (0: the input embeddings) at the last token."""
    model, tok = loaded.model, loaded.processor.tokenizer
    n_layer = model.config.text_config.num_hidden_layers
    text_layer = check_int(text_layer, "text_layer")
    if not 0 <= text_layer <= n_layer:
        raise ValueError(f"text_layer {text_layer} out of range [0, {n_layer}]")
    ids = tok(word, return_tensors="pt")["input_ids"].to(loaded.device)
    with record_residual(model) as rec:
        model(input_ids=ids, use_cache=False)
    return rec[text_layer][0, -1].clone()


@torch.no_grad()
def llava_captions(loaded, images, *, prompt: str | None = None, max_new_tokens: int = 512, num_beams: int = 5,
                   erase: list | None = None, image_layer: int = 2, alpha: float = 1.0,
                   use_cache: bool = True) -> list:
    """Captions of ``images`` (paths or PIL images), one image at a time, by greedy (``num_beams=1``) or beam
    search. ``erase[i]`` (a list of text embeddings, possibly empty) is projected away from image ``i``'s image
    tokens, one after the other, at the output of block ``image_layer`` with strength ``alpha``, in the pass
    that reads the prompt (the hook leaves the one-token decoding steps alone, which read the edited keys and
    values from the cache; ``use_cache=False`` recomputes every step with the edit, and gives the same captions)."""
    from ..tinyvlm.llava import image_slice

    model, tok = loaded.model, loaded.processor.tokenizer
    prompt = llava_prompt() if prompt is None else prompt
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
    num_beams = check_positive_int(num_beams, "num_beams")
    alpha = _check_alpha(alpha)
    images = list(images)
    if erase is not None and len(erase) != len(images):
        raise ValueError(f"erase ({len(erase)}) and images ({len(images)}) must match")
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    out = []
    for i, image in enumerate(images):
        enc = _encode(loaded, _open(image), prompt)
        vectors = [] if erase is None else list(erase[i])
        kwargs = dict(max_new_tokens=max_new_tokens, num_beams=num_beams, do_sample=False, pad_token_id=pad,
                      use_cache=bool(use_cache))
        if vectors:
            sl = image_slice(model, enc["input_ids"])

            def edit(h, sl=sl, vectors=vectors):
                if h.shape[1] < sl.stop:          # a decoding step: the image tokens are in the cache
                    return h
                h = h.clone()
                img = h[:, sl]
                for t in vectors:
                    img = project_away(img, t, alpha)
                h[:, sl] = img
                return h

            with residual_edit(model, image_layer, edit):
                ids = model.generate(**enc, **kwargs)
        else:
            ids = model.generate(**enc, **kwargs)
        out.append(tok.decode(ids[0, enc["input_ids"].shape[1]:], skip_special_tokens=True).strip())
    return out


# ---- statistics ---------------------------------------------------------------------------------------

def _generated(conf_row: np.ndarray, mentions: list, truth, index: dict) -> tuple[list, list]:
    real = [conf_row[index[c]] for c in mentions if c in truth]
    hal = [conf_row[index[c]] for c in mentions if c not in truth]
    return real, hal


def fold_statistics(conf: np.ndarray, classes, truth, mentions: list, theta: float, before: dict,
                    after: dict, points: list | None = None) -> dict:
    """The page's claim statistics on one fold of test images.

    ``conf`` ``(n, C)`` internal confidences; ``truth`` the ground-truth category sets; ``mentions`` the
    categories each baseline caption names; ``theta`` the calibrated threshold; ``before``/``after`` map a
    selection kind to the CHAIR dicts (:func:`~companion_lib.tinyvlm.coco.chair`) of the captions without and
    with ProjectAway. Returns: ``auroc_generated`` (real against hallucinated generated objects),
    ``auroc_presence`` and ``map_presence`` (present against absent categories over all image-category pairs;
    mAP over the categories present at least once), ``flagged_minus_2x`` (share of hallucinated generated
    objects below ``theta`` minus twice the share of real ones), and per selection kind ``k``:
    ``rel_chair_i_k`` (relative CHAIR_i reduction; 0 when there was none to reduce) and ``recall_drop_k``
    (points). ``points`` (optional) lists :func:`pointing`'s ``(hit, chance)`` for the fold's present
    categories: ``pointing`` is the share of hits and ``pointing_minus_chance`` that share minus the mean
    chance. ``ValueError`` when the fold lacks real or hallucinated generated objects."""
    from sklearn.metrics import average_precision_score

    conf = np.asarray(conf, dtype=float)
    classes = list(classes)
    if conf.shape != (len(truth), len(classes)) or len(mentions) != len(truth):
        raise ValueError(f"conf {conf.shape}, truth ({len(truth)}), mentions ({len(mentions)}) and classes "
                         f"({len(classes)}) must describe the same images and categories")
    index = {c: k for k, c in enumerate(classes)}
    real, hal = [], []
    for row, m, t in zip(conf, mentions, truth):
        r, h = _generated(row, m, t, index)
        real += r
        hal += h
    if not real or not hal:
        raise ValueError(f"a fold of {len(truth)} images has {len(real)} real and {len(hal)} hallucinated generated "
                         "objects; both are needed: use more images per fold (n_images) or fewer folds (n_folds)")
    present = np.array([[c in t for c in classes] for t in truth])
    if present.all() or not present.any():
        raise ValueError("every category is present (or none is) in this fold: presence cannot be scored")
    cols = [k for k in range(len(classes)) if present[:, k].any()]
    out = {"auroc_generated": auroc(real, hal), "auroc_presence": auroc(conf[present], conf[~present]),
           "map_presence": float(np.mean([average_precision_score(present[:, k], conf[:, k]) for k in cols]))}
    rates = detection_rates(real, hal, theta)
    out["flagged_minus_2x"] = rates["hal_flagged"] - 2 * rates["real_flagged"]
    if points is not None:
        if not len(points):
            raise ValueError("points is empty: the fold has no present category with a box")
        hits, chance = np.asarray(points, dtype=float).T
        out["pointing"] = float(hits.mean())
        out["pointing_minus_chance"] = float(hits.mean() - chance.mean())
    for kind in before:
        b, a = before[kind], after[kind]
        out[f"rel_chair_i_{kind}"] = (b["chair_i"] - a["chair_i"]) / b["chair_i"] if b["chair_i"] > 0 else 0.0
        out[f"recall_drop_{kind}"] = b["recall"] - a["recall"]
    return out


# ---- the whole run ------------------------------------------------------------------------------------

@dataclass
class FullScaleRun:
    """Everything the "At full scale" section shows (see :func:`full_scale`)."""

    source: str
    settings: dict
    classes: tuple
    image_ids: tuple
    truth: tuple
    lens: LensResult = field(repr=False)
    captions: list = field(repr=False)
    chair: dict = field(repr=False)          # CHAIR of every baseline caption (calibration and test images)
    theta: float = 0.0
    n_cal: int = 0
    selected: dict = field(default_factory=dict, repr=False)   # kind -> categories erased per test image
    edited: dict = field(default_factory=dict, repr=False)     # kind -> captions of the test images after the edit
    folds: pd.DataFrame = field(default=None)                  # one row of fold_statistics per fold

    @property
    def confidence(self) -> np.ndarray:
        return self.lens.confidence


def model_image_tokens(loaded) -> int:
    """Image tokens per image: the processor's count (LLaVA-1.5: 576), read from one blank image."""
    from PIL import Image

    from ..tinyvlm.llava import image_token_positions

    size = loaded.processor.image_processor.crop_size
    side = int(_size_field(size, "height") or 16) if size is not None else 16
    enc = loaded.processor(images=Image.new("RGB", (side, side)), text=llava_prompt(), return_tensors="pt")
    return int(image_token_positions(loaded.model, enc["input_ids"]).shape[1])


def _check_llava_config(model) -> int:
    """The checkpoint's class and text-layer count from its config alone (no weights read)."""
    from transformers import AutoConfig

    from ..tinyvlm.llava import SUPPORTED_VLMS

    if isinstance(model, Path):
        model = str(model)
    if not isinstance(model, str) or not model.strip():
        raise TypeError(f"model must be a hub id (e.g. {PAPER_MODEL!r}) or a local folder, got {type(model).__name__}")
    try:
        config = AutoConfig.from_pretrained(model)
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"cannot load the config of {model!r} (a hub id needs network access; a folder needs the "
                         f"config.json that save_pretrained writes); supported: {', '.join(SUPPORTED_VLMS)}, e.g. "
                         f"{PAPER_MODEL!r}: {exc}") from None
    archs = list(getattr(config, "architectures", None) or [])
    if not any(a in SUPPORTED_VLMS for a in archs):
        raise ValueError(f"{model!r} is a {', '.join(archs) or type(config).__name__} checkpoint; this chapter's "
                         f"full-scale path supports {', '.join(SUPPORTED_VLMS)} (e.g. {PAPER_MODEL!r})")
    return int(config.text_config.num_hidden_layers)


def full_scale(model: str | Path, data: str | Path, *, n_images: int = 500, n_cal: int = 100, n_folds: int = 5,
               q: float = 0.02, image_layer: int = 2, text_layer: int = 1, alpha: float = 1.5,
               prompt: str = PAPER_PROMPT, max_new_tokens: int = 512, num_beams: int = 5,
               use_final_norm: bool = False, top_k: int | None = 50, seed: int = 0, device=None,
               dtype: str | None = None, free_bytes: int | None = None) -> FullScaleRun:
    r"""The chapter's measurements on a real LLaVA and COCO val2014.

    Checked first, before any weights are read or any image is decoded: every parameter; the checkpoint's
    class (:data:`~companion_lib.tinyvlm.SUPPORTED_VLMS`) and the layer indices against its depth; the data's
    layout and format (:func:`load_coco_split`); the parameters' memory against the device's
    (:func:`~companion_lib.tinyvlm.load_llava`; ``free_bytes`` overrides the reading). Then:

    1. the logit lens of the image tokens of all ``n_images`` images (:func:`llava_lens`) and each COCO
       category's internal confidence :math:`c_o`;
    2. the baseline captions (the paper's prompt, ``num_beams``, ``max_new_tokens``) and their CHAIR;
    3. the threshold :math:`\theta`, the ``q``-quantile of :math:`c_o` of the real generated objects of the
       first ``n_cal`` images (the calibration split; every statistic uses the other images);
    4. ProjectAway at block ``image_layer`` with text embeddings from lens layer ``text_layer`` and strength
       ``alpha`` (the repository demo's ``l_I=2, l_T=1, alpha=1.5``; the paper's per-model choices were not
       available to us), erasing from each test image either the generated objects with
       :math:`c_o<\theta` (``"self"``, no labels) or the hallucinated ones (``"oracle"``, the demo's
       selection); only images with a selection are captioned again;
    5. :func:`fold_statistics` on ``n_folds`` disjoint folds of the test images (the replicates of the
       page's claims table), with the pointing game (:func:`pointing`) of each present category's
       localisation map against its COCO boxes.
    """
    from ..tinyvlm.coco import chair
    from ..tinyvlm.llava import load_llava

    n_images, n_cal, n_folds = (check_positive_int(v, k) for k, v in
                                (("n_images", n_images), ("n_cal", n_cal), ("n_folds", n_folds)))
    if n_folds < 2:
        raise ValueError(f"n_folds must be at least 2 (the claims' intervals need two replicates), got {n_folds}")
    if n_images - n_cal < 2 * n_folds:
        raise ValueError(f"n_images ({n_images}) minus n_cal ({n_cal}) leaves {n_images - n_cal} test images; "
                         f"n_folds={n_folds} needs at least {2 * n_folds}")
    q = float(q)
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in [0, 1], got {q}")
    alpha = _check_alpha(alpha)
    llava_prompt(prompt)
    check_positive_int(max_new_tokens, "max_new_tokens")
    check_positive_int(num_beams, "num_beams")
    if top_k is not None:
        check_positive_int(top_k, "top_k")
    n_layer = _check_llava_config(model)
    image_layer, text_layer = check_int(image_layer, "image_layer"), check_int(text_layer, "text_layer")
    if not 0 <= image_layer < n_layer:
        raise ValueError(f"image_layer {image_layer} out of range [0, {n_layer}) for {str(model)!r} "
                         f"({n_layer} blocks)")
    if not 0 <= text_layer <= n_layer:
        raise ValueError(f"text_layer {text_layer} out of range [0, {n_layer}] for {str(model)!r}")
    split = load_coco_split(data, n_images, seed)
    loaded = load_llava(model, device=device, dtype=dtype, free_bytes=free_bytes)   # names a corrupt weights file
    token_ids = class_token_ids(loaded.processor.tokenizer, split.categories)
    full_prompt = llava_prompt(prompt)

    n_tokens = model_image_tokens(loaded)
    side = int(round(np.sqrt(n_tokens)))
    if side * side != n_tokens:
        raise ValueError(f"{n_tokens} image tokens do not form a square grid: the patches cannot be placed")
    centres = [patch_centres(loaded.processor.image_processor, w, h, side) for w, h in split.sizes]

    lens = llava_lens(loaded, split.files, token_ids, prompt=full_prompt, use_final_norm=use_final_norm, top_k=top_k)
    conf = lens.confidence
    captions = llava_captions(loaded, split.files, prompt=full_prompt, max_new_tokens=max_new_tokens,
                              num_beams=num_beams)
    base = chair(captions, split.truth, split.categories)
    index = {c: k for k, c in enumerate(split.categories)}
    cal_real = [r for i in range(n_cal)
                for r in _generated(conf[i], base["mentions"][i], split.truth[i], index)[0]]
    if not cal_real:
        raise ValueError(f"the {n_cal} calibration images' captions name no real object: raise n_cal")
    theta = calibrate_threshold(cal_real, q)

    test = list(range(n_cal, n_images))
    selected = {"self": [[c for c in base["mentions"][i] if conf[i, index[c]] < theta] for i in test],
                "oracle": [list(base["hallucinated"][i]) for i in test]}
    embeddings: dict = {}
    edited = {}
    for kind, sel in selected.items():
        new = [captions[i] for i in test]
        rows = [j for j, s in enumerate(sel) if s]
        for c in {c for j in rows for c in sel[j]}:
            if c not in embeddings:
                embeddings[c] = llava_text_embedding(loaded, c, text_layer)
        if rows:
            again = llava_captions(loaded, [split.files[test[j]] for j in rows], prompt=full_prompt,
                                   max_new_tokens=max_new_tokens, num_beams=num_beams,
                                   erase=[[embeddings[c] for c in sel[j]] for j in rows],
                                   image_layer=image_layer, alpha=alpha)
            for j, c in zip(rows, again):
                new[j] = c
        edited[kind] = new

    stats = []
    for f, part in enumerate(np.array_split(np.arange(len(test)), n_folds)):
        idx = [test[j] for j in part]
        truth = [split.truth[i] for i in idx]
        before = {k: chair([captions[i] for i in idx], truth, split.categories) for k in selected}
        after = {k: chair([edited[k][j] for j in part], truth, split.categories) for k in selected}
        points = [pointing(lens.patch_max[i, :, index[c]], split.boxes[i][c], centres[i])
                  for i in idx for c in sorted(split.truth[i]) if c in split.boxes[i]]
        row = fold_statistics(conf[idx], split.categories, truth, [base["mentions"][i] for i in idx], theta,
                              before, after, points)
        stats.append({"fold": f, "images": len(idx), **row})
    settings = dict(n_images=n_images, n_cal=n_cal, n_folds=n_folds, q=q, image_layer=image_layer,
                    text_layer=text_layer, alpha=alpha, prompt=prompt, max_new_tokens=max_new_tokens,
                    num_beams=num_beams, use_final_norm=use_final_norm, top_k=top_k, seed=seed,
                    device=str(loaded.device), dtype=str(loaded.dtype).replace("torch.", ""))
    return FullScaleRun(source=loaded.source, settings=settings, classes=tuple(split.categories),
                        image_ids=split.image_ids, truth=split.truth, lens=lens, captions=captions, chair=base,
                        theta=float(theta), n_cal=n_cal, selected=selected, edited=edited,
                        folds=pd.DataFrame(stats).set_index("fold"))
