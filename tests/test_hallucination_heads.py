"""Unit tests for companion_lib.hallucination_heads (Yang et al., ICLR 2025)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion_lib import hallucination_heads as hh
from companion_lib import tinyvlm as tv


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(1)
    m = tv.TinyVLM(tv.tiny_llama_config())
    m.eval()
    return m


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(2)
    split = tv.make_split(8, rng, "trigger_only")
    # hand-made captions: the trigger plus its (absent) partner, so every caption has a hallucination
    caps = []
    for s in split.scenes:
        words = sorted(s.objects, key=tv.CANONICAL_ORDER.index)
        trig = [w for w in words if w in tv.TRIGGERS][0]
        caps.append(words + [tv.PAIRS[trig]])
    return split, caps, hh.object_tokens(split.images, caps, split.truth)


def test_object_tokens_marks_hallucinations(data):
    split, caps, d = data
    assert d.n_hallucinated == 8
    assert d.n_real == sum(len(c) - 1 for c in caps)
    for r, cap in enumerate(caps):
        assert d.mask[r, :len(cap)].all() and not d.mask[r, len(cap):].any()  # '.' is not an object
        assert d.hallucinated[r, len(cap) - 1] and not d.hallucinated[r, :len(cap) - 1].any()
    clean = [sorted(s.objects) for s in split.scenes]
    with pytest.raises(ValueError, match="no caption qualifies"):
        hh.object_tokens(split.images, clean, split.truth)
    assert hh.object_tokens(split.images, clean, split.truth, only_hallucinated_captions=False).n_hallucinated == 0
    with pytest.raises(ValueError, match="unknown object word"):
        hh.object_tokens(split.images[:1], [["cat"]], split.truth[:1])
    with pytest.raises(ValueError, match="same length"):
        hh.object_tokens(split.images, caps[:2], split.truth)


def test_token_probs_and_effects(model, data):
    _, _, d = data
    p = hh.token_probs(model, d)
    assert p.shape == d.ids.shape and np.all((p > 0) & (p <= 1))
    comps = [("head", 0, 0), ("mha", 1), ("mlp", 2)]
    eff = hh.ablation_effects(model, d, comps)
    assert eff.shape == (3, int(d.mask.sum()))
    # the effect of a head is the drop of probability when that head alone is zeroed
    with tv.head_mask(model, [(0, 0)]):
        p0 = hh.token_probs(model, d)
    np.testing.assert_allclose(eff[0], (p - p0)[d.mask], atol=1e-7)
    with pytest.raises(ValueError, match="unknown component"):
        hh.ablation_effects(model, d, [("ffn", 0)])


def test_ablation_effects_resume_exactly_as_full_ablated_passes(model, data):
    """Each ablated pass resumes at the component's layer from the clean residual stream; the numbers are
    those of a full forward pass under the same ablation, bit for bit, at every layer and kind."""
    _, _, d = data
    comps = [("head", 0, 3), ("head", 1, 0), ("head", 3, 7), ("mha", 0), ("mlp", 2), ("mha", 3), ("mlp", 3)]
    eff = hh.ablation_effects(model, d, comps)
    base = hh.token_probs(model, d)[d.mask]
    for row, comp in zip(eff, comps):
        ctx = tv.head_mask(model, [comp[1:]]) if comp[0] == "head" else tv.module_ablation(model, comp[1], comp[0])
        assert np.array_equal(row, base - hh.token_probs(model, d, ctx)[d.mask]), comp
    with pytest.raises(ValueError, match="out of range"):
        hh.ablation_effects(model, d, [("head", -1, 0)])
    with pytest.raises(ValueError, match="out of range"):
        hh.ablation_effects(model, d, [("mlp", 4)])


def test_head_scores_are_contrastive(model, data):
    _, _, d = data
    S = hh.head_scores(model, d)
    assert S.shape == (model.n_layers, model.n_heads)
    eff = hh.ablation_effects(model, d, hh.head_components(model))
    hal = d.hallucinated[d.mask]
    np.testing.assert_allclose(S.ravel(), eff[:, hal].mean(1) - eff[:, ~hal].mean(1))
    med = hh.module_mediation(model, d)
    assert set(med) == {"mha_hal", "mlp_hal", "mha_real", "mlp_real"} and med["mha_hal"].shape == (4,)


def test_top_and_random_heads():
    S = np.zeros((4, 8))
    S[2, 5], S[0, 1], S[3, 3] = 3.0, 2.0, -1.0
    assert hh.top_heads(S, 2) == [(2, 5), (0, 1)]
    assert hh.top_heads(S, 1, largest=False) == [(3, 3)]
    with pytest.raises(ValueError, match="k must be"):
        hh.top_heads(S, 0)
    with pytest.raises(ValueError, match="scores must be"):
        hh.top_heads(S.ravel(), 2)
    rng = np.random.default_rng(0)
    r = hh.random_heads(rng, 5, 4, 8, exclude=[(2, 5), (0, 1)])
    assert len(set(r)) == 5 and (2, 5) not in r and (0, 1) not in r
    with pytest.raises(ValueError, match="k must be"):
        hh.random_heads(rng, 40, 4, 8)


def test_attention_mass_is_a_share(model, data):
    _, _, d = data
    am = hh.attention_mass(model, d)
    total = am["image"] + am["text"]
    assert am["image"].shape == (4, 8)
    assert np.all(total <= 1 + 1e-6) and np.all(total > 0)  # the rest goes to <bos>
    hal = hh.attention_mass(model, d, tokens="hallucinated")
    assert hal["text"].shape == (4, 8)
    with pytest.raises(ValueError, match="tokens"):
        hh.attention_mass(model, d, tokens="some")


def test_attention_similarity_range(model, data):
    split, _, d = data
    sk = torch.tensor([tv.sketch_tokens(s) for s in split.scenes])
    sim = hh.attention_similarity(model, model, d, sk)
    assert sim.shape == (4, 8) and np.all(sim > 0) and np.all(sim <= 1 + 1e-6)
    with pytest.raises(ValueError, match="sketch_ids"):
        hh.attention_similarity(model, model, d, sk[:, :4])


def test_js_divergence_properties():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(5), size=3)
    q = rng.dirichlet(np.ones(5), size=3)
    js = hh.js_divergence(p, q)
    np.testing.assert_allclose(js, hh.js_divergence(q, p))
    np.testing.assert_allclose(hh.js_divergence(p, p), 0, atol=1e-12)
    assert np.all(js >= 0) and np.all(js <= np.log(2))
    np.testing.assert_allclose(hh.js_divergence(np.array([1.0, 0]), np.array([0, 1.0])), np.log(2))
    with pytest.raises(ValueError, match="same shape"):
        hh.js_divergence(p, q[:2])
    att = [np.tile(np.eye(24)[None, None, None], (2, 3, 2, 1, 1)) for _ in range(2)]
    att[1] = att[1].copy()
    att[1][0, :, 1] = 1.0 / 24
    drift = hh.js_drift(att, [4, 4, 4])
    assert drift.shape == (2, 2, 2)
    assert np.all(drift[0] == 0) and drift[1, 0, 1] > 0 and drift[1, 1, 1] == 0
    # defined once, with the training loop that records it (World.probe_drift)
    assert hh.js_drift is tv.train.js_drift and hh.js_divergence is tv.train.js_divergence


def test_targeted_finetune_touches_only_chosen_rows(model, data):
    split, caps, _ = data
    ids = [tv.encode_caption(s.objects) for s in split.scenes]
    tuned, losses = hh.targeted_finetune(model, [(1, 3)], split.images, ids, steps=3, batch_size=4)
    assert len(losses) == 3
    before, after = model.state_dict(), tuned.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert sorted(changed) == ["lm.model.layers.1.self_attn.k_proj.weight", "lm.model.layers.1.self_attn.q_proj.weight"]
    dh = model.layers[1].self_attn.head_dim
    diff = (after["lm.model.layers.1.self_attn.q_proj.weight"] - before["lm.model.layers.1.self_attn.q_proj.weight"]).abs().sum(1)
    assert torch.all(diff[3 * dh:4 * dh] > 0) and torch.all(diff[:3 * dh] == 0) and torch.all(diff[4 * dh:] == 0)
    with pytest.raises(ValueError, match="head index"):
        hh.targeted_finetune(model, [(1, 9)], split.images, ids, steps=1)
    with pytest.raises(ValueError, match="steps"):
        hh.targeted_finetune(model, [(1, 3)], split.images, ids, steps=0)


def test_caption_chair_and_reduction(model, data):
    split, _, _ = data
    caps, c = hh.caption_chair(model, split.images, split.truth)
    assert len(caps) == 8 and set(c) == {"chair_s", "chair_i", "recall", "n"}
    assert hh.relative_reduction(20.0, 15.0) == pytest.approx(0.25)
    assert hh.relative_reduction(0.0, 3.0) == 0.0


def test_choose_tau_and_head_mean():
    base = {"chair_s": 40.0, "chair_i": 14.0, "recall": 99.0}
    sweep = {0.0: {"chair_s": 20.0, "recall": 95.0}, 0.2: {"chair_s": 25.0, "recall": 98.5},
             0.4: {"chair_s": 25.0, "recall": 99.0}, 0.6: {"chair_s": 38.0, "recall": 99.0}}
    assert hh.choose_tau(sweep, base) == 0.4          # 0.0 loses too much recall; ties go to the larger tau
    assert hh.choose_tau(sweep, base, max_recall_drop=5.0) == 0.0
    with pytest.raises(ValueError, match="no tau"):
        hh.choose_tau({0.0: {"chair_s": 1.0, "recall": 50.0}}, base)
    values = np.arange(32.0).reshape(4, 8)
    assert hh.head_mean(values, [(0, 1), (3, 7)]) == pytest.approx((1 + 31) / 2)


def test_attention_loss_lowers_the_chosen_heads_text_mass(model, data):
    # TF-HH's attention term alone (no cross-entropy) must lower the non-image mass of the chosen head
    split, _, _ = data
    ids = [tv.encode_caption(s.objects) for s in split.scenes]
    head = (2, 5)

    def text_mass(m):
        x, labels = tv.caption_batch(ids)
        with torch.no_grad(), tv.record_attention(m) as rec:
            m(x, patches=tv.as_patches(split.images))
        A = rec[head[0]][0][:, head[1], tv.TEXT_START:, :]
        non_image = torch.ones(A.shape[-1], dtype=torch.bool)
        non_image[tv.IMAGE_SLICE] = False
        return float(A[..., non_image].sum(-1)[labels != -100].mean())

    tuned, losses = hh.targeted_finetune(model, [head], split.images, ids, steps=10, batch_size=8, lam_ce=0.0)
    assert text_mass(tuned) < text_mass(model) - 1e-3
    assert losses[-1] < losses[0]
    # with lambda_att = 0 the same call is plain cross-entropy tuning of the same rows (the page's control)
    ce_tuned, _ = hh.targeted_finetune(model, [head], split.images, ids, steps=3, batch_size=8, lam_att=0.0)
    assert not torch.equal(ce_tuned.layers[2].self_attn.q_proj.weight, model.layers[2].self_attn.q_proj.weight)


def test_reweight_with_alpha_one_is_the_identity(model, data):
    # run_experiment reuses the plain captions' CHAIR for alpha = 1
    split, _, _ = data
    with tv.reweight_text(model, [(0, 1), (3, 2)], 1.0):
        caps = tv.greedy_captions(model, split.images)
    assert caps == tv.greedy_captions(model, split.images)


def test_run_experiment_refuses_a_non_positive_tau():
    # tau = 0 would make AD-HH the alpha = 0 re-weighting (Fig. 6a), not an adaptive intervention
    with pytest.raises(ValueError, match="tau must be positive"):
        hh.run_experiment(None, tau=0.0)


# -- issue 37: the models run on a device argument (the GPU when present) -----------------------------------
def _same(a, b) -> bool:
    """Exact equality of nested results (dicts, lists, tuples, arrays, tensors, numbers)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return a == b


