"""Unit tests for companion_lib.tinyvlm (the table-top world and the tiny LLaVA-style model)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaForCausalLM

from companion_lib import tinyvlm as tv
from companion_lib.tinyvlm import world as W


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = tv.TinyVLM(tv.tiny_llama_config())
    m.eval()
    return m


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    split = tv.make_split(6, rng, "natural", occlusion=False)
    ids, labels = tv.caption_batch([tv.encode_caption(s.objects) for s in split.scenes])
    return split, ids, labels, tv.as_patches(split.images)


# -- world --------------------------------------------------------------------------------------
def test_vocabulary_and_pairs():
    assert len(tv.VOCAB) == len(set(tv.VOCAB)) == 16
    assert set(tv.CANONICAL_ORDER) == set(tv.OBJECTS)
    assert tv.CANONICAL_ORDER[-4:] == tv.PARTNERS
    for trig, partner in tv.PAIRS.items():  # a pair shares its colour but not its shape
        a, b = W.glyph(trig), W.glyph(partner)
        assert np.allclose(a.max((0, 1)), b.max((0, 1)))
        assert not np.array_equal(a > 0, b > 0)
    masks = {w: (W.glyph(w).sum(-1) > 0).tobytes() for w in tv.OBJECTS}
    assert len(set(masks.values())) == len(tv.OBJECTS)


def test_render_and_patchify_roundtrip():
    scene = tv.Scene(drawn={0: "fork", 15: "clock"}, mentioned=frozenset({"fork", "clock", "knife"}))
    img = tv.render(scene, noise=0.0)
    assert img.shape == (20, 20, 3)
    p = tv.patchify(img[None])
    assert p.shape == (1, 16, 75)
    np.testing.assert_array_equal(p[0, 0].reshape(5, 5, 3), W.glyph("fork"))
    np.testing.assert_array_equal(p[0, 15].reshape(5, 5, 3), W.glyph("clock"))
    assert np.all(p[0, 1:15] == 0)
    assert scene.objects == {"fork", "clock"}
    assert tv.sketch_tokens(scene)[0] == tv.TOKEN_ID["fork"] and tv.sketch_tokens(scene)[1] == tv.TOKEN_ID["<blank>"]


def test_make_split_renders_as_render_does():
    """make_split's whole-array rendering equals render() image by image, from the same generator state."""
    from companion_lib.tinyvlm.world import _render_all
    for noise, n, chunk in ((0.15, 300, 128), (0.15, 5, 2), (0.0, 7, 3)):
        rng = np.random.default_rng([n, 1])
        scenes = [tv.Scene(drawn={}, mentioned=frozenset())] + [W.sample_scene(rng) for _ in range(n - 1)]
        a, b = np.random.default_rng([n, 2]), np.random.default_rng([n, 2])
        want = np.stack([tv.render(s, a, noise) for s in scenes])
        got = _render_all(scenes, b, noise, chunk)
        assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
        assert a.random() == b.random()  # the generator advanced by the same draws
    split = tv.make_split(40, np.random.default_rng(4))
    rng = np.random.default_rng(4)
    scenes = [W.sample_scene(rng) for _ in range(40)]
    assert [s.drawn for s in scenes] == [s.drawn for s in split.scenes]
    assert np.stack([tv.render(s, rng) for s in scenes]).tobytes() == split.images.tobytes()


def test_captions_are_canonical_and_roundtrip():
    ids = tv.encode_caption({"knife", "fork", "clock"})
    assert [tv.VOCAB[i] for i in ids] == ["describe", "fork", "clock", "knife", ".", "<eos>"]
    assert tv.decode_caption(ids[1:]) == ["fork", "clock", "knife"]


def test_occlusion_statistics():
    rng = np.random.default_rng(1)
    cfg = tv.WorldConfig()
    scenes = [W.sample_scene(rng, cfg) for _ in range(4000)]
    # a mentioned partner of a present trigger is not drawn with probability about p_occluded
    occ = [p not in s.objects for s in scenes for t, p in tv.PAIRS.items() if t in s.objects and p in s.mentioned]
    assert abs(np.mean(occ) - cfg.p_occluded) < 0.05
    assert all(s.objects <= s.mentioned for s in scenes)
    test = [W.sample_scene(rng, cfg, occlusion=False) for _ in range(500)]
    assert all(s.objects == s.mentioned for s in test)
    tri = tv.make_split(200, rng, "trigger_only")
    for s in tri.scenes:
        trig = [w for w in s.objects if w in tv.TRIGGERS]
        assert len(trig) == 1 and tv.PAIRS[trig[0]] not in s.objects


