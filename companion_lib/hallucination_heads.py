r"""Hallucination heads: modular attribution and intervention (Yang, Li, Cao and Xu, ICLR 2025).

*Understanding and Mitigating Hallucination in Large Vision-Language Models via Modular Attribution and
Intervention.* The paper's argument, and the functions here that compute each step:

1. **Causal mediation by counterfactual ablation.** At a generated object token :math:`y_t` with
   probability :math:`p_t=p_\theta(y_t\mid v,x_{<t})`, zero the output of a component :math:`m` (a whole
   attention block, a whole MLP, or one head) and recompute it; the indirect effect is
   :math:`\Delta_m(t)=p_t-p^{\setminus m}_t` (:func:`ablation_effects`, :func:`module_mediation`).
2. **Head attribution.** The contrastive score of head :math:`(l,h)` over hallucinated tokens
   :math:`\mathcal H` and correctly mentioned tokens :math:`\mathcal N`,
   :math:`S(l,h)=\overline{\Delta_{(l,h)}}^{\mathcal H}-\overline{\Delta_{(l,h)}}^{\mathcal N}`
   (:func:`head_scores`); hallucination heads are its top :math:`k` (:func:`top_heads`).
3. **Text-attention bias** (Fig. 3): the attention mass of a head at the query that predicts an object,
   on the image block :math:`a^{\mathrm{img}}` and on the post-image text :math:`a^{\mathrm{txt}}`
   (:func:`attention_mass`).
4. **Inheritance from the base LM** (Fig. 4): cosine similarity of each head's caption-block attention
   map in the VLM and in the base LM (:func:`attention_similarity`).
5. **Slow change during tuning** (Fig. 5): row-wise Jensen-Shannon divergence of each head's attention
   from the post-alignment model (:func:`js_drift`, defined with the training loop in
   :mod:`companion_lib.tinyvlm.train`, which records it for a probe batch while the world is tuned).
6. **Interventions**: re-weighting the text attention of chosen heads (Fig. 6a), adaptive deactivation
   AD-HH (both in :mod:`companion_lib.tinyvlm.hooks`, evaluated with :func:`caption_chair`), and
   targeted fine-tuning TF-HH of the heads' query/key rows with an attention loss (:func:`targeted_finetune`).

At full scale (the reproduce page's last section) the same measurements run on a real LLaVA and COCO:
:func:`llava_greedy_caption` (greedy captions under an optional intervention, with a key-value cache),
:func:`llava_object_tokens` (the object tokens of the captions, CHAIR-labelled through
:mod:`companion_lib.tinyvlm.coco`), :func:`ablation_effects`, :func:`head_scores` and :func:`module_mediation`
(which take those tokens as they take the tiny world's), and :func:`full_scale`, which checks the model and
the data before it reads any weights and returns a :class:`FullScaleResult`.
"""

from __future__ import annotations

import copy
import inspect
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .common.device import module_device, resolve_device
from .tinyvlm.hooks import check_heads, head_mask, module_ablation, record_attention, record_residual
from .tinyvlm.model import IMAGE_SLICE, TEXT_START, TinyVLM, as_patches, caption_batch, greedy_captions
from .tinyvlm.train import js_divergence, js_drift  # Fig. 5's drift is recorded while the world trains
from .tinyvlm.world import OBJECTS, TOKEN_ID, VOCAB, chair, object_id

__all__ = [
    "ObjectTokens", "object_tokens", "token_probs", "ablation_effects", "head_components",
    "module_components", "module_mediation", "head_scores", "top_heads", "random_heads", "attention_mass",
    "attention_similarity", "js_divergence", "js_drift", "caption_chair", "targeted_finetune",
    "relative_reduction", "Experiment", "choose_tau", "run_experiment", "head_mean",
    "PAPER_PROMPT", "LLAVA_7B_PARAMS", "LlavaCaption", "llava_greedy_caption", "LlavaObjectTokens",
    "llava_object_tokens", "FullScaleResult", "full_scale",
]


@dataclass
class ObjectTokens:
    """Teacher-forced captions with their object tokens marked.

    ``ids``/``labels`` come from :func:`~companion_lib.tinyvlm.caption_batch`; ``mask[i, t]`` is True where
    ``labels[i, t]`` is an object word, ``hallucinated[i, t]`` where that word is absent from image ``i``.
    """

    patches: torch.Tensor
    ids: torch.Tensor
    labels: torch.Tensor
    mask: np.ndarray
    hallucinated: np.ndarray
    captions: list
    truths: list

    @property
    def n_hallucinated(self) -> int:
        return int(self.hallucinated.sum())

    @property
    def n_real(self) -> int:
        return int((self.mask & ~self.hallucinated).sum())


def object_tokens(images, captions: list, truths: list, only_hallucinated_captions: bool = True) -> ObjectTokens:
    r"""Mark the object tokens of generated ``captions`` (lists of words) of ``images``.

    As in the paper, only captions with at least one hallucination (:math:`\mathrm{CHAIR}_s=1`) are kept by
    default; their hallucinated words form :math:`\mathcal H` and their correct words :math:`\mathcal N`.
    """
    if len(captions) != len(truths) or len(captions) != len(images):
        raise ValueError("images, captions and truths must have the same length")
    keep = []
    for i, (cap, truth) in enumerate(zip(captions, truths)):
        if not cap:
            continue
        for w in cap:
            object_id(w)
        if only_hallucinated_captions and not (set(cap) - set(truth)):
            continue
        keep.append(i)
    if not keep:
        raise ValueError("no caption qualifies (none is non-empty with a hallucination)")
    seqs = [[TOKEN_ID["describe"]] + [TOKEN_ID[w] for w in captions[i]] + [TOKEN_ID["."]] for i in keep]
    ids, labels = caption_batch(seqs)
    obj_ids = torch.tensor([TOKEN_ID[w] for w in OBJECTS])
    mask = torch.isin(labels, obj_ids).numpy()
    hal = np.zeros_like(mask)
    for r, i in enumerate(keep):
        truth = set(truths[i])
        for t, w in enumerate(captions[i]):
            hal[r, t] = w not in truth
    images = np.asarray(images)[keep]
    return ObjectTokens(patches=as_patches(images), ids=ids, labels=labels, mask=mask, hallucinated=hal & mask,
                        captions=[captions[i] for i in keep], truths=[truths[i] for i in keep])