def test_an_explicit_cpu_device_gives_the_same_numbers():
    """run_experiment captions, ablates, intervenes and tunes on ``device`` (default: the GPU when present); on
    the CPU, passing device="cpu" explicitly changes nothing, bit for bit."""
    import dataclasses

    world = tv.trained_world(0)   # a shipped checkpoint: loaded, not trained
    kw = dict(n_natural=4, n_trigger=6, n_attr=6, n_random=1, alphas=(1.0, 0.0), tfhh_steps=1, tfhh_batch=2,
              n_tfhh=4, n_similarity=3)
    a, b = hh.run_experiment(world, **kw), hh.run_experiment(world, device="cpu", **kw)
    assert a.n_hal_tokens > 0 and a.n_real_tokens > 0
    for f in dataclasses.fields(hh.Experiment):
        assert _same(getattr(a, f.name), getattr(b, f.name)), f.name


class _Reached(Exception):
    """Raised by a hook once the language model has run: the pass got through on the model's device."""


def _stop_after_lm(model):
    def hook(module, args, kwargs, output):
        raise _Reached(kwargs["inputs_embeds"].device)
    return model.lm.register_forward_hook(hook, with_kwargs=True)


def test_inputs_follow_the_model_to_its_device(data):
    """On the meta device (which allocates nothing), a CPU input left behind makes the forward pass raise a
    device mismatch: every function that receives a model must move its inputs to the model's device. A hook
    stops each call once the language model has run there (a meta tensor cannot be read back as numbers)."""
    split, caps, d = data
    torch.manual_seed(1)
    meta = tv.TinyVLM(tv.tiny_llama_config()).eval().requires_grad_(False).to("meta")
    plain = tv.TinyVLM(tv.tiny_llama_config()).eval().requires_grad_(False).to("meta")
    handle = _stop_after_lm(meta)
    calls = {"token_probs": lambda: hh.token_probs(meta, d),
             "ablation_effects": lambda: hh.ablation_effects(meta, d, [("head", 0, 1)]),
             "attention_mass": lambda: hh.attention_mass(meta, d),
             "caption_chair": lambda: hh.caption_chair(meta, split.images, split.truth),
             # the base LM (second model) must read its sketches where it is, after the VLM ran on meta
             "attention_similarity": lambda: hh.attention_similarity(
                 plain, meta, d, torch.tensor([tv.sketch_tokens(s) for s in split.scenes])),
             # the tuned copy (it carries the hook) trains where the model is
             "targeted_finetune": lambda: hh.targeted_finetune(
                 meta, [(1, 3)], split.images, [tv.encode_caption(s.objects) for s in split.scenes], steps=1,
                 batch_size=4)}
    try:
        for name, call in calls.items():
            with pytest.raises(_Reached) as hit:
                call()
            assert hit.value.args[0].type == "meta", name
    finally:
        handle.remove()


