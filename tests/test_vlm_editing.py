"""Unit tests for companion_lib.vlm_editing (logit lens of image tokens and ProjectAway)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from companion_lib import tinyvlm as tv
from companion_lib import vlm_editing as ve


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = tv.TinyVLM(tv.tiny_llama_config())
    m.eval()
    m.requires_grad_(False)
    return m


@pytest.fixture(scope="module")
def split():
    return tv.make_split(5, np.random.default_rng(0), "natural", occlusion=False)


def test_object_token_and_bad_word():
    assert ve.object_token("fork") == tv.TOKEN_ID["fork"]
    with pytest.raises(ValueError, match="word 'cat'"):
        ve.object_token("cat")


def test_record_residual_is_tinyvlms():
    # the recorder lives once in tinyvlm (tests/test_tinyvlm.py checks it against hidden_states and
    # that it removes its hooks); chapter 17 uses it through this re-export
    assert ve.record_residual is tv.record_residual


def test_lens_confidence_shape_and_final_layer(model, split):
    conf = ve.lens_confidence(model, split.images)
    assert conf.shape == (5, model.n_layers + 1, 16, 10)
    assert np.all(conf >= 0) and np.all(conf <= 1)
    # at the last lens layer the lens is the model's own next-token distribution at the image positions
    patches = tv.as_patches(split.images)
    ids = torch.full((5, 1), tv.TOKEN_ID["describe"])
    probs = torch.softmax(model(ids, patches=patches).logits[:, tv.IMAGE_SLICE], -1)[..., ve.lens.OBJECT_IDS]
    np.testing.assert_allclose(conf[:, -1], probs.numpy(), atol=1e-5)
    cmax = ve.internal_confidence(conf)
    np.testing.assert_allclose(cmax, conf.max(axis=(1, 2)))
    np.testing.assert_allclose(ve.internal_confidence(conf, 0), conf[:, 0].max(axis=1))
    with pytest.raises(ValueError, match="layers entry 9"):
        ve.internal_confidence(conf, 9)
    with pytest.raises(ValueError, match="conf must have shape"):
        ve.internal_confidence(conf[0])


def test_auroc_matches_sklearn():
    rng = np.random.default_rng(1)
    pos, neg = rng.normal(1, 1, 40), rng.normal(0, 1, 30)
    pos[:3] = neg[:3]  # ties
    y = np.r_[np.ones(40), np.zeros(30)]
    assert ve.auroc(pos, neg) == pytest.approx(roc_auc_score(y, np.r_[pos, neg]))
    with pytest.raises(ValueError, match="positives and negatives"):
        ve.auroc([], [1.0])


def test_threshold_and_detection():
    real = np.linspace(0, 1, 101)
    assert ve.calibrate_threshold(real, 0.1) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="no real generated objects"):
        ve.calibrate_threshold([], 0.02)
    with pytest.raises(ValueError, match="q must lie"):
        ve.calibrate_threshold(real, 1.5)
    r = ve.detection_rates(real, np.array([0.05, 0.5]), 0.1)
    assert r["hal_flagged"] == 0.5 and r["real_flagged"] == pytest.approx(10 / 101)


def test_object_scores_split():
    cm = np.zeros((2, 10)); cm[0, tv.OBJECTS.index("fork")] = 0.9; cm[0, tv.OBJECTS.index("knife")] = 0.2
    real, hal = ve.object_scores(cm, [["fork", "knife"], []], [{"fork"}, {"cup"}])
    assert real.tolist() == [0.9] and hal.tolist() == [0.2]


def test_object_scores_count_each_object_once_in_caption_order():
    cm = np.zeros((1, 10))
    words = ["spoon", "cup", "fork", "knife"]
    for k, w in enumerate(words):
        cm[0, tv.OBJECTS.index(w)] = 0.1 * (k + 1)
    real, hal = ve.object_scores(cm, [words + ["cup"]], [set(words)])
    assert real.tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4]) and hal.size == 0


def test_localisation_on_a_planted_map():
    scenes = [tv.Scene(drawn={3: "fork", 12: "cup"}, mentioned=frozenset({"fork", "cup"}))]
    conf = np.zeros((1, 5, 16, 10))
    conf[0, 2, 3, tv.OBJECTS.index("fork")] = 0.8
    conf[0, 0, 5, tv.OBJECTS.index("cup")] = 0.3
    M = ve.localisation_maps(conf, "fork")
    assert M.shape == (1, 4, 4) and M[0, 0, 3] == 0.8
    assert ve.localisation_accuracy(conf, scenes) == 0.5
    with pytest.raises(ValueError, match="word 'cat'"):
        ve.localisation_maps(conf, "cat")


def test_project_away_removes_the_component():
    torch.manual_seed(2)
    t = torch.randn(8)
    h = torch.randn(20, 8)
    out = ve.project_away(h, t, 1.0)
    p = h @ t
    # alpha = 1: positive projections become exactly zero, negative ones are untouched
    torch.testing.assert_close((out @ t)[p > 0], torch.zeros(int((p > 0).sum())), atol=1e-5, rtol=0)
    torch.testing.assert_close(out[p <= 0], h[p <= 0])
    # alpha = 2 reflects the positive projections
    torch.testing.assert_close((ve.project_away(h, t, 2.0) @ t)[p > 0], -p[p > 0], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="alpha must"):
        ve.project_away(h, t, -0.5)


def test_text_embedding(model):
    e0 = ve.text_embedding(model, "cup", 0)
    torch.testing.assert_close(e0, model.lm.get_input_embeddings().weight[tv.TOKEN_ID["cup"]])
    e1 = ve.text_embedding(model, "cup", 1)
    assert e1.shape == e0.shape and not torch.allclose(e0, e1)
    with pytest.raises(ValueError, match="text_layer 9"):
        ve.text_embedding(model, "cup", 9)


def test_edit_hook_edits_only_image_positions(model, split):
    patches = tv.as_patches(split.images)
    ids = torch.full((5, 2), tv.TOKEN_ID["describe"])
    objs = [["fork"], [], ["cup", "dog"], ["car"], ["clock"]]
    with ve.record_residual(model) as clean:
        model(ids, patches=patches)
    with ve.project_away_edit(model, objs, image_layer=-1, alpha=1.0):
        with ve.record_residual(model) as edited:  # registered after the edit, so it sees the edited input
            model(ids, patches=patches)
    h, e = clean[0], edited[0]
    torch.testing.assert_close(e[:, 0], h[:, 0])                        # <bos> untouched
    torch.testing.assert_close(e[:, tv.TEXT_START:], h[:, tv.TEXT_START:])  # text untouched
    torch.testing.assert_close(e[1], h[1])                              # nothing removed from image 1
    assert not torch.allclose(e[0, tv.IMAGE_SLICE], h[0, tv.IMAGE_SLICE])
    # alpha = 1: no positive component along the removed word is left (single object)
    t = ve.text_embedding(model, "fork")
    assert float((e[0, tv.IMAGE_SLICE] @ t).max()) < 1e-4
    # sequential removal of two objects: the last one removed has no positive component left
    assert float((e[2, tv.IMAGE_SLICE] @ ve.text_embedding(model, "dog")).max()) < 1e-4
    with pytest.raises(ValueError, match="image_layer 7"):
        with ve.project_away_edit(model, objs, image_layer=7):
            pass
    with pytest.raises(ValueError, match="alpha must"):
        with ve.project_away_edit(model, objs, alpha=-1):
            pass
    with pytest.raises(ValueError, match="word 'cat'"):
        with ve.project_away_edit(model, [["cat"]] * 5):
            pass


def test_edit_at_a_later_layer_changes_only_later_states(model, split):
    patches = tv.as_patches(split.images)
    ids = torch.full((5, 1), tv.TOKEN_ID["describe"])
    with ve.record_residual(model) as clean:
        model(ids, patches=patches)
    with ve.record_residual(model) as edited:
        with ve.project_away_edit(model, [["fork"]] * 5, image_layer=1, alpha=1.0):
            model(ids, patches=patches)
    for l in range(2):  # inputs of blocks 0 and 1 are unchanged
        torch.testing.assert_close(edited[l], clean[l])
    assert not torch.allclose(edited[3], clean[3])


def test_selection_and_reduction(model, split):
    caps = tv.greedy_captions(model, split.images)
    truths = split.truth
    oracle = ve.select_oracle([["fork", "knife"]], [{"fork"}])
    assert oracle == [["knife"]]
    cm = np.full((1, 10), 0.5); cm[0, tv.OBJECTS.index("knife")] = 0.01
    assert ve.select_low_confidence(cm, [["fork", "knife"]], 0.1) == [["knife"]]
    out = ve.reduction_run(model, split.images, caps, truths, [[] for _ in caps])
    assert out["after"] == out["before"] and out["n_erased"] == 0
    with pytest.raises(ValueError, match="must match"):
        ve.remove_objects(model, split.images, [[]])


def test_captions_and_confidence_equal_the_separate_calls(model):
    """run_experiment's one-pass helper gives exactly greedy_captions and lens_confidence (over two
    captioning batches of 1024)."""
    from companion_lib.vlm_editing.lens import _captions_and_confidence
    images = tv.make_split(1030, np.random.default_rng(5), "natural", occlusion=False).images
    caps, conf = _captions_and_confidence(model, images)
    assert caps == tv.greedy_captions(model, images)
    want = ve.lens_confidence(model, images)
    assert conf.dtype == want.dtype and conf.shape == want.shape and conf.tobytes() == want.tobytes()


def test_reduction_on_own_captions_equals_reduction_run(model):
    from companion_lib.vlm_editing.project_away import _reduction_run_own_captions
    split = tv.make_split(30, np.random.default_rng(6), "natural", occlusion=False)
    caps = tv.greedy_captions(model, split.images)
    sel = [list(tv.OBJECTS[i % 3:i % 3 + 2]) if i % 4 == 0 else [] for i in range(len(caps))]
    for alpha in (1.0, 2.0):
        assert (_reduction_run_own_captions(model, split.images, caps, split.truth, sel, alpha=alpha)
                == ve.reduction_run(model, split.images, caps, split.truth, sel, alpha=alpha))
    none = _reduction_run_own_captions(model, split.images, caps, split.truth, [[] for _ in caps])
    assert none == ve.reduction_run(model, split.images, caps, split.truth, [[] for _ in caps])
    with pytest.raises(ValueError, match="must match"):
        _reduction_run_own_captions(model, split.images, caps, split.truth, [[]])


def test_forward_pass_of_an_image_does_not_depend_on_its_batch(model):
    """What the two helpers above rely on: every image's logits and residual stream are bitwise the same
    whether it is run alone, in a subset, or in the whole batch."""
    images = tv.make_split(300, np.random.default_rng(7), "natural", occlusion=False).images
    patches = tv.as_patches(images)
    ids = torch.full((len(images), 1), tv.TOKEN_ID["describe"])

    def run(rows):
        with torch.no_grad(), tv.record_residual(model) as rec:
            logits = model(ids[rows], patches=patches[rows]).logits
        return [logits] + list(rec)

    full = run(np.arange(len(images)))
    for rows in (np.arange(0, 300, 7), np.array([5]), np.arange(150, 300)):
        for a, b in zip(full, run(rows)):
            assert a[rows].numpy().tobytes() == b.numpy().tobytes()


# -- the paper's competitor: the model's output probability ------------------------------------------------
@pytest.fixture(scope="module")
def trained():
    world = tv.trained_world(0)   # a shipped checkpoint: loaded, not trained
    m = tv.build_model(world.final_state, world.config)
    m.eval()
    return m


def test_output_probability_equals_teacher_forced_softmax(trained):
    """The probability recorded during cached greedy decoding equals the softmax of a full, uncached forward
    pass over the caption at the position that predicts each object word."""
    split = tv.make_split(40, np.random.default_rng(8), "trigger_only")
    caps, probs = ve.output_probability(trained, split.images)
    assert caps == tv.greedy_captions(trained, split.images)
    assert probs.shape == (40, 10) and sum(map(len, caps)) > 40
    for i, cap in enumerate(caps):
        ids = torch.tensor([[tv.TOKEN_ID["describe"]] + [tv.TOKEN_ID[w] for w in cap]])
        with torch.no_grad():
            p = torch.softmax(trained(ids, patches=tv.as_patches(split.images[i:i + 1])).logits[0], -1)
        for j, w in enumerate(cap):
            k = tv.OBJECTS.index(w)
            if w not in cap[:j]:
                assert probs[i, k] == pytest.approx(float(p[tv.TEXT_START + j, tv.TOKEN_ID[w]]), abs=1e-5)
        assert np.all(probs[i, [tv.OBJECTS.index(w) for w in tv.OBJECTS if w not in cap]] == 0)
    # greedy decoding picks the most probable token, so a generated word has probability above 1/|vocab|
    assert probs[probs > 0].min() > 1 / len(tv.VOCAB)


def test_captions_confidence_and_output_probability_in_one_pass(trained):
    from companion_lib.vlm_editing.lens import _captions_and_confidence
    images = tv.make_split(1030, np.random.default_rng(9), "natural", occlusion=False).images   # two batches
    caps, conf, probs = _captions_and_confidence(trained, images, output_probs=True)
    caps2, probs2 = ve.output_probability(trained, images)
    assert caps == caps2 and probs.tobytes() == probs2.tobytes()
    assert conf.tobytes() == ve.lens_confidence(trained, images).tobytes()


def test_targeted_removal_counts_the_hallucinations_it_introduces(monkeypatch):
    import importlib
    pa = importlib.import_module("companion_lib.vlm_editing.project_away")
    captions = [["fork", "cup"], ["dog", "knife"], ["clock"]]
    truths = [{"fork", "cup"}, {"dog", "car"}, {"car"}]        # image 2 names no real object: no target
    new = [["cup", "knife", "bench"], ["dog", "knife", "frisbee", "car"]]
    seen = {}

    def fake_remove(model, images, objects_per_image, *args):
        seen["objects"] = objects_per_image
        return new

    monkeypatch.setattr(pa, "remove_objects", fake_remove)
    out = pa.targeted_removal(None, np.zeros((3, 20, 20, 3)), captions, truths, alpha=2.0)
    assert seen["objects"] == [["fork"], ["dog"]]
    # targets: fork removed, dog kept; image 0 adds knife and bench, image 1 adds frisbee (knife was there
    # before, car is in the image)
    assert out["n"] == 2 and out["removed"] == 0.5 and out["kept"] == 1.0
    assert out["introduced"] == 1.5 and out["net"] == -1.0


# -- issue 37: the model runs on a device argument (the GPU when present) -----------------------------------
def test_an_explicit_cpu_device_gives_the_same_numbers():
    """run_experiment captions, reads the lens and edits on ``device`` (default: the GPU when present); on the
    CPU, passing device="cpu" explicitly changes nothing, bit for bit."""
    import dataclasses

    world = tv.trained_world(0)   # a shipped checkpoint: loaded, not trained
    kw = dict(n_cal=(10, 10), n_test=(15, 15), n_removal=6, alphas=(1.0, 2.0), image_layers=(-1, 1))
    a, b = ve.run_experiment(world, **kw), ve.run_experiment(world, device="cpu", **kw)
    assert len(a.hal) > 0 and len(a.removal) == 3 and len(a.reduction) == 6
    for f in dataclasses.fields(ve.Experiment):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f.name
        else:
            assert x == y, f.name


def test_cached_experiment_keys_a_cpu_run_as_before(tmp_path, monkeypatch):
    """On the CPU, ``device`` does not enter the cache key (device="cpu" finds the default run's entry); a
    run on another device is cached under a key that names it, so it never serves a CPU run."""
    import importlib

    ex = importlib.import_module("companion_lib.vlm_editing.experiment")
    monkeypatch.setenv("BOOK_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("BOOK_DEVICE", "cpu")
    runs = []

    def fake_run(world, device=None, **kwargs):
        runs.append((world, str(device), kwargs))
        return {"device": str(device), **kwargs}

    monkeypatch.setattr(ex, "trained_world", lambda seed: f"world {seed}")
    monkeypatch.setattr(ex, "run_experiment", fake_run)
    assert ve.cached_experiment(3, n_removal=7) == {"device": "cpu", "n_removal": 7}
    assert ve.cached_experiment(3, device="cpu", n_removal=7) == {"device": "cpu", "n_removal": 7}
    assert runs == [("world 3", "cpu", {"n_removal": 7})]
    assert ve.cached_experiment(3, device="meta", n_removal=7) == {"device": "meta", "n_removal": 7}
    assert ve.cached_experiment(3, n_removal=7)["device"] == "cpu" and len(runs) == 2


class _Reached(Exception):
    """Raised by a hook once the language model has run: the pass got through on the model's device."""


def test_inputs_follow_the_model_to_its_device(split):
    """On the meta device (which allocates nothing), a CPU input left behind makes a forward pass raise a
    device mismatch: the lens and the edit must build their inputs where the model is, and the hidden
    states, lens probabilities and text embeddings stay there. Captioning is stopped by a hook once the
    language model has run (a meta tensor cannot be read back as tokens)."""
    torch.manual_seed(0)
    meta = tv.TinyVLM(tv.tiny_llama_config()).eval().requires_grad_(False).to("meta")
    H = ve.image_hidden_states(meta, split.images)
    assert H.device.type == "meta" and H.shape == (meta.n_layers + 1, 5, 16, 64)
    assert ve.lens_probs(meta, torch.zeros(5, 16, 64)).device.type == "meta"
    assert ve.text_embedding(meta, "cup", 2).device.type == "meta"
    with ve.project_away_edit(meta, [["cup"], [], ["dog", "fork"], ["car"], []], image_layer=1, text_layer=1):
        assert ve.image_hidden_states(meta, split.images).device.type == "meta"

    def hook(module, args, kwargs, output):
        raise _Reached(kwargs["inputs_embeds"].device)

    handle = meta.lm.register_forward_hook(hook, with_kwargs=True)
    try:
        for call in (lambda: ve.output_probability(meta, split.images),
                     lambda: ve.remove_objects(meta, split.images, [["cup"]] * 5, image_layer=0)):
            with pytest.raises(_Reached) as hit:
                call()
            assert hit.value.args[0].type == "meta"
    finally:
        handle.remove()