@torch.no_grad()
def token_probs(model: TinyVLM, data: ObjectTokens, context=None) -> np.ndarray:
    r""":math:`p_\theta(y_t\mid v, x_{<t})` at every text position (``(n, T)``), under an optional
    intervention ``context`` (a context manager, e.g. :func:`~companion_lib.tinyvlm.head_mask`). The forward
    pass runs where the model is (``data`` follows it); the array is on the CPU."""
    model.eval()
    dev = module_device(model)
    ids, patches = data.ids.to(dev), data.patches.to(dev)
    with (context if context is not None else nullcontext()):
        logits = model(ids, patches=patches).logits
    return _label_probs(logits, data)


def _label_probs(logits: torch.Tensor, data: ObjectTokens) -> np.ndarray:
    """The probability of each label token from the logits ``(n, S, vocab)`` of the whole sequence."""
    logits = logits[:, TEXT_START:TEXT_START + data.ids.shape[1]]
    probs = torch.softmax(logits.float(), -1)
    target = data.labels.to(logits.device).clamp(min=0)
    return probs.gather(-1, target[..., None])[..., 0].cpu().numpy()


def _logits_from_block(model: TinyVLM, resid: list, layer: int) -> torch.Tensor:
    """The logits of a forward pass resumed at block ``layer`` from the recorded residual stream ``resid``
    (:func:`~companion_lib.tinyvlm.record_residual` of a pass over the same inputs: ``resid[layer]`` is the
    input of block ``layer``). The blocks run as in the decoder's own forward pass (same positions, same
    rotary embeddings, final norm and head), so the numbers are those of a full pass whose first ``layer``
    blocks gave ``resid[layer]``."""
    lm = model.lm.model
    return model.lm.lm_head(lm.norm(_run_blocks(lm, resid[layer], layer)))


def _run_blocks(decoder, h: torch.Tensor, layer: int) -> torch.Tensor:
    """The residual stream after the blocks of a Llama ``decoder`` from block ``layer`` on, given its input
    ``h`` there (positions from zero, the decoder's rotary embeddings)."""
    pos = torch.arange(h.shape[1], device=h.device)[None]
    rope = decoder.rotary_emb(h, position_ids=pos)
    for block in decoder.layers[layer:]:
        h = block(h, position_embeddings=rope, position_ids=pos)
        h = h[0] if isinstance(h, tuple) else h
    return h


def head_components(model) -> list:
    """Every head as a component ``("head", l, h)`` (of a :class:`TinyVLM` or a LLaVA)."""
    n_layers, n_heads = _model_shape(model)
    return [("head", l, h) for l in range(n_layers) for h in range(n_heads)]


def module_components(model) -> list:
    """Every layer's attention block and MLP as components ``("mha", l)`` and ``("mlp", l)``."""
    return [(kind, l) for l in range(_model_shape(model)[0]) for kind in ("mha", "mlp")]


def _context(model, component):
    kind = component[0]
    if kind == "head":
        return head_mask(model, [(component[1], component[2])])
    if kind in ("mha", "mlp"):
        return module_ablation(model, component[1], kind)
    raise ValueError(f"unknown component {component!r}")


@torch.no_grad()
def ablation_effects(model: TinyVLM, data: ObjectTokens, components: list) -> np.ndarray:
    r"""Indirect effects :math:`\Delta_m(t)=p_t-p_t^{\setminus m}` of zero-ablating each component, at
    every object token: an array ``(len(components), n_object_tokens)`` in the order of ``data.mask``.

    Zeroing a component of layer :math:`l` leaves the blocks below :math:`l` as they are, so each ablated
    pass resumes at block :math:`l` from the clean pass's residual stream (:func:`_logits_from_block`): the
    same numbers as a full ablated pass (a test checks it), for the cost of the blocks from :math:`l` up.
    With :class:`LlavaObjectTokens` the model is a LLaVA and the same is done caption by caption."""
    if isinstance(data, LlavaObjectTokens):
        return _llava_ablation_effects(model, data, components)
    model.eval()
    dev = module_device(model)
    with record_residual(model) as resid:
        clean = model(data.ids.to(dev), patches=data.patches.to(dev)).logits
    base = _label_probs(clean, data)[data.mask]
    out = np.empty((len(components), base.size))
    for i, comp in enumerate(components):
        with _context(model, comp):  # entering it checks the layer index
            logits = _logits_from_block(model, resid, int(comp[1]))
        out[i] = base - _label_probs(logits, data)[data.mask]
    return out


def module_mediation(model: TinyVLM, data: ObjectTokens) -> dict:
    r"""Mean :math:`\Delta` on hallucinated and on real object tokens of every layer's MHA and MLP:
    arrays of shape ``(n_layers,)`` under keys ``mha_hal``, ``mlp_hal``, ``mha_real``, ``mlp_real``."""
    comps = module_components(model)
    eff = ablation_effects(model, data, comps)
    hal = data.hallucinated[data.mask]
    out = {}
    for kind in ("mha", "mlp"):
        rows = [i for i, c in enumerate(comps) if c[0] == kind]
        out[f"{kind}_hal"] = eff[rows][:, hal].mean(1)
        out[f"{kind}_real"] = eff[rows][:, ~hal].mean(1)
    return out


def head_scores(model: TinyVLM, data: ObjectTokens) -> np.ndarray:
    r"""The contrastive attribution :math:`S(l,h)` of every head, shape ``(n_layers, n_heads)`` (a
    :class:`TinyVLM` with :class:`ObjectTokens`, or a LLaVA with :class:`LlavaObjectTokens`)."""
    if data.n_hallucinated == 0 or data.n_real == 0:
        raise ValueError("data needs both hallucinated and real object tokens")
    eff = ablation_effects(model, data, head_components(model))
    hal = data.hallucinated[data.mask]
    s = eff[:, hal].mean(1) - eff[:, ~hal].mean(1)
    return s.reshape(_model_shape(model))