# ---- at full scale (issue 39): a real LlavaForConditionalGeneration (tiny, random) and COCO's real format ----

LLAVA_WORDS = ["USER:", "ASSISTANT:", "Please", "describe", "this", "image", "in", "detail.", "a", "dog", "cat",
               "man", "table", "and"]
COCO_CATS = [{"supercategory": "person", "id": 1, "name": "person"},
             {"supercategory": "animal", "id": 17, "name": "cat"},
             {"supercategory": "animal", "id": 18, "name": "dog"},
             {"supercategory": "furniture", "id": 67, "name": "dining table"}]


def write_coco_folder(root, n_images: int = 12, seed: int = 0):
    """COCO's layout with a small instances/captions pair in the real format and tiny JPEG images."""
    import json

    from PIL import Image

    rng = np.random.default_rng(seed)
    (root / "annotations").mkdir(parents=True)
    (root / "val2014").mkdir()
    images, anns, caps = [], [], []
    for i in range(n_images):
        name = f"COCO_val2014_{i:012d}.jpg"
        Image.fromarray(rng.integers(0, 255, (12, 12, 3), dtype=np.uint8)).save(root / "val2014" / name)
        images.append({"id": i, "file_name": name, "height": 12, "width": 12})
        for c in COCO_CATS:
            if rng.random() < 0.5:
                anns.append({"id": len(anns), "image_id": i, "category_id": c["id"], "bbox": [0, 0, 1, 1],
                             "area": 1.0, "iscrowd": 0})
        caps.append({"id": i, "image_id": i, "caption": "A photo."})
    (root / "annotations" / "instances_val2014.json").write_text(
        json.dumps({"images": images, "annotations": anns, "categories": COCO_CATS}))
    (root / "annotations" / "captions_val2014.json").write_text(json.dumps({"images": images, "annotations": caps}))
    return root