def test_chair_exact_values():
    caps = [["fork", "knife"], ["cup"], ["dog", "frisbee", "car"]]
    truths = [{"fork"}, {"cup", "clock"}, {"dog", "frisbee", "car"}]
    c = tv.chair(caps, truths)
    assert c["chair_s"] == pytest.approx(100 / 3)
    assert c["chair_i"] == pytest.approx(100 / 6)
    assert c["recall"] == pytest.approx(100 * 5 / 6)


def test_world_bad_input():
    with pytest.raises(ValueError, match="unknown object word 'cat'"):
        tv.chair([["cat"]], [{"fork"}])
    with pytest.raises(ValueError, match="captions must not be empty"):
        tv.chair([], [])
    with pytest.raises(ValueError, match="same length"):
        tv.chair([["fork"]], [])
    with pytest.raises(ValueError, match="images must have shape"):
        tv.patchify(np.zeros((2, 16, 16, 3)))
    with pytest.raises(ValueError, match="kind"):
        tv.make_split(3, np.random.default_rng(0), "indoor")
    with pytest.raises(TypeError, match="rng"):
        tv.make_split(3, 0)
    with pytest.raises(ValueError, match="p_occluded"):
        tv.WorldConfig(p_occluded=1.5)
    with pytest.raises(ValueError, match="unknown object word"):
        tv.encode_caption({"cat"})


# -- model --------------------------------------------------------------------------------------
def test_forward_layout(model, batch):
    split, ids, labels, patches = batch
    out = model(ids, patches=patches)
    assert out.logits.shape == (6, tv.TEXT_START + ids.shape[1], len(tv.VOCAB))
    emb = model.embed(ids, patches=patches)
    np.testing.assert_allclose(emb[:, tv.IMAGE_SLICE].detach(), model.image_tokens(patches).detach())
    assert isinstance(model.lm, LlamaForCausalLM) and model.lm.config.tie_word_embeddings
    with pytest.raises(ValueError, match="exactly one"):
        model.embed(ids)


def test_attention_function_matches_eager(model, batch):
    _, ids, _, patches = batch
    ours = model(ids, patches=patches).logits
    eager = tv.TinyVLM(tv.tiny_llama_config())
    eager.load_state_dict(model.state_dict())
    eager.lm.config._attn_implementation = "eager"
    eager.eval()
    np.testing.assert_allclose(ours.detach(), eager(ids, patches=patches).logits.detach(), atol=1e-5)


def test_caption_batch_labels_and_errors():
    ids, labels = tv.caption_batch([[4, 6, 5, 2], [4, 5, 2]])
    assert ids.tolist() == [[4, 6, 5, 2], [4, 5, 2, 0]]
    assert labels.tolist() == [[6, 5, 2, -100], [5, 2, -100, -100]]
    with pytest.raises(ValueError, match="caption 0 is empty"):
        tv.caption_batch([[4]])
    with pytest.raises(ValueError, match="must not be empty"):
        tv.caption_batch([])


def test_caption_batch_equals_a_row_loop_and_the_sampler_table():
    rng = np.random.default_rng(3)
    split = tv.make_split(200, rng, "natural")
    caps = [tv.encode_caption(s.mentioned) for s in split.scenes]

    def loop(captions):  # the definition: pad with <pad>, labels shifted by one, -100 elsewhere
        T = max(len(c) for c in captions)
        ids = torch.full((len(captions), T), tv.TOKEN_ID["<pad>"], dtype=torch.long)
        labels = torch.full((len(captions), T), -100, dtype=torch.long)
        for i, c in enumerate(captions):
            ids[i, :len(c)] = torch.tensor(c)
            labels[i, :len(c) - 1] = torch.tensor(c[1:])
        return ids, labels

    for got, want in zip(tv.caption_batch(caps), loop(caps)):
        assert got.dtype == torch.long and torch.equal(got, want)
    from companion_lib.tinyvlm.train import _Sampler
    sampler = _Sampler(None, caps)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        idx = torch.randint(0, len(caps), (16,), generator=gen)
        for got, want in zip(sampler.batch(idx), loop([caps[i] for i in idx.tolist()])):
            assert got.is_contiguous() and got.shape == want.shape and torch.equal(got, want)
    with pytest.raises(ValueError, match="caption 1 is empty"):
        tv.caption_batch([[4, 5, 2], [4]])