def top_heads(scores: np.ndarray, k: int, largest: bool = True) -> list:
    """The ``k`` heads ``(layer, head)`` with the largest (or smallest) scores, best first."""
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ValueError(f"scores must be a (layers, heads) array, got shape {scores.shape}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= scores.size:
        raise ValueError(f"k must be an int in [1, {scores.size}], got {k!r}")
    flat = np.argsort(-scores.ravel() if largest else scores.ravel(), kind="stable")[:k]
    return [tuple(int(v) for v in np.unravel_index(i, scores.shape)) for i in flat]


def random_heads(rng: np.random.Generator, k: int, n_layers: int, n_heads: int, exclude=()) -> list:
    """``k`` distinct random heads, none of them in ``exclude``."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    pool = [(l, h) for l in range(n_layers) for h in range(n_heads) if (l, h) not in set(map(tuple, exclude))]
    if not 1 <= k <= len(pool):
        raise ValueError(f"k must be in [1, {len(pool)}], got {k}")
    return [pool[i] for i in rng.choice(len(pool), size=k, replace=False)]


@torch.no_grad()
def attention_mass(model: TinyVLM, data: ObjectTokens, tokens: str = "all") -> dict:
    r"""Fig. 3: mean attention mass on the image block, :math:`a^{\mathrm{img}}=\sum_{j\in\mathcal I}A_{q,j}`,
    and on the post-image text, :math:`a^{\mathrm{txt}}=\sum_{j=s+n_v}^{q}A_{q,j}`, at the queries that
    predict object tokens. ``tokens`` selects ``"all"`` object tokens (the paper: every object token of the
    hallucinated captions), ``"hallucinated"`` or ``"real"`` ones. Arrays ``(n_layers, n_heads)`` (the
    forward pass runs where the model is; the arrays are on the CPU)."""
    sel = {"all": data.mask, "hallucinated": data.hallucinated, "real": data.mask & ~data.hallucinated}
    if tokens not in sel:
        raise ValueError(f"tokens must be one of {sorted(sel)}, got {tokens!r}")
    rows, cols = np.nonzero(sel[tokens])
    model.eval()
    dev = module_device(model)
    with record_attention(model) as rec:
        model(data.ids.to(dev), patches=data.patches.to(dev))
    img, txt = [], []
    for layer in rec:
        A = layer[0]  # (n, H, S, S)
        q = torch.as_tensor(TEXT_START + cols, device=dev)
        r = torch.as_tensor(rows, device=dev)
        a = A[r, :, q, :]  # (m, H, S)
        img.append(a[:, :, IMAGE_SLICE].sum(-1).mean(0).cpu().numpy())
        txt.append(a[:, :, TEXT_START:].sum(-1).mean(0).cpu().numpy())
    return {"image": np.stack(img), "text": np.stack(txt)}


def _caption_block(rec, n_text: int) -> torch.Tensor:
    return torch.stack([layer[0][:, :, TEXT_START:TEXT_START + n_text, TEXT_START:TEXT_START + n_text]
                        for layer in rec])  # (L, n, H, T, T)


@torch.no_grad()
def attention_similarity(vlm: TinyVLM, base_lm: TinyVLM, data: ObjectTokens, sketch_ids: torch.Tensor) -> np.ndarray:
    r"""Fig. 4: per head, the mean over samples of
    :math:`\cos(\mathrm{vec}A^{(l,h)}_{\mathrm{VLM}},\mathrm{vec}A^{(l,h)}_{\mathrm{LM}})` of the caption-block
    attention maps, the VLM reading the image and the base LM reading the text sketch of the same scene.
    Each model reads its inputs where it is; the maps are compared where ``vlm`` is, and the array is on the
    CPU."""
    sketch_ids = torch.as_tensor(sketch_ids, dtype=torch.long)
    if sketch_ids.shape != (data.ids.shape[0], IMAGE_SLICE.stop - IMAGE_SLICE.start):
        raise ValueError(f"sketch_ids must have shape ({data.ids.shape[0]}, 16), got {tuple(sketch_ids.shape)}")
    T = data.ids.shape[1]
    dev, dev_lm = module_device(vlm), module_device(base_lm)
    ids = data.ids.to(dev)
    with record_attention(vlm) as rv:
        vlm(ids, patches=data.patches.to(dev))
    with record_attention(base_lm) as rb:
        base_lm(data.ids.to(dev_lm), sketch_ids=sketch_ids.to(dev_lm))
    a, b = _caption_block(rv, T), _caption_block(rb, T).to(dev)
    # only rows and columns of real (non-padding) caption tokens
    valid = (ids != TOKEN_ID["<pad>"]).float()
    m = valid[:, :, None] * valid[:, None, :]
    a = (a * m[None, :, None]).flatten(-2)
    b = (b * m[None, :, None]).flatten(-2)
    cos = nn.functional.cosine_similarity(a, b, dim=-1)  # (L, n, H)
    return cos.mean(1).cpu().numpy()


def caption_chair(model: TinyVLM, images, truths, context=None) -> tuple[list, dict]:
    """Greedy captions of ``images`` under an optional intervention ``context``, and their CHAIR."""
    with (context if context is not None else nullcontext()):
        caps = greedy_captions(model, images)
    return caps, chair(caps, truths)


def relative_reduction(before: float, after: float) -> float:
    """``(before - after) / before`` (0 when ``before`` is 0)."""
    return 0.0 if before == 0 else (before - after) / before


def targeted_finetune(model: TinyVLM, heads: list, images, captions: list, steps: int = 100,
                      batch_size: int = 64, lr: float = 1e-3, lam_ce: float = 1.0, lam_att: float = 2.0,
                      seed: int = 0) -> tuple[TinyVLM, list]:
    r"""TF-HH: a copy of ``model`` in which only the query/key rows of the chosen ``heads`` are trained, on
    :math:`\mathcal L=\lambda_{\mathrm{ce}}\mathcal L_{\mathrm{CE}}+\lambda_{\mathrm{att}}\,\overline{\log(\sum_{j\notin\mathcal I}A_{t,j}+10^{-8})}`,
    the mean running over the layers holding chosen heads, their heads and the response rows :math:`t`.

    The paper also trains ``lm_head``; here it is tied to the input embeddings, so it stays frozen.
    ``captions`` are token-id captions (``describe ... . <eos>``). Returns the tuned copy and the losses.
    The copy trains where ``model`` is: the batches are drawn on the CPU generator and moved there.
    """
    heads = check_heads(model, heads)
    if not heads:
        raise ValueError("heads must not be empty")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    tuned = copy.deepcopy(model)
    tuned.train()
    for p in tuned.parameters():
        p.requires_grad_(False)
    by_layer: dict = {}
    for l, h in heads:
        by_layer.setdefault(l, []).append(h)
    params, masks = [], []
    for l, hs in by_layer.items():
        attn = tuned.layers[l].self_attn
        dh = attn.head_dim
        for proj in (attn.q_proj, attn.k_proj):
            mask = torch.zeros_like(proj.weight)
            for h in hs:
                mask[h * dh:(h + 1) * dh] = 1.0
            proj.weight.requires_grad_(True)
            params.append(proj.weight)
            masks.append(mask)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    dev = module_device(tuned)
    patches = as_patches(images)
    gen = torch.Generator().manual_seed(int(seed))
    non_image = torch.ones(TEXT_START + max(len(c) for c in captions), dtype=torch.bool)
    non_image[IMAGE_SLICE] = False
    non_image = non_image.to(dev)
    losses = []
    for step in range(steps):
        idx = torch.randint(0, len(captions), (batch_size,), generator=gen)
        ids, labels = caption_batch([captions[i] for i in idx.tolist()])
        ids, labels = ids.to(dev), labels.to(dev)
        T = ids.shape[1]
        with record_attention(tuned) as rec:
            logits = tuned(ids, patches=patches[idx].to(dev)).logits[:, TEXT_START:TEXT_START + T]
        ce = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        resp = (labels != -100).float()  # response rows R
        att_terms = []
        for l, hs in by_layer.items():
            A = rec[l][0][:, hs, TEXT_START:TEXT_START + T, :TEXT_START + T]  # (b, |S_l|, T, S)
            mass = A[..., non_image[:TEXT_START + T]].sum(-1)  # (b, |S_l|, T)
            term = (torch.log(mass + 1e-8) * resp[:, None, :]).sum() / (resp.sum() * len(hs))
            att_terms.append(term)
        loss = lam_ce * ce + lam_att * torch.stack(att_terms).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for p, m in zip(params, masks):
            p.grad.mul_(m)
        opt.step()
        losses.append(float(loss.detach()))
    tuned.eval()
    for p in tuned.parameters():
        p.requires_grad_(False)
    return tuned, losses


# -- the chapter's experiment, one trained world at a time --------------------------------------
@dataclass
class Experiment:
    """Everything the reproduce page reports for one trained world (one seed)."""

    seed: int
    chair_natural: dict
    chair_trigger: dict
    chair_all: dict
    chair_base_lm_trigger: dict
    mediation: dict
    scores: np.ndarray
    hal_heads: list
    nonhal_heads: list
    mass: dict
    similarity: np.ndarray
    js: np.ndarray
    js_steps: list
    reweight: dict          # alpha -> {"hal": chair}, and at the smallest alpha also "random": [chair, ...]
    random_sets: list
    tau: float
    adhh: dict
    adhh_random: list
    tfhh: dict
    tfhh_random: list       # TF-HH of each random head set
    tfhh_ce: dict           # the control: the same tuning of the same heads on the same data, lambda_att = 0
    n_hal_tokens: int
    n_real_tokens: int


def choose_tau(sweep: dict, baseline: dict, max_recall_drop: float = 2.0) -> float:
    """The threshold with the lowest CHAIR_s on the held-out split among those that lose at most
    ``max_recall_drop`` recall points (ties: the largest tau, the gentlest intervention)."""
    ok = [t for t, c in sweep.items() if baseline["recall"] - c["recall"] <= max_recall_drop]
    if not ok:
        raise ValueError("no tau keeps recall within max_recall_drop")
    return max(ok, key=lambda t: (-sweep[t]["chair_s"], t))


def run_experiment(world, n_natural: int = 600, n_trigger: int = 300, n_attr: int = 300, k: int = 3,
                   n_random: int = 3, alphas=(1.0, 0.5, 0.0), tau: float = 0.4, tfhh_steps: int = 100,
                   tfhh_batch: int = 32, n_tfhh: int = 600, n_similarity: int = 100, device=None) -> Experiment:
    """The reproduce page's experiment on one trained world (:class:`companion_lib.tinyvlm.World`).

    Attribution uses an *attribution split* (``n_attr`` natural and ``n_attr`` trigger-only images, the
    paper's COCO train); every CHAIR number is measured on separate test splits (``n_natural`` natural and
    ``n_trigger`` trigger-only images, the paper's COCO val). The re-weighting with alpha = 1 is the identity,
    so its CHAIR is the plain captions'; random heads are re-weighted at the smallest alpha.

    AD-HH uses the paper's threshold ``tau`` (0.4 in the official LLaVA-1.5 decoding script), which must be
    positive: at tau = 0 AD-HH zeroes the heads' text attention at every step, which is the Fig. 6a
    re-weighting with alpha = 0, not an adaptive intervention.

    TF-HH is tuned, as the paper tunes on LLaVA's own instruction-tuning mix, on ``n_tfhh`` fresh image-caption
    pairs drawn from the world's instruction-tuning distribution (natural scenes whose captions may name an
    occluded partner), ``tfhh_steps`` steps of ``tfhh_batch`` pairs (100 x 32: the paper's 200 x 16 examples).
    Its competitors: the same tuning of each of the ``n_random`` random head sets, and the same tuning of the
    same heads on the same data with cross-entropy alone (``lam_att = 0``).

    ``device`` (default :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the
    models caption, are ablated, intervened on and tuned; the splits and head draws are made on the CPU as
    before, and every result comes back to the CPU (on the CPU the numbers are the same whatever ``device``).
    """
    if not tau > 0:
        raise ValueError(f"tau must be positive (tau = 0 is the alpha = 0 re-weighting), got {tau!r}")
    from .tinyvlm.train import build_model
    from .tinyvlm.world import encode_caption, make_split, sketch_tokens
    from .tinyvlm import hooks

    dev = resolve_device(device)
    seed = world.seed
    model = build_model(world.final_state, world.config).to(dev)
    base = build_model(world.base_state, world.config).to(dev)
    L, H = model.n_layers, model.n_heads
    rng = np.random.default_rng([seed, 161])
    nat = make_split(n_natural, rng, "natural", occlusion=False)
    tri = make_split(n_trigger, rng, "trigger_only")
    a_nat = make_split(n_attr, rng, "natural", occlusion=False)
    a_tri = make_split(n_attr, rng, "trigger_only")
    test_images = np.concatenate([nat.images, tri.images])
    test_truth = nat.truth + tri.truth
    attr_images = np.concatenate([a_nat.images, a_tri.images])
    attr_truth = a_nat.truth + a_tri.truth
    attr_scenes = a_nat.scenes + a_tri.scenes

    # hallucinations driven by the prior
    caps, c_all = caption_chair(model, test_images, test_truth)
    c_nat = chair(caps[:n_natural], nat.truth)
    c_tri = chair(caps[n_natural:], tri.truth)
    sk_tri = np.array([sketch_tokens(s) for s in tri.scenes])
    c_base = chair(greedy_captions(base, sketches=sk_tri), tri.truth)

    # attribution on the model's own captions of the attribution split
    attr_caps, _ = caption_chair(model, attr_images, attr_truth)
    data = object_tokens(attr_images, attr_caps, attr_truth)
    mediation = module_mediation(model, data)
    S = head_scores(model, data)
    hal, non = top_heads(S, k), top_heads(S, k, largest=False)
    mass = attention_mass(model, data)
    keep = [i for i, (c, t) in enumerate(zip(attr_caps, attr_truth)) if c and set(c) - set(t)][:n_similarity]
    sub = object_tokens(attr_images[keep], [attr_caps[i] for i in keep], [attr_truth[i] for i in keep])
    sk = torch.tensor([sketch_tokens(attr_scenes[i]) for i in keep])
    sim = attention_similarity(model, base, sub, sk)
    js = world.probe_drift  # js_drift of the probe batch, recorded during tuning

    # interventions, against the same intervention on random heads
    rr = np.random.default_rng([seed, 162])
    random_sets = [random_heads(rr, k, L, H, exclude=hal) for _ in range(n_random)]
    reweight = {}
    for a in alphas:
        reweight[a] = {"hal": c_all if a == 1.0 else
                       caption_chair(model, test_images, test_truth, hooks.reweight_text(model, hal, a))[1]}
    reweight[min(alphas)]["random"] = [caption_chair(model, test_images, test_truth,
                                                     hooks.reweight_text(model, r, min(alphas)))[1] for r in random_sets]
    adhh = caption_chair(model, test_images, test_truth, hooks.adaptive_deactivation(model, hal, tau))[1]
    adhh_random = [caption_chair(model, test_images, test_truth, hooks.adaptive_deactivation(model, r, tau))[1]
                   for r in random_sets]
    # TF-HH on the instruction-tuning distribution (occlusion on: some captions name a hidden partner)
    sft = make_split(n_tfhh, np.random.default_rng([seed, 163]), "natural")
    tf_caps = [encode_caption(s.objects) for s in sft.scenes]

    def tfhh_chair(heads, lam_att=2.0):
        tuned, _ = targeted_finetune(model, heads, sft.images, tf_caps, steps=tfhh_steps, batch_size=tfhh_batch,
                                     lam_att=lam_att, seed=seed)
        return caption_chair(tuned, test_images, test_truth)[1]

    tfhh = tfhh_chair(hal)
    tfhh_ce = tfhh_chair(hal, lam_att=0.0)
    tfhh_random = [tfhh_chair(r) for r in random_sets]
    return Experiment(seed=seed, chair_natural=c_nat, chair_trigger=c_tri, chair_all=c_all,
                      chair_base_lm_trigger=c_base, mediation=mediation, scores=S, hal_heads=hal,
                      nonhal_heads=non, mass=mass, similarity=sim, js=js, js_steps=list(world.probe_steps),
                      reweight=reweight, random_sets=random_sets, tau=tau, adhh=adhh,
                      adhh_random=adhh_random, tfhh=tfhh, tfhh_random=tfhh_random, tfhh_ce=tfhh_ce,
                      n_hal_tokens=data.n_hallucinated, n_real_tokens=data.n_real)


def head_mean(values: np.ndarray, heads: list) -> float:
    """Mean of a ``(layers, heads)`` array over a list of heads."""
    return float(np.mean([values[l, h] for l, h in heads]))


# -- the same measurements on a real LLaVA and COCO (issue 39: the page's "At full scale") ------------------
#: The paper's captioning prompt for LLaVA-1.5 (research note: "Please describe this image in detail.", greedy,
#: 128 new tokens), in LLaVA-1.5's conversation format.
PAPER_PROMPT = "USER: <image>\nPlease describe this image in detail. ASSISTANT:"
#: Parameters of LLaVA-1.5-7B (the model card of llava-hf/llava-1.5-7b-hf: 7.06B).
LLAVA_7B_PARAMS = 7.06e9


def _model_shape(model) -> tuple[int, int]:
    """``(n_layers, n_heads)`` of a :class:`TinyVLM` (its attributes) or of a LLaVA (its decoder blocks)."""
    if isinstance(model, TinyVLM):
        return model.n_layers, model.n_heads
    from .tinyvlm.hooks import _shape
    return _shape(model)


@dataclass
class LlavaCaption:
    """A greedy caption of one image by a LLaVA: the prompt and generated ids ``(1, S)``, the image's
    ``pixel_values``, where the generated tokens start, the image block and the decoded ``text`` with the
    character end of each generated token in it (``token_ends``)."""

    input_ids: torch.Tensor
    pixel_values: torch.Tensor
    prompt_len: int
    image_block: slice
    text: str
    token_ends: list


@torch.no_grad()
def llava_greedy_caption(loaded, image, prompt: str = PAPER_PROMPT, max_new_tokens: int = 128, edit=None,
                         use_cache: bool = True) -> LlavaCaption:
    """Greedy caption of one PIL ``image`` by a loaded LLaVA (:func:`companion_lib.tinyvlm.load_llava`), one
    image at a time (the book's attention does not pad). ``edit(image_block) -> context manager`` is an
    optional intervention entered for the whole decoding (e.g. AD-HH with ``text_start`` the end of the
    image block). With ``use_cache`` the new tokens are decoded with a key-value cache, else every step
    re-reads the whole sequence (the same tokens: a test checks it). Decoding stops at the end-of-sequence
    token or after ``max_new_tokens``; the image placeholder token is never emitted."""
    from .tinyvlm.llava import image_slice

    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
    model, proc = loaded.model, loaded.processor
    enc = proc(images=image, text=prompt, return_tensors="pt")
    ids = enc["input_ids"].to(loaded.device)
    pix = enc["pixel_values"].to(loaded.device, loaded.dtype)
    block = image_slice(model, ids)
    eos = proc.tokenizer.eos_token_id
    image_token = model.config.image_token_id
    # transformers >= 5.2x names the key-value cache ``cache``, earlier versions ``past_key_values``
    cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    new: list = []
    with (edit(block) if edit is not None else nullcontext()):
        out = model(input_ids=ids, pixel_values=pix, use_cache=use_cache)
        seq = ids
        for _ in range(max_new_tokens):
            logits = out.logits[:, -1].float()
            logits[:, image_token] = float("-inf")     # never emit the image placeholder as text
            tok = logits.argmax(-1, keepdim=True)
            if eos is not None and int(tok) == eos:
                break
            new.append(int(tok))
            seq = torch.cat([seq, tok], 1)
            if len(new) == max_new_tokens:
                break
            if use_cache:
                out = model(input_ids=tok, use_cache=True, **{cache_arg: getattr(out, cache_arg)})
            else:
                out = model(input_ids=seq, pixel_values=pix, use_cache=False)
    tok = proc.tokenizer
    ends = [len(tok.decode(new[:i + 1], skip_special_tokens=True)) for i in range(len(new))]
    return LlavaCaption(input_ids=seq.cpu(), pixel_values=pix.cpu(), prompt_len=ids.shape[1], image_block=block,
                        text=tok.decode(new, skip_special_tokens=True), token_ends=ends)


@dataclass
class LlavaObjectTokens:
    """The object tokens of LLaVA captions, for :func:`ablation_effects` and :func:`head_scores`.

    ``items`` holds, per kept caption, ``(caption, positions, labels)``: the positions (in the full
    sequence) of the first token of each object word and those tokens' ids. ``hallucinated`` (one entry per
    object token, in caption order) marks the words absent from the image; ``mask`` is all True (the flat
    layout of :class:`ObjectTokens`' ``hallucinated[mask]``); ``caption_index`` says which kept caption
    each token belongs to."""

    items: list
    hallucinated: np.ndarray
    caption_index: np.ndarray
    categories: list

    @property
    def mask(self) -> np.ndarray:
        return np.ones_like(self.hallucinated)

    @property
    def n_hallucinated(self) -> int:
        return int(self.hallucinated.sum())

    @property
    def n_real(self) -> int:
        return int((~self.hallucinated).sum())


def llava_object_tokens(captions: list, truths: list, only_hallucinated_captions: bool = True,
                        categories=None) -> LlavaObjectTokens:
    r"""Mark the object tokens of LLaVA captions (:class:`LlavaCaption`) against ground-truth COCO categories:
    every mention of a category (:func:`companion_lib.tinyvlm.coco.object_mentions`) at the generated token
    that holds its first character; hallucinated when the category is absent from the image. As the paper,
    only captions with a hallucination (:math:`\mathrm{CHAIR}_s=1`) are kept by default."""
    from .tinyvlm.coco import object_mentions

    if len(captions) != len(truths):
        raise ValueError(f"captions and truths must have the same length, got {len(captions)} and {len(truths)}")
    items, hal, idx, cats = [], [], [], []
    for cap, truth in zip(captions, truths):
        truth = set(truth)
        mentions = object_mentions(cap.text, categories)
        if not mentions or (only_hallucinated_captions and all(c in truth for c, _, _ in mentions)):
            continue
        pos, labels = [], []
        for cat, start, _ in mentions:
            i = next(j for j, end in enumerate(cap.token_ends) if end > start)
            p = cap.prompt_len + i
            if p in pos:          # two words in one token: count the token once
                continue
            pos.append(p)
            labels.append(int(cap.input_ids[0, p]))
            hal.append(cat not in truth)
            idx.append(len(items))
            cats.append(cat)
        items.append((cap, np.asarray(pos), torch.tensor(labels)))
    if not items:
        raise ValueError("no caption qualifies (none mentions a COCO object with a hallucination)")
    return LlavaObjectTokens(items=items, hallucinated=np.asarray(hal, dtype=bool), caption_index=np.asarray(idx),
                             categories=cats)


def _llava_resume(model, resid: list, layer: int, rows: torch.Tensor) -> torch.Tensor:
    """Logits at positions ``rows`` of a LLaVA's forward pass resumed at decoder block ``layer`` from the
    recorded residual stream (as :func:`_logits_from_block` for the tiny VLM: same positions, rotary
    embeddings, final norm and head; the book's attention builds the causal mask itself)."""
    from .tinyvlm.llava import language_model_parts

    h = _run_blocks(model.model.language_model, resid[layer], layer)
    _, norm, head = language_model_parts(model)
    return head(norm(h[:, rows]))


@torch.no_grad()
def _llava_ablation_effects(model, data: LlavaObjectTokens, components: list) -> np.ndarray:
    """:func:`ablation_effects` for a LLaVA: caption by caption, one clean pass, then each component's
    ablated pass resumed at its layer; the probability of each object token read at the position before it."""
    dev = module_device(model)
    dtype = next(model.parameters()).dtype
    cols = []
    for cap, pos, labels in data.items:
        rows = torch.as_tensor(pos - 1, device=dev)
        lab = labels.to(dev)[None, :, None]
        with record_residual(model) as resid:
            logits = model(input_ids=cap.input_ids.to(dev), pixel_values=cap.pixel_values.to(dev, dtype)).logits
        base = torch.softmax(logits[:, rows].float(), -1).gather(-1, lab)[0, :, 0]
        eff = torch.empty(len(components), len(pos), device=dev)
        for i, comp in enumerate(components):
            with _context(model, comp):
                p = torch.softmax(_llava_resume(model, resid, int(comp[1]), rows).float(), -1)
            eff[i] = base - p.gather(-1, lab)[0, :, 0]
        cols.append(eff.cpu().numpy())
    return np.concatenate(cols, axis=1)


def _positive_int(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


@dataclass
class FullScaleResult:
    """What :func:`full_scale` measured on a real LLaVA and COCO (every CHAIR is
    :func:`companion_lib.tinyvlm.coco.chair`; folds are disjoint parts of the images or captions)."""

    source: str
    n_layers: int
    n_heads: int
    k: int
    tau: float
    alpha: float
    eval_ids: list
    captions: dict          # condition -> captions of the evaluation images
    chair: dict             # condition -> CHAIR over all evaluation images
    fold_chair: dict        # condition -> [CHAIR of each evaluation fold]
    attr_chair: dict
    scores: np.ndarray
    fold_scores: list
    mediation: dict
    fold_mediation: list
    hal_heads: list
    nonhal_heads: list
    random_sets: list
    n_hal_tokens: int
    n_real_tokens: int

    def claim_values(self) -> dict:
        """Per-fold statistics of the page's full-scale claims: ``key -> (values, competitor or None)``."""
        fc = self.fold_chair
        n = len(fc["greedy"])
        rand = [c for c in fc if c.startswith("adhh_random")]
        rw_rand = [c for c in fc if c.startswith("reweight_random")]

        def red(cond, metric, f):
            return relative_reduction(fc["greedy"][f][metric], fc[cond][f][metric])

        def mean_red(conds, metric, f):
            return float(np.mean([red(c, metric, f) for c in conds]))

        def top_share(S):
            pos = np.clip(S, 0, None).ravel()
            return float(np.sort(pos)[::-1][:self.k].sum() / pos.sum()) if pos.sum() > 0 else 0.0

        upper = [sum(l >= self.n_layers // 2 for l, _ in top_heads(S, self.k)) / self.k for S in self.fold_scores]
        return {
            "head_effect": ([float(S.max()) for S in self.fold_scores], None),
            "few_heads": ([top_share(S) for S in self.fold_scores], None),
            "location": (upper, None),
            "mha_mlp": ([float(m["mha_hal"].max()) for m in self.fold_mediation],
                        [2 * float(m["mlp_hal"].max()) for m in self.fold_mediation]),
            "reweight": ([red("reweight", "chair_i", f) for f in range(n)], None),
            "reweight_random": ([abs(mean_red(rw_rand, "chair_i", f)) for f in range(n)], None),
            "reweight_recall": ([fc["greedy"][f]["recall"] - fc["reweight"][f]["recall"] for f in range(n)], None),
            "adhh": ([red("adhh", "chair_s", f) for f in range(n)], None),
            "adhh_vs_random": ([red("adhh", "chair_s", f) for f in range(n)],
                               [mean_red(rand, "chair_s", f) for f in range(n)]),
            "adhh_recall": ([fc["greedy"][f]["recall"] - fc["adhh"][f]["recall"] for f in range(n)], None),
        }


def full_scale(model, data, *, n_eval: int = 500, n_attr: int = 100, k: int = 20, n_random: int = 1,
               tau: float = 0.4, alpha: float = 0.0, n_folds: int = 5, max_new_tokens: int = 128,
               prompt: str = PAPER_PROMPT, split: str = "val2014", attr_split: str | None = None, seed: int = 42,
               device=None, dtype: str | None = None, free_bytes: int | None = None,
               progress=None) -> FullScaleResult:
    r"""The paper's measurements on a real LLaVA (``"llava-hf/llava-1.5-7b-hf"`` or a saved folder) and COCO.

    Checked first, before any weights are read: the parameters; COCO's layout and format under ``data``
    (:func:`companion_lib.tinyvlm.coco.load_coco_folder`) and every sampled image file; the checkpoint's class and that it fits the device
    (:func:`companion_lib.tinyvlm.load_llava`, ``free_bytes`` overriding the free memory for tests). Then:

    1. greedy captions (``prompt``, ``max_new_tokens``) of ``n_eval`` random images of ``split`` (the paper:
       500 val2014 images) and their CHAIR;
    2. attribution: greedy captions of ``n_attr`` other images (of ``attr_split``, the paper's train2014, when
       given; else disjoint images of ``split``), the object tokens of those with a hallucination, every
       head's zero-ablation effect :math:`\Delta_{(l,h)}(t)` on them and the contrastive score :math:`S(l,h)`
       (:func:`head_scores`), and the module mediation of each layer's MHA and MLP (:func:`module_mediation`);
    3. the top-``k`` heads, ``n_random`` sets of ``k`` random other heads, and on the evaluation images:
       AD-HH with threshold ``tau`` (:func:`companion_lib.tinyvlm.adaptive_deactivation`) and the Fig. 6a
       text re-weighting with ``alpha`` (:func:`companion_lib.tinyvlm.reweight_text`), each on the top-k and on
       each random set; "text" is every token after the image block.

    The evaluation images and the hallucinated attribution captions are split into ``n_folds`` disjoint folds,
    the replicates of the page's claims (:meth:`FullScaleResult.claim_values`). ``progress`` (a callable
    taking a string) receives a line per stage. TF-HH is not part of it (a full fine-tuning run).
    """
    from PIL import Image

    from .tinyvlm import hooks
    from .tinyvlm.coco import chair as coco_chair
    from .tinyvlm.coco import load_coco_folder
    from .tinyvlm.llava import load_llava

    n_eval, n_attr = _positive_int("n_eval", n_eval), _positive_int("n_attr", n_attr)
    k, n_random = _positive_int("k", k), _positive_int("n_random", n_random)
    n_folds = _positive_int("n_folds", n_folds, 2)
    max_new_tokens = _positive_int("max_new_tokens", max_new_tokens)
    if n_eval < n_folds:
        raise ValueError(f"n_eval ({n_eval}) must be at least n_folds ({n_folds})")
    if not 0 < float(tau) <= 1:
        raise ValueError(f"tau must lie in (0, 1] (tau = 0 is the alpha = 0 re-weighting), got {tau!r}")
    if not 0 <= float(alpha) < 1:
        raise ValueError(f"alpha must lie in [0, 1) (1 is no edit), got {alpha!r}")
    if not isinstance(prompt, str) or prompt.count("<image>") != 1:
        raise ValueError(f"prompt must hold the placeholder '<image>' once, got {prompt!r}")
    say = progress if callable(progress) else (lambda line: None)

    # the data, every image file included, before the model
    objects, image_dir = load_coco_folder(data, split)
    rng = np.random.default_rng(seed)
    ids = [int(i) for i in rng.permutation(sorted(objects))]
    if attr_split is None:
        if len(ids) < n_eval + n_attr:
            raise ValueError(f"{split} has {len(ids)} images, fewer than n_eval + n_attr = {n_eval + n_attr}")
        attr_objects, attr_dir, attr_ids = objects, image_dir, ids[n_eval:n_eval + n_attr]
    else:
        attr_objects, attr_dir = load_coco_folder(data, attr_split)
        pool = [int(i) for i in rng.permutation(sorted(attr_objects))]
        if len(pool) < n_attr:
            raise ValueError(f"{attr_split} has {len(pool)} images, fewer than n_attr = {n_attr}")
        attr_ids = pool[:n_attr]
    if len(ids) < n_eval:
        raise ValueError(f"{split} has {len(ids)} images, fewer than n_eval = {n_eval}")
    eval_ids = ids[:n_eval]
    for objs, folder, chosen in ((objects, image_dir, eval_ids), (attr_objects, attr_dir, attr_ids)):
        missing = [objs.file_names[i] for i in chosen if not (folder / objs.file_names[i]).is_file()]
        if missing:
            raise FileNotFoundError(f"{len(missing)} sampled images are missing from {folder}, e.g. {missing[0]}")

    # the model: class and memory checked before its weights are read
    loaded = load_llava(model, device=device, dtype=dtype, free_bytes=free_bytes)
    vlm = loaded.model
    L, H = _model_shape(vlm)
    if k > L * H // 2:
        raise ValueError(f"k ({k}) must leave room for random heads: at most {L * H // 2} of {L * H} heads")

    def images(objs, folder, chosen):
        for i in chosen:
            with Image.open(folder / objs.file_names[i]) as im:
                yield im.convert("RGB")

    def caption_all(objs, folder, chosen, edit=None):
        return [llava_greedy_caption(loaded, im, prompt, max_new_tokens, edit)
                for im in images(objs, folder, chosen)]

    folds = [list(range(f, n_eval, n_folds)) for f in range(n_folds)]
    truth = [objects[i] for i in eval_ids]
    captions, chairs, fold_chair = {}, {}, {}

    def evaluate(name, edit=None):
        say(f"captioning {n_eval} images: {name}")
        caps = [c.text for c in caption_all(objects, image_dir, eval_ids, edit)]
        captions[name] = caps
        chairs[name] = coco_chair(caps, truth, objects.categories)
        fold_chair[name] = [coco_chair([caps[i] for i in fo], [truth[i] for i in fo], objects.categories)
                            for fo in folds]

    evaluate("greedy")
    say(f"captioning {n_attr} attribution images")
    attr_caps = caption_all(attr_objects, attr_dir, attr_ids)
    attr_truth = [attr_objects[i] for i in attr_ids]
    attr_chair = coco_chair([c.text for c in attr_caps], attr_truth, attr_objects.categories)
    data_tokens = llava_object_tokens(attr_caps, attr_truth, categories=attr_objects.categories)
    if data_tokens.n_hallucinated == 0 or data_tokens.n_real == 0:
        raise ValueError("the attribution captions need both hallucinated and real object tokens: raise n_attr")
    n_kept = len(data_tokens.items)
    say(f"ablating {L * H} heads and {2 * L} modules on {n_kept} hallucinated captions")
    comps = head_components(vlm) + module_components(vlm)
    eff = ablation_effects(vlm, data_tokens, comps)
    hal_tok = data_tokens.hallucinated

    def scores_of(cols):
        e, hmask = eff[:, cols], hal_tok[cols]
        if not hmask.any() or hmask.all():
            raise ValueError("an attribution fold lacks hallucinated or real object tokens: raise n_attr or "
                             "lower n_folds")
        s = e[:, hmask].mean(1) - e[:, ~hmask].mean(1)
        S = s[:L * H].reshape(L, H)
        mod = e[L * H:]
        med = {f"{kind}_{part}": mod[[i for i, c in enumerate(comps[L * H:]) if c[0] == kind]][:, sel].mean(1)
               for kind in ("mha", "mlp") for part, sel in (("hal", hmask), ("real", ~hmask))}
        return S, med

    all_cols = np.arange(hal_tok.size)
    S, mediation = scores_of(all_cols)
    fold_of = data_tokens.caption_index % n_folds
    fold_res = [scores_of(all_cols[fold_of == f]) for f in range(n_folds)]
    hal = top_heads(S, k)
    non = top_heads(S, k, largest=False)
    rr = np.random.default_rng([seed, 162])
    random_sets = [random_heads(rr, k, L, H, exclude=hal) for _ in range(n_random)]

    def adhh(heads):
        return lambda block: hooks.adaptive_deactivation(vlm, heads, tau, text_start=block.stop)

    def reweight(heads):
        return lambda block: hooks.reweight_text(vlm, heads, alpha, text_start=block.stop)

    evaluate("adhh", adhh(hal))
    evaluate("reweight", reweight(hal))
    for j, r in enumerate(random_sets):
        evaluate(f"adhh_random_{j}", adhh(r))
        evaluate(f"reweight_random_{j}", reweight(r))
    return FullScaleResult(source=loaded.source, n_layers=L, n_heads=H, k=k, tau=float(tau), alpha=float(alpha),
                           eval_ids=eval_ids, captions=captions, chair=chairs, fold_chair=fold_chair,
                           attr_chair=attr_chair, scores=S, fold_scores=[f[0] for f in fold_res],
                           mediation=mediation, fold_mediation=[f[1] for f in fold_res], hal_heads=hal,
                           nonhal_heads=non, random_sets=random_sets, n_hal_tokens=data_tokens.n_hallucinated,
                           n_real_tokens=data_tokens.n_real)