@pytest.fixture
def llava(tiny_llava):
    return tv.load_llava(tiny_llava(LLAVA_WORDS), device="cpu")


def _image(seed=0):
    from PIL import Image

    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (12, 12, 3), dtype=np.uint8))


def test_llava_greedy_caption_with_cache_equals_uncached_under_adhh(llava):
    for edit in (None, lambda b: tv.adaptive_deactivation(llava.model, [(0, 0), (1, 1)], 0.0, text_start=b.stop),
                 lambda b: tv.reweight_text(llava.model, [(1, 0)], 0.0, text_start=b.stop)):
        cached = hh.llava_greedy_caption(llava, _image(), max_new_tokens=10, edit=edit)
        full = hh.llava_greedy_caption(llava, _image(), max_new_tokens=10, edit=edit, use_cache=False)
        assert torch.equal(cached.input_ids, full.input_ids) and cached.text == full.text
    assert cached.image_block == slice(1, 5) and cached.input_ids.shape[1] == cached.prompt_len + 10
    assert cached.token_ends == sorted(cached.token_ends) and cached.token_ends[-1] == len(cached.text)
    assert tv.image_token_positions(llava.model, cached.input_ids).shape == (1, 4)   # no image token emitted
    plain = hh.llava_greedy_caption(llava, _image(), max_new_tokens=10)
    assert not torch.equal(plain.input_ids, hh.llava_greedy_caption(  # AD-HH at tau = 0 changes the caption
        llava, _image(), max_new_tokens=10,
        edit=lambda b: tv.adaptive_deactivation(llava.model, [(0, 0), (0, 1), (1, 0), (1, 1)], 0.0,
                                                text_start=b.stop)).input_ids)
    for layer in tv.language_model_parts(llava.model)[0]:
        assert not hasattr(layer.self_attn, "_tinyvlm_edits") and not layer.self_attn.o_proj._forward_pre_hooks
    with pytest.raises(ValueError, match="max_new_tokens"):
        hh.llava_greedy_caption(llava, _image(), max_new_tokens=0)