def test_greedy_captions_shapes(model, batch):
    split = batch[0]
    caps = tv.greedy_captions(model, split.images, max_new_tokens=4)
    assert len(caps) == 6 and all(isinstance(c, list) and len(c) <= 4 for c in caps)
    sk = np.array([tv.sketch_tokens(s) for s in split.scenes])
    assert len(tv.greedy_captions(model, sketches=sk, max_new_tokens=3)) == 6
    with pytest.raises(ValueError, match="sketches must have shape"):
        tv.greedy_captions(model, sketches=sk[:, :5])



def test_greedy_cache_matches_full_recompute_under_every_intervention(model, batch):
    """The key-value cache is an implementation detail: captions are identical with and without it,
    plain and under each intervention (attention edits see absolute query positions either way)."""
    split = batch[0]
    images = np.concatenate([split.images] * 3)

    def wipe_image(h):
        h = h.clone()
        h[:, tv.IMAGE_SLICE] *= 0.5
        return h

    contexts = [None, lambda: tv.reweight_text(model, [(0, 1), (2, 3)], 0.0),
                lambda: tv.reweight_image(model, [(1, 0)], 3.0),
                lambda: tv.adaptive_deactivation(model, [(0, 1), (3, 2)], 0.2),
                lambda: tv.head_mask(model, [(0, 1), (2, 3)]), lambda: tv.residual_edit(model, -1, wipe_image),
                lambda: tv.residual_edit(model, 1, wipe_image)]
    for ctx in contexts:
        caps = []
        for use_cache in (False, True):
            if ctx is None:
                caps.append(tv.greedy_captions(model, images, use_cache=use_cache))
            else:
                with ctx():
                    caps.append(tv.greedy_captions(model, images, use_cache=use_cache))
        assert caps[0] == caps[1]
    sk = np.array([tv.sketch_tokens(s) for s in split.scenes])
    assert tv.greedy_captions(model, sketches=sk, use_cache=False) == tv.greedy_captions(model, sketches=sk)


def test_row_wise_edits_see_only_the_new_rows_with_the_same_weights(model, batch):
    """With a key-value cache the book's head edits get the new rows alone (they are marked ``rows``); the
    attention weights are exactly those of the same edit applied to the rows placed in a full map."""
    split = batch[0]
    edits = [lambda: tv.reweight_text(model, [(0, 1), (2, 3)], 0.3), lambda: tv.reweight_image(model, [(1, 0)], 3.0),
             lambda: tv.adaptive_deactivation(model, [(0, 1), (3, 2), (3, 5)], 0.2)]
    for make in edits:
        weights = []
        for rows in (True, False):
            with make():
                if not rows:  # the same edit without the mark: the attention function builds the full map
                    for edit in model.layers[0].self_attn._tinyvlm_edits:
                        edit.rows = False
                with tv.record_attention(model) as rec:
                    caps = tv.greedy_captions(model, split.images)
            weights.append((caps, [a for layer in rec for a in layer]))
        (caps_rows, w_rows), (caps_full, w_full) = weights
        assert caps_rows == caps_full and len(w_rows) == len(w_full) > model.n_layers
        assert all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(w_rows, w_full))


class _Reached(Exception):
    """Raised by a hook once the language model has run: the pass got through on the model's device."""


def test_greedy_captions_decode_where_the_model_is(batch):
    """Issue 37: greedy_captions puts the patches or sketches and the prompt where the model is (a chapter moves
    the model once, e.g. to the GPU). On the meta device (which allocates nothing) a CPU input left behind makes
    the prompt pass raise a device mismatch; a hook stops decoding once the language model has run (a meta
    tensor cannot be read back as tokens)."""
    split = batch[0]
    torch.manual_seed(0)
    meta = tv.TinyVLM(tv.tiny_llama_config()).eval().to("meta")

    def hook(module, args, kwargs, output):
        raise _Reached(kwargs["inputs_embeds"].device, output.logits.device)

    handle = meta.lm.register_forward_hook(hook, with_kwargs=True)
    sk = np.array([tv.sketch_tokens(s) for s in split.scenes])
    try:
        for kw in (dict(images=split.images), dict(images=split.images, use_cache=False), dict(sketches=sk)):
            with pytest.raises(_Reached) as hit:
                tv.greedy_captions(meta, **kw)
            assert [d.type for d in hit.value.args] == ["meta", "meta"], kw
    finally:
        handle.remove()


def test_record_residual_lengths_and_cleanup(model, batch):
    _, ids, _, patches = batch

    def n_hooks():
        return sum(len(l._forward_hooks) + len(l._forward_pre_hooks) for l in model.layers)

    model(ids, patches=patches, output_hidden_states=True)  # Hugging Face installs its own capture hooks once
    before = n_hooks()
    with tv.record_residual(model) as rec:
        out = model(ids, patches=patches, output_hidden_states=True)
    assert len(rec) == model.n_layers + 1
    for l in range(model.n_layers):
        torch.testing.assert_close(rec[l], out.hidden_states[l])
    torch.testing.assert_close(rec[0][:, tv.IMAGE_SLICE], model.image_tokens(patches))
    assert n_hooks() == before


# -- hooks --------------------------------------------------------------------------------------
def test_record_attention_rows_sum_to_one_and_cleanup(model, batch):
    _, ids, _, patches = batch
    with tv.record_attention(model) as rec:
        model(ids, patches=patches)
    assert len(rec) == model.n_layers
    A = rec[0][0]
    assert A.shape == (6, model.n_heads, tv.TEXT_START + ids.shape[1], tv.TEXT_START + ids.shape[1])
    np.testing.assert_allclose(A.sum(-1).detach(), 1.0, atol=1e-5)
    assert torch.all(A.triu(1) == 0)
    assert not any(hasattr(l.self_attn, "_tinyvlm_record") for l in model.layers)


def test_head_mask_zeroes_the_head_slice(model, batch):
    _, ids, _, patches = batch
    seen = {}
    handle = model.layers[1].self_attn.o_proj.register_forward_hook(  # sees the input after pre-hooks
        lambda mod, args, out: seen.__setitem__("z", args[0].detach().clone()))
    try:
        with tv.head_mask(model, [(1, 2)]):
            model(ids, patches=patches)
    finally:
        handle.remove()
    dh = model.layers[1].self_attn.head_dim
    z = seen["z"]
    assert torch.all(z[..., 2 * dh:3 * dh] == 0) and torch.any(z[..., 3 * dh:] != 0)
    assert not model.layers[1].self_attn.o_proj._forward_pre_hooks
    base = model(ids, patches=patches).logits
    with tv.head_mask(model, [(1, 2)], scale=1.0):
        np.testing.assert_allclose(model(ids, patches=patches).logits.detach(), base.detach(), atol=1e-6)


def test_module_ablation_and_mha_sum_of_heads(model, batch):
    _, ids, _, patches = batch
    all_heads = [(0, h) for h in range(model.n_heads)]
    with tv.head_mask(model, all_heads):
        a = model(ids, patches=patches).logits
    with tv.module_ablation(model, 0, "mha"):
        b = model(ids, patches=patches).logits
    np.testing.assert_allclose(a.detach(), b.detach(), atol=1e-5)  # o_proj has no bias
    with tv.module_ablation(model, 2, "mlp"):
        c = model(ids, patches=patches).logits
    assert not torch.allclose(c, model(ids, patches=patches).logits)
    with pytest.raises(ValueError, match="kind"):
        with tv.module_ablation(model, 0, "ffn"):
            pass
    with pytest.raises(ValueError, match="layer index 7 out of range"):
        with tv.module_ablation(model, 7, "mha"):
            pass


def test_reweighting_and_adhh(model, batch):
    _, ids, _, patches = batch
    base = model(ids, patches=patches).logits
    heads = [(0, 1), (3, 4)]
    with tv.reweight_text(model, heads, 1.0):
        np.testing.assert_allclose(model(ids, patches=patches).logits.detach(), base.detach(), atol=1e-6)
    with tv.reweight_text(model, heads, 0.0):
        zero = model(ids, patches=patches).logits
    with tv.adaptive_deactivation(model, heads, 0.0):
        adhh = model(ids, patches=patches).logits
    np.testing.assert_allclose(zero.detach(), adhh.detach(), atol=1e-6)
    with tv.adaptive_deactivation(model, heads, 1.0):  # text mass < 1 whenever an image is seen
        np.testing.assert_allclose(model(ids, patches=patches).logits.detach(), base.detach(), atol=1e-6)
    # the image-block rows are never edited (their text mass is zero by causality)
    np.testing.assert_allclose(zero[:, :tv.TEXT_START].detach(), base[:, :tv.TEXT_START].detach(), atol=1e-6)
    with tv.record_attention(model) as rec, tv.reweight_text(model, [(0, 1)], 0.0):
        model(ids, patches=patches)
    A = rec[0][0]
    assert torch.all(A[:, 1, tv.TEXT_START:, tv.TEXT_START:] == 0)
    assert not any(hasattr(l.self_attn, "_tinyvlm_edits") for l in model.layers)