def test_llava_object_tokens_point_at_the_object_words(llava):
    caps = [hh.llava_greedy_caption(llava, _image(s), max_new_tokens=12) for s in range(4)]
    tok = llava.processor.tokenizer
    data = hh.llava_object_tokens(caps, [{"dog"}, {"cat"}, set(), {"person"}], only_hallucinated_captions=False)
    assert data.hallucinated.size == sum(len(p) for _, p, _ in data.items) == len(data.categories) > 0
    names = {"dog": "dog", "cat": "cat", "person": "man", "dining table": "table"}
    for (cap, pos, labels), i in zip(data.items, range(len(data.items))):
        for p, lab, cat in zip(pos, labels, [c for c, j in zip(data.categories, data.caption_index) if j == i]):
            assert int(cap.input_ids[0, p]) == int(lab) and tok.decode([int(lab)]) == names[cat]
    with pytest.raises(ValueError, match="same length"):
        hh.llava_object_tokens(caps, [])


def test_llava_ablation_resumes_exactly_as_full_ablated_passes(llava):
    caps = [hh.llava_greedy_caption(llava, _image(s), max_new_tokens=12) for s in range(4)]
    data = hh.llava_object_tokens(caps, [{"dog"}, {"cat"}, set(), {"person"}], only_hallucinated_captions=False)
    comps = hh.head_components(llava.model) + hh.module_components(llava.model)
    assert len(comps) == 2 * 2 + 2 * 2
    eff = hh.ablation_effects(llava.model, data, comps)
    assert eff.shape == (len(comps), data.hallucinated.size)
    cap, pos, labels = data.items[0]
    rows = torch.arange(len(pos))

    def probs():
        logits = llava.model(input_ids=cap.input_ids, pixel_values=cap.pixel_values).logits
        return torch.softmax(logits[0, pos - 1].float(), -1)[rows, labels]

    with torch.no_grad():
        clean = probs()
        for i, comp in enumerate(comps):
            with hh._context(llava.model, comp):
                ablated = probs()
            assert np.allclose(eff[i, :len(pos)], (clean - ablated).numpy(), atol=1e-6)
    assert not any(layer._forward_hooks or layer.self_attn.o_proj._forward_pre_hooks
                   for layer in tv.language_model_parts(llava.model)[0])
    if data.n_hallucinated and data.n_real:
        assert hh.head_scores(llava.model, data).shape == (2, 2)
        assert hh.module_mediation(llava.model, data)["mha_hal"].shape == (2,)