def test_intervention_bad_input(model):
    with pytest.raises(ValueError, match=r"alpha must lie in \[0, 1\]"):
        with tv.reweight_text(model, [(0, 0)], 1.5):
            pass
    with pytest.raises(ValueError, match="alpha must be >= 1"):
        with tv.reweight_image(model, [(0, 0)], 0.5):
            pass
    with pytest.raises(ValueError, match="head index 8 out of range"):
        with tv.head_mask(model, [(0, 8)]):
            pass
    with pytest.raises(ValueError, match="layer index 4 out of range"):
        tv.check_heads(model, [(4, 0)])
    with pytest.raises(ValueError, match="tau"):
        with tv.adaptive_deactivation(model, [(0, 0)], -0.1):
            pass
    with pytest.raises(ValueError, match="out of range"):
        with tv.residual_edit(model, -2, lambda h: h):
            pass


def test_hooks_clean_up_after_errors(model, batch):
    _, ids, _, patches = batch
    with pytest.raises(RuntimeError):
        with tv.head_mask(model, [(0, 0)]), tv.reweight_text(model, [(0, 0)], 0.0):
            raise RuntimeError("boom")
    assert not model.layers[0].self_attn.o_proj._forward_pre_hooks
    assert not hasattr(model.layers[0].self_attn, "_tinyvlm_edits")


def test_residual_edit(model, batch):
    _, ids, _, patches = batch
    base = model(ids, patches=patches).logits
    for layer in (-1, 0, 3):
        with tv.residual_edit(model, layer, lambda h: h):
            np.testing.assert_allclose(model(ids, patches=patches).logits.detach(), base.detach(), atol=1e-6)

    def wipe_image(h):
        h = h.clone()
        h[:, tv.IMAGE_SLICE] = 0
        return h

    with tv.residual_edit(model, -1, wipe_image):
        a = model(ids, patches=patches).logits
    zero = torch.zeros_like(patches)
    b_inputs = model.embed(ids, patches=patches).detach()
    b_inputs[:, tv.IMAGE_SLICE] = 0
    b = model.lm(inputs_embeds=b_inputs).logits
    np.testing.assert_allclose(a.detach(), b.detach(), atol=1e-5)
    del zero


# -- training (tiny_train_config: tests/conftest.py) -------------------------------------------------
def test_training_is_deterministic_and_staged(tiny_train_config):
    a = tv.train_world(3, tiny_train_config)
    b = tv.train_world(3, tiny_train_config)
    for k in a.final_state:
        torch.testing.assert_close(a.final_state[k], b.final_state[k], rtol=0, atol=0)
    lm_keys = [k for k in a.base_state if k.startswith("lm.")]
    vis_keys = [k for k in a.base_state if not k.startswith("lm.")]
    # alignment trains only the encoder and projector
    assert all(torch.equal(a.base_state[k], a.aligned_state[k]) for k in lm_keys)
    assert any(not torch.equal(a.base_state[k], a.aligned_state[k]) for k in vis_keys)
    # the heads' attention drift from the post-alignment probe: zero at the first probe, one row per probe
    assert a.probe_steps == [0, 2, 3] and a.probe_drift.shape == (3, 4, 8)
    assert np.all(a.probe_drift[0] == 0) and np.all(a.probe_drift[1:] >= 0) and np.any(a.probe_drift[1:] > 0)
    assert len(a.losses["text"]) == 3 and len(a.losses["tune"]) == 3
    c = tv.train_world(4, tiny_train_config)
    assert not torch.equal(a.final_state["lm.model.embed_tokens.weight"], c.final_state["lm.model.embed_tokens.weight"])
    m = tv.build_model(a.final_state, tiny_train_config)
    assert isinstance(m, tv.TinyVLM) and not m.training and not any(p.requires_grad for p in m.parameters())


def test_trained_world_is_cached(tmp_path, monkeypatch, tiny_train_config):
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path))
    a = tv.trained_world(5, tiny_train_config)
    b = tv.trained_world(5, tiny_train_config)
    assert any(tmp_path.rglob("*.pkl")) or any(tmp_path.rglob("output.pkl"))
    for k in a.final_state:
        torch.testing.assert_close(a.final_state[k], b.final_state[k], rtol=0, atol=0)


def test_train_bad_input(tiny_train_config):
    with pytest.raises(ValueError, match="seed"):
        tv.train_world(-1, tiny_train_config)
    with pytest.raises(ValueError, match="batch_size"):
        tv.TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match="divisible"):
        tv.tiny_llama_config(hidden_size=30, n_head=8)


# ---- the same hooks on a real LlavaForConditionalGeneration (issue 39): a tiny random instance, no downloads ----

@pytest.fixture(scope="module")
def llava():
    from transformers import LlavaForConditionalGeneration

    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(tv.tiny_llava_config()).eval()
    n_img = (8 // 4) ** 2
    ids = torch.tensor([[1] + [39] * n_img + [5, 6, 7], [2] + [39] * n_img + [8, 9, 10]])
    pixels = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    return model, ids, pixels


def test_llava_image_tokens_and_book_attention(llava):
    model, ids, pixels = llava
    assert tv.image_token_positions(model, ids).tolist() == [[1, 2, 3, 4]] * 2
    assert tv.image_slice(model, ids) == slice(1, 5)
    with torch.no_grad():
        book = model(input_ids=ids, pixel_values=pixels).logits
        model.set_attn_implementation({"text_config": "eager"})
        eager = model(input_ids=ids, pixel_values=pixels).logits
        tv.use_book_attention(model)
    assert torch.allclose(book, eager, atol=1e-5)            # the book's attention computes the same model
    with pytest.raises(ValueError, match="no image token"):
        tv.image_token_positions(model, torch.tensor([[1, 5, 6]]))
    with pytest.raises(ValueError, match="different numbers"):
        tv.image_token_positions(model, torch.tensor([[39, 39, 5], [39, 5, 6]]))
    with pytest.raises(ValueError, match="one block"):
        tv.image_slice(model, torch.tensor([[39, 5, 39]]))
    with pytest.raises(TypeError, match="LlavaForConditionalGeneration"):
        tv.image_token_positions(torch.nn.Linear(2, 2), ids)
    with pytest.raises(ValueError, match="divisible"):
        tv.tiny_llava_config(hidden_size=15)


def test_llava_hooks_record_edit_and_lens(llava):
    model, ids, pixels = llava
    n_layer, n_head = model.config.text_config.num_hidden_layers, model.config.text_config.num_attention_heads
    with torch.no_grad():
        clean = model(input_ids=ids, pixel_values=pixels).logits
        with tv.record_attention(model) as att, tv.record_residual(model) as res:
            model(input_ids=ids, pixel_values=pixels)
        assert len(att) == n_layer and att[0][0].shape == (2, n_head, ids.shape[1], ids.shape[1])
        assert torch.allclose(att[1][0].sum(-1), torch.ones(2, n_head, ids.shape[1]), atol=1e-5)
        assert len(res) == n_layer + 1
        assert torch.allclose(tv.logit_lens(model, res[-1]), clean, atol=1e-5)   # the lens at the top = logits
        with tv.head_mask(model, [(1, 0)], scale=1.0):
            assert torch.allclose(model(input_ids=ids, pixel_values=pixels).logits, clean, atol=1e-6)
        with tv.head_mask(model, [(1, 0)]):
            masked = model(input_ids=ids, pixel_values=pixels).logits
        assert not torch.allclose(masked, clean, atol=1e-4)
        sl = tv.image_slice(model, ids)
        with tv.reweight_image(model, [(0, 1)], 4.0, image_slice=sl, text_start=sl.stop):
            more_image = model(input_ids=ids, pixel_values=pixels).logits
        assert torch.allclose(more_image[:, :sl.stop], clean[:, :sl.stop], atol=1e-6)  # only text queries edited
        assert not torch.allclose(more_image[:, sl.stop:], clean[:, sl.stop:], atol=1e-4)
        with tv.residual_edit(model, 0, lambda h: h):
            assert torch.allclose(model(input_ids=ids, pixel_values=pixels).logits, clean, atol=1e-6)
    assert not any(len(layer._forward_hooks) for layer in tv.language_model_parts(model)[0])


def test_load_llava_round_trip_and_refusals(tiny_llava, tmp_path):
    import numpy as np
    from PIL import Image
    from transformers import BertConfig, BertForMaskedLM

    folder = tiny_llava(["USER:", "ASSISTANT:", "describe", "the", "image", "dog"])
    loaded = tv.load_llava(folder, device="cpu")
    assert loaded.dtype == torch.float32 and loaded.device == torch.device("cpu")
    assert loaded.model.config.text_config._attn_implementation == tv.ATTN_IMPLEMENTATION
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (16, 16, 3), dtype=np.uint8))
    enc = loaded.processor(images=image, text="USER: <image> describe the image ASSISTANT:", return_tensors="pt")
    assert tv.image_slice(loaded.model, enc["input_ids"]) == slice(1, 5)    # "USER:" (no BOS), then four image tokens
    with torch.no_grad(), tv.record_attention(loaded.model) as att:
        loaded.model(**enc)
    assert len(att) == 2                                                      # the book's attention is in use
    BertForMaskedLM(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=8)).save_pretrained(tmp_path / "bert")
    with pytest.raises(ValueError, match="LlavaForConditionalGeneration"):
        tv.load_llava(tmp_path / "bert", device="cpu")
    with pytest.raises(ValueError, match="cannot load the config"):
        tv.load_llava(tmp_path / "nothing-here", device="cpu")
    with pytest.raises(ValueError, match="GiB free"):
        tv.load_llava(folder, device="cpu", free_bytes=1000)
    with pytest.raises(ValueError, match="dtype"):
        tv.load_llava(folder, device="cpu", dtype="int8")
    with pytest.raises(TypeError, match="hub id"):
        tv.load_llava(3)