def test_full_scale_on_a_tiny_llava_and_coco(tiny_llava, tmp_path):
    folder = tiny_llava(LLAVA_WORDS)
    coco = write_coco_folder(tmp_path / "coco")
    lines = []
    r = hh.full_scale(folder, coco, n_eval=4, n_attr=6, k=1, n_folds=2, max_new_tokens=8, device="cpu",
                      progress=lines.append)
    assert set(r.captions) == {"greedy", "adhh", "reweight", "adhh_random_0", "reweight_random_0"}
    assert all(len(c) == 4 for c in r.captions.values()) and len(r.eval_ids) == 4
    assert r.scores.shape == (2, 2) and len(r.fold_scores) == 2 and r.hal_heads == hh.top_heads(r.scores, 1)
    assert r.hal_heads[0] not in r.random_sets[0]
    g = r.chair["greedy"]
    assert g == tv.coco_chair(r.captions["greedy"], [tv.load_coco_objects(
        coco / "annotations/instances_val2014.json", coco / "annotations/captions_val2014.json")[i]
        for i in r.eval_ids])
    values = r.claim_values()
    assert set(values) == {"head_effect", "few_heads", "location", "mha_mlp", "reweight", "reweight_random",
                           "reweight_recall", "adhh", "adhh_vs_random", "adhh_recall"}
    assert all(len(v) == 2 and (b is None or len(b) == 2) for v, b in values.values())
    assert lines[0].startswith("captioning") and any("ablating" in line for line in lines)