# ---- COCO annotations in their real format and CHAIR on free-text captions (companion_lib.tinyvlm.coco) ----

def write_coco(folder):
    """A small instances/captions pair in COCO's real format (the fields CHAIR reads, as in *_val2014.json)."""
    import json

    cats = [{"supercategory": "person", "id": 1, "name": "person"},
            {"supercategory": "animal", "id": 18, "name": "dog"},
            {"supercategory": "furniture", "id": 67, "name": "dining table"},
            {"supercategory": "food", "id": 58, "name": "hot dog"},
            {"supercategory": "animal", "id": 22, "name": "elephant"}]
    images = [{"id": 9, "file_name": "COCO_val2014_000000000009.jpg", "height": 480, "width": 640},
              {"id": 42, "file_name": "COCO_val2014_000000000042.jpg", "height": 480, "width": 640},
              {"id": 73, "file_name": "COCO_val2014_000000000073.jpg", "height": 480, "width": 640}]
    anns = [{"id": 1, "image_id": 9, "category_id": 1, "bbox": [0, 0, 5, 5], "area": 25.0, "iscrowd": 0},
            {"id": 2, "image_id": 9, "category_id": 1, "bbox": [5, 5, 5, 5], "area": 25.0, "iscrowd": 0},
            {"id": 3, "image_id": 9, "category_id": 67, "bbox": [0, 0, 9, 9], "area": 81.0, "iscrowd": 0},
            {"id": 4, "image_id": 42, "category_id": 18, "bbox": [1, 1, 3, 3], "area": 9.0, "iscrowd": 0}]
    caps = [{"id": 11, "image_id": 9, "caption": "Two men eating at a table."},
            {"id": 12, "image_id": 42, "caption": "A puppy lying next to a hot dog."},
            {"id": 13, "image_id": 73, "caption": "A baby elephant walking."}]
    inst, cap = folder / "instances_val2014.json", folder / "captions_val2014.json"
    inst.write_text(json.dumps({"info": {}, "images": images, "annotations": anns, "categories": cats}))
    cap.write_text(json.dumps({"info": {}, "images": images, "annotations": caps}))
    return inst, cap


def test_coco_objects_from_instances_and_captions(tmp_path):
    inst, cap = write_coco(tmp_path)
    objs = tv.load_coco_objects(inst)
    assert dict(objs) == {9: {"person", "dining table"}, 42: {"dog"}, 73: set()}
    assert objs.categories == ("person", "dog", "elephant", "hot dog", "dining table")   # id order
    assert objs.image_path("/coco/val2014", 42).name == "COCO_val2014_000000000042.jpg"
    both = tv.load_coco_objects(inst, cap)            # CHAIR adds what the reference captions mention
    assert both[42] == {"dog", "hot dog"} and both[73] == {"elephant"} and both[9] == objs[9]
    assert both.captions[9] == ("Two men eating at a table.",)