def test_full_scale_refuses_bad_input_before_reading_weights(tiny_llava, tmp_path, monkeypatch):
    import json

    import transformers
    from transformers import BertConfig, BertForMaskedLM

    folder = tiny_llava(LLAVA_WORDS)
    coco = write_coco_folder(tmp_path / "coco")
    BertForMaskedLM(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=8)).save_pretrained(tmp_path / "bert")

    def no_weights(*a, **kw):
        raise AssertionError("weights were read before the input was checked")

    monkeypatch.setattr(transformers.LlavaForConditionalGeneration, "from_pretrained", no_weights)
    kw = dict(n_eval=4, n_attr=6, k=1, n_folds=2, device="cpu")
    with pytest.raises(ValueError, match="LlavaForConditionalGeneration"):        # unsupported class
        hh.full_scale(tmp_path / "bert", coco, **kw)
    with pytest.raises(ValueError, match="cannot load the config"):              # does not load
        hh.full_scale(tmp_path / "nothing", coco, **kw)
    with pytest.raises(ValueError, match="GiB free"):                             # too large for the device
        hh.full_scale(folder, coco, free_bytes=1000, **kw)
    with pytest.raises(FileNotFoundError, match="instances_val2014.json"):       # not COCO's layout
        hh.full_scale(folder, tmp_path, **kw)
    with pytest.raises(TypeError, match="COCO 2014"):
        hh.full_scale(folder, None, **kw)
    inst = coco / "annotations" / "instances_val2014.json"
    good = inst.read_text()
    inst.write_text(json.dumps({"images": [], "annotations": []}))               # wrong format
    with pytest.raises(ValueError, match="'categories'"):
        hh.full_scale(folder, coco, **kw)
    inst.write_text(good)
    (coco / "val2014" / "COCO_val2014_000000000003.jpg").unlink()                # a sampled image is missing
    with pytest.raises(FileNotFoundError, match="missing"):
        hh.full_scale(folder, coco, **{**kw, "n_attr": 8})
    with pytest.raises(ValueError, match="fewer than"):
        hh.full_scale(folder, coco, n_eval=10, n_attr=10, device="cpu")
    for bad, match in (({"tau": 0.0}, "tau"), ({"n_folds": 1}, "n_folds"), ({"alpha": 1.0}, "alpha"),
                       ({"prompt": "describe"}, "<image>")):
        with pytest.raises(ValueError, match=match):
            hh.full_scale(folder, coco, **{**kw, **bad})


@pytest.mark.slow
def test_reproduce_page_runs_at_full_scale_on_a_tiny_llava(tiny_llava, run_reproduce, tmp_path):
    """The reproduce page end to end with model = a tiny LLaVA folder and data = a small COCO folder, the
    tiny worlds at minimal sizes: the full-scale claims table is produced with its declared rows."""
    import json
    import os
    from pathlib import Path

    md = Path(__file__).resolve().parents[1] / "chapters" / "16-hallucination-heads" / "reproduce.md"
    params = {"model": str(tiny_llava(LLAVA_WORDS)), "data": str(write_coco_folder(tmp_path / "coco")),
              "seeds": [0, 1], "n_natural": 40, "n_trigger": 40, "n_attr": 40, "n_random": 1, "tfhh_steps": 5,
              "tfhh_batch": 4, "n_tfhh": 8, "full_n_eval": 4, "full_n_attr": 6, "full_k": 1, "full_folds": 2,
              "max_new_tokens": 8}
    _, table, error = run_reproduce(md, params, "full-scale", checks_off_before="At full scale")
    assert error is None, error
    assert table["chapter"] == "16-hallucination-heads-full-scale"
    rows = {c["key"]: c for c in table["claims"]}
    assert set(rows) == {"head_effect", "few_heads", "location", "mha_mlp", "reweight", "reweight_random",
                         "reweight_recall", "adhh", "adhh_vs_random", "adhh_recall", "tfhh", "inherit_drift"}
    assert rows["tfhh"]["outcome"] == "not run" and rows["adhh"]["n"] == 2
    written = Path(os.environ["BOOK_CLAIMS_DIR"]) / "16-hallucination-heads-full-scale.json"
    assert json.loads(written.read_text())["chapter"] == "16-hallucination-heads-full-scale"