def test_caption_objects_synonyms_plurals_and_phrases():
    co = tv.caption_objects
    assert co("Two men and a woman at a dining table") == ["person", "dining table"]
    assert co("hot dogs on a plate") == ["hot dog"]                   # a two-word name before "dogs"
    assert co("a teddy bear next to a bear") == ["teddy bear", "bear"]
    assert co("a baby elephant and a baby") == ["elephant", "person"]   # "baby" qualifies the animal first
    assert co("KNIVES, forks; a puppy!") == ["knife", "fork", "dog"]
    assert co("a blue sky over the sea") == []
    assert tv.object_mentions("A dog, two Hot Dogs and a dog.") == [("dog", 2, 5), ("hot dog", 11, 19), ("dog", 26, 29)]
    assert co("a dog", categories=["person"]) == []                    # the vocabulary can be narrowed
    assert tv.SYNONYMS.keys() == set(tv.COCO_CATEGORIES) and len(tv.COCO_CATEGORIES) == 80
    with pytest.raises(TypeError, match="string"):
        co(["a dog"])


def test_coco_chair_values_by_hand(tmp_path):
    inst, _ = write_coco(tmp_path)
    objs = tv.load_coco_objects(inst)
    caps = {9: "A man and a dog at a table with a dog.", 42: "A dog.", 73: "An empty room."}
    r = tv.coco_chair(caps, objs)
    # mentions: {person, dog, dining table} (dog hallucinated), {dog}, {} -> 1 of 4 mentions, 1 of 3 captions
    assert r["mentions"] == [["person", "dog", "dining table"], ["dog"], []]
    assert r["hallucinated"] == [["dog"], [], []] and r["ids"] == [9, 42, 73]
    assert r["chair_i"] == pytest.approx(25.0) and r["chair_s"] == pytest.approx(100 / 3)
    assert r["recall"] == pytest.approx(100.0) and (r["n"], r["n_mentions"], r["n_hallucinated"]) == (3, 4, 1)
    seq = tv.coco_chair(["a cat", "two cats and a person"], [set(), {"cat", "person"}])
    assert (seq["chair_s"], seq["chair_i"], seq["recall"]) == (50.0, pytest.approx(100 / 3), 100.0)
    assert tv.coco_chair(["nothing here"], [{"dog"}])["chair_i"] == 0.0   # no mentions: rate 0, recall 0
    assert tv.chair is W.chair                                         # the world's exact CHAIR is unchanged


def test_coco_wrong_format_and_bad_input(tmp_path):
    import json

    inst, cap = write_coco(tmp_path)
    with pytest.raises(FileNotFoundError, match="instances_val2014"):
        tv.load_coco_objects(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(ValueError, match="not JSON"):
        tv.load_coco_objects(bad)
    bad.write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match="JSON object"):
        tv.load_coco_objects(bad)
    bad.write_text(json.dumps({"images": [], "annotations": []}))
    with pytest.raises(ValueError, match="'categories'"):
        tv.load_coco_objects(bad)
    bad.write_text(json.dumps({"images": [{"id": 1}], "annotations": [], "categories": []}))
    with pytest.raises(ValueError, match="file_name"):
        tv.load_coco_objects(bad)
    data = json.loads(inst.read_text())
    data["annotations"].append({"image_id": 5, "category_id": 1})
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="image 5"):
        tv.load_coco_objects(bad)
    with pytest.raises(ValueError, match="needs the fields"):     # an instances file given as captions
        tv.load_coco_objects(inst, inst)
    with pytest.raises(ValueError, match="same length"):
        tv.coco_chair(["a dog"], [])
    with pytest.raises(ValueError, match="not categories"):
        tv.coco_chair(["a dog"], [{"doggo"}])
    with pytest.raises(TypeError, match="set of category names"):
        tv.coco_chair(["a dog"], ["dog"])
    with pytest.raises(ValueError, match="no ground truth"):
        tv.coco_chair({1: "a dog"}, {2: {"dog"}})
    with pytest.raises(ValueError, match="empty"):
        tv.coco_chair([], [])


def test_coco_folder_layout(tmp_path):
    (tmp_path / "annotations").mkdir()
    with pytest.raises(FileNotFoundError, match="instances_val2014.json"):
        tv.load_coco_folder(tmp_path)
    inst, cap = write_coco(tmp_path / "annotations")
    with pytest.raises(FileNotFoundError, match="image folder"):
        tv.load_coco_folder(tmp_path)
    (tmp_path / "val2014").mkdir()
    objs, image_dir = tv.load_coco_folder(tmp_path)
    assert image_dir == tmp_path / "val2014" and objs[73] == {"elephant"}     # captions found beside instances
    cap.unlink()
    assert tv.load_coco_folder(tmp_path)[0][73] == set()
    with pytest.raises(TypeError, match="folder of COCO"):
        tv.load_coco_folder(None)
