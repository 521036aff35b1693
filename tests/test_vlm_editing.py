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


# ---- the full-scale path on a real LlavaForConditionalGeneration (issue 39): tiny random checkpoints and a small
# COCO annotation file in the released format, no downloads ----

#: single-word COCO categories: the tiny tokenizer's words, the test file's categories
COCO_WORDS = ["person", "bicycle", "car", "bus", "train", "truck", "boat", "bench", "bird", "cat", "dog", "horse",
              "pizza", "cake"]


def write_coco(folder, n_images: int = 10, captions: bool = False):
    """COCO val2014's layout in miniature: ``annotations/instances_val2014.json`` in COCO's format (images,
    annotations with bbox/segmentation, categories with COCO's ids) and JPEG files in ``val2014/``. Image ``k``
    holds every other category of :data:`COCO_WORDS` (starting at ``k % 2``), so any named category is real in
    half of the images."""
    import json
    from pathlib import Path

    from PIL import Image

    folder = Path(folder)
    (folder / "annotations").mkdir(parents=True, exist_ok=True)
    (folder / "val2014").mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    ids = {c: tv.COCO_CATEGORIES.index(c) + 1 for c in COCO_WORDS}     # COCO's ids are 1-based (with gaps)
    images, anns, caps = [], [], []
    for k in range(n_images):
        iid = 1000 + 7 * k
        name = f"COCO_val2014_{iid:012d}.jpg"
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(folder / "val2014" / name)
        images.append({"id": iid, "file_name": name, "width": 16, "height": 16})
        for c in COCO_WORDS[k % 2::2]:
            anns.append({"id": len(anns) + 1, "image_id": iid, "category_id": ids[c], "bbox": [0.0, 0.0, 8.0, 8.0],
                         "area": 64.0, "iscrowd": 0, "segmentation": [[0, 0, 8, 0, 8, 8, 0, 8]]})
        caps.append({"id": k + 1, "image_id": iid, "caption": "A photo of a dog."})
    cats = [{"supercategory": "thing", "id": i, "name": c} for c, i in ids.items()]
    (folder / "annotations" / "instances_val2014.json").write_text(
        json.dumps({"images": images, "annotations": anns, "categories": cats}))
    if captions:
        (folder / "annotations" / "captions_val2014.json").write_text(
            json.dumps({"images": images, "annotations": caps}))
    return folder


@pytest.fixture
def coco(tmp_path):
    return write_coco(tmp_path / "coco")


@pytest.fixture
def llava_folder(tiny_llava):
    return tiny_llava(COCO_WORDS, seed=1)


@pytest.fixture
def loaded(llava_folder):
    return tv.load_llava(llava_folder, device="cpu")


def test_load_coco_split_reads_the_real_format_and_refuses_others(coco, tmp_path):
    import json

    split = ve.load_coco_split(coco, 6, seed=0)
    assert len(split) == 6 and len(set(split.image_ids)) == 6
    assert split.categories == tuple(COCO_WORDS)
    for iid, f, t in zip(split.image_ids, split.files, split.truth):
        k = (iid - 1000) // 7
        assert f.name == f"COCO_val2014_{iid:012d}.jpg" and f.is_file()
        assert t == frozenset(COCO_WORDS[k % 2::2])
    assert all(size == (16, 16) for size in split.sizes)
    assert all(set(b) == set(t) and all(v == ((0.0, 0.0, 8.0, 8.0),) for v in b.values())
               for b, t in zip(split.boxes, split.truth))
    assert ve.load_coco_split(coco, 6, seed=0).image_ids == split.image_ids      # the draw is seeded
    assert ve.load_coco_split(coco, 6, seed=1).image_ids != split.image_ids
    with_caps = ve.load_coco_split(write_coco(tmp_path / "c2", captions=True), 10)
    assert all("dog" in t for t in with_caps.truth)                             # CHAIR adds the captions' objects
    with pytest.raises(ValueError, match="only 10 images"):
        ve.load_coco_split(coco, 11)
    with pytest.raises(ValueError, match="not a folder.*instances_val2014.json"):
        ve.load_coco_split(tmp_path / "nowhere", 2)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no annotations/instances_val2014.json"):
        ve.load_coco_split(tmp_path / "empty", 2)
    bad = write_coco(tmp_path / "bad")
    (bad / "annotations" / "instances_val2014.json").write_text(json.dumps({"images": [], "captions": []}))
    with pytest.raises(ValueError, match="not in COCO's format.*'annotations'"):
        ve.load_coco_split(bad, 2)
    (bad / "annotations" / "instances_val2014.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not in COCO's format"):
        ve.load_coco_split(bad, 2)
    gone = write_coco(tmp_path / "gone")
    for f in (gone / "val2014").glob("*.jpg"):
        f.unlink()
    with pytest.raises(ValueError, match="drawn images are missing.*val2014"):
        ve.load_coco_split(gone, 2)
    with pytest.raises(TypeError, match="path to a COCO folder"):
        ve.load_coco_split(3, 2)
    broken = write_coco(tmp_path / "broken")
    for f in (broken / "val2014").glob("*.jpg"):
        f.write_text("not a jpeg")
    with pytest.raises(ValueError, match="not an image PIL can read"):
        ve.load_coco_split(broken, 2)


def test_full_scale_refuses_a_checkpoint_whose_weights_do_not_load(llava_folder, coco, tmp_path):
    import shutil

    bad = tmp_path / "truncated"
    shutil.copytree(llava_folder, bad)
    for f in bad.glob("*.safetensors"):
        f.write_bytes(f.read_bytes()[:100])
    with pytest.raises(ValueError, match="cannot load the weights"):
        ve.full_scale(bad, coco, n_images=10, n_cal=2, n_folds=2, image_layer=0, device="cpu")


def test_class_token_ids(loaded):
    tok = loaded.processor.tokenizer
    ids = ve.class_token_ids(tok, ["dog", "cat"])
    assert ids == [[tok.convert_tokens_to_ids("dog")], [tok.convert_tokens_to_ids("cat")]]
    with pytest.raises(ValueError, match="cannot spell the category 'giraffe'"):
        ve.class_token_ids(tok, ["dog", "giraffe"])


def test_llava_lens_shapes_identity_at_the_top_and_no_hooks_left(loaded, coco):
    files = sorted((coco / "val2014").glob("*.jpg"))[:2]
    tok = loaded.processor.tokenizer
    ids = ve.class_token_ids(tok, COCO_WORDS)
    model = loaded.model
    n_layer = model.config.text_config.num_hidden_layers
    res = ve.llava_lens(loaded, files, ids)
    n_img = (8 // 4) ** 2
    assert res.layer_max.shape == (2, n_layer + 1, len(COCO_WORDS)) and res.patch_max.shape == (2, n_img, len(COCO_WORDS))
    np.testing.assert_allclose(res.confidence, res.patch_max.max(axis=1), rtol=1e-6)
    # with the final norm and the whole vocabulary, the last lens layer is the model's own next-token softmax
    exact = ve.llava_lens(loaded, files[:1], ids, use_final_norm=True, top_k=None)
    from PIL import Image
    with Image.open(files[0]) as im:
        enc = loaded.processor(images=im.convert("RGB"), text=ve.llava_prompt(), return_tensors="pt")
    with torch.no_grad():
        probs = torch.softmax(model(**enc).logits[0], -1)
    pos = tv.image_token_positions(model, enc["input_ids"])[0]
    own = probs[pos][:, [i[0] for i in ids]].max(0).values.numpy()
    np.testing.assert_allclose(exact.layer_max[0, -1], own, atol=1e-6)
    # a top-k softmax renormalises over fewer logits: every kept probability can only grow
    top = ve.llava_lens(loaded, files[:1], ids, use_final_norm=True, top_k=5)
    kept = top.layer_max[0, -1] > 0
    assert kept.any() and np.all(top.layer_max[0, -1][kept] >= exact.layer_max[0, -1][kept] - 1e-7)
    assert (top.layer_max == 0).any()                        # categories outside the top 5 get nothing
    layers = tv.language_model_parts(model)[0]
    assert not any(len(l._forward_hooks) or len(l._forward_pre_hooks) for l in layers)
    with pytest.raises(ValueError, match="top_k"):
        ve.llava_lens(loaded, files, ids, top_k=0)


def test_llava_text_embedding(loaded):
    tok = loaded.processor.tokenizer
    emb = loaded.model.get_input_embeddings().weight
    t0 = ve.llava_text_embedding(loaded, "dog", 0)
    assert torch.equal(t0, emb[tok.convert_tokens_to_ids("dog")])
    ids = tok("dog", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        hs = loaded.model(input_ids=ids, output_hidden_states=True).hidden_states
    assert torch.allclose(ve.llava_text_embedding(loaded, "dog", 1), hs[1][0, -1], atol=1e-6)   # block 0's output
    with pytest.raises(ValueError, match="text_layer 3 out of range"):
        ve.llava_text_embedding(loaded, "dog", 3)


def test_llava_captions_edit_only_the_image_tokens_in_the_prefill(loaded, coco):
    files = sorted((coco / "val2014").glob("*.jpg"))[:2]
    model = loaded.model
    plain = ve.llava_captions(loaded, files, max_new_tokens=6, num_beams=2)
    assert len(plain) == 2 and all(isinstance(c, str) for c in plain)
    # nothing to erase: the same captions; alpha = 0: the same captions
    assert ve.llava_captions(loaded, files, max_new_tokens=6, num_beams=2, erase=[[], []]) == plain
    t = ve.llava_text_embedding(loaded, "dog", 1)
    assert ve.llava_captions(loaded, files, max_new_tokens=6, num_beams=2, erase=[[t], [t]], image_layer=0,
                             alpha=0.0) == plain
    # the edit in the prefill pass only, with the cache, equals the edit recomputed at every step without it
    strong = dict(max_new_tokens=6, num_beams=1, erase=[[t, -t], [t]], image_layer=0, alpha=8.0)
    cached = ve.llava_captions(loaded, files, **strong)
    assert ve.llava_captions(loaded, files, use_cache=False, **strong) == cached
    greedy = ve.llava_captions(loaded, files, max_new_tokens=6, num_beams=1)
    assert cached != greedy                                       # the edit changes what the model says
    assert ve.llava_captions(loaded, files, max_new_tokens=6, num_beams=1, use_cache=False) == greedy
    # the edit hook, recorded: after block 0 the image tokens have no positive component along t any more,
    # the text positions are untouched, and the decoding steps are left alone
    from companion_lib.vlm_editing.llava_coco import _encode, _open
    enc = _encode(loaded, _open(files[0]), ve.llava_prompt())
    sl = tv.image_slice(model, enc["input_ids"])
    seen = []
    original = tv.residual_edit

    with torch.no_grad(), tv.record_residual(model) as clean:
        model(**enc, use_cache=False)
    import companion_lib.vlm_editing.llava_coco as fs

    def spy(m, layer, edit):
        def wrapped(h):
            out = edit(h)
            seen.append((h.shape[1], h, out))
            return out
        return original(m, layer, wrapped)

    fs.residual_edit = spy
    try:
        ve.llava_captions(loaded, files[:1], max_new_tokens=3, num_beams=1, erase=[[t]], image_layer=0, alpha=1.0)
    finally:
        fs.residual_edit = original
    prefill = [s for s in seen if s[0] == enc["input_ids"].shape[1]]
    steps = [s for s in seen if s[0] == 1]
    assert len(prefill) == 1 and len(steps) >= 1 and all(torch.equal(h, o) for _, h, o in steps)
    _, h, out = prefill[0]
    assert torch.allclose(h, clean[1], atol=1e-6)                 # the hook saw block 0's output
    p = (out[0, sl] @ t) / (t @ t)
    assert float(p.max()) < 1e-4                                  # the positive projections are gone
    assert torch.equal(out[0, :sl.start], h[0, :sl.start]) and torch.equal(out[0, sl.stop:], h[0, sl.stop:])
    assert not torch.equal(out[0, sl], h[0, sl])
    layers = tv.language_model_parts(model)[0]
    assert not any(len(l._forward_hooks) or len(l._forward_pre_hooks) for l in layers)
    with pytest.raises(ValueError, match="erase"):
        ve.llava_captions(loaded, files, erase=[[t]])


def test_patch_centres_place_the_patches_where_the_processor_puts_them(loaded):
    from types import SimpleNamespace

    from PIL import Image

    ip = loaded.processor.image_processor              # shortest edge 8, centre crop 8 x 8, a 2 x 2 grid
    assert ve.model_image_tokens(loaded) == 4
    # a 40 x 20 image is resized to 16 x 8 and cropped to x in [4, 12): the crop holds x in [10, 30) of the original
    centres = ve.patch_centres(ip, 40, 20, 2)
    np.testing.assert_allclose(centres, [[15, 5], [25, 5], [15, 15], [25, 15]])
    pixels = np.full((20, 40, 3), 255, dtype=np.uint8)
    pixels[0:10, 20:30] = 0                            # a dark block where the second patch's centre lies
    pv = ip(Image.fromarray(pixels), return_tensors="pt")["pixel_values"][0].mean(0)   # (8, 8)
    means = [float(pv[r * 4:(r + 1) * 4, c * 4:(c + 1) * 4].mean()) for r in range(2) for c in range(2)]
    assert int(np.argmin(means)) == 1
    assert ve.pointing([0.1, 0.9, 0.2, 0.3], [(20, 0, 10, 10)], centres) == (1.0, 0.25)
    assert ve.pointing([0.9, 0.1, 0.2, 0.3], [(20, 0, 10, 10)], centres) == (0.0, 0.25)
    with pytest.raises(ValueError, match="the map has 3 patches"):
        ve.pointing([0.1, 0.2, 0.3], [(0, 0, 1, 1)], centres)
    plain = SimpleNamespace(do_resize=True, size={"height": 8, "width": 8}, do_center_crop=False, crop_size=None)
    np.testing.assert_allclose(ve.patch_centres(plain, 40, 20, 2), [[10, 5], [30, 5], [10, 15], [30, 15]])
    odd = SimpleNamespace(do_resize=True, size={"longest_edge": 8}, do_center_crop=False, crop_size=None)
    with pytest.raises(ValueError, match="cannot be placed"):
        ve.patch_centres(odd, 40, 20, 2)


def test_fold_statistics():
    classes = ["cat", "dog", "car"]
    conf = np.array([[0.9, 0.1, 0.2], [0.2, 0.8, 0.05]])
    truth = [frozenset({"cat"}), frozenset({"dog", "car"})]
    mentions = [["cat", "dog"], ["dog", "cat"]]   # real: cat 0.9, dog 0.8; hallucinated: dog 0.1, cat 0.2
    before = {"self": {"chair_i": 50.0, "recall": 60.0}}
    after = {"self": {"chair_i": 25.0, "recall": 55.0}}
    s = ve.fold_statistics(conf, classes, truth, mentions, 0.5, before, after)
    assert s["auroc_generated"] == 1.0
    assert s["flagged_minus_2x"] == 1.0                   # both hallucinations below 0.5, no real one
    assert s["rel_chair_i_self"] == 0.5 and s["recall_drop_self"] == 5.0
    present = np.array([[1, 0, 0], [0, 1, 1]], bool)
    assert s["auroc_presence"] == pytest.approx(ve.auroc(conf[present], conf[~present]))
    assert "pointing" not in s
    p = ve.fold_statistics(conf, classes, truth, mentions, 0.5, before, after, points=[(1.0, 0.25), (0.0, 0.5)])
    assert p["pointing"] == 0.5 and p["pointing_minus_chance"] == pytest.approx(0.125)
    with pytest.raises(ValueError, match="points is empty"):
        ve.fold_statistics(conf, classes, truth, mentions, 0.5, before, after, points=[])
    with pytest.raises(ValueError, match="0 hallucinated generated objects"):
        ve.fold_statistics(conf, classes, truth, [["cat"], ["dog"]], 0.5, before, after)
    with pytest.raises(ValueError, match="same images"):
        ve.fold_statistics(conf[:1], classes, truth, mentions, 0.5, before, after)


def test_full_scale_runs_on_a_tiny_llava(llava_folder, coco):
    run = ve.full_scale(llava_folder, coco, n_images=10, n_cal=2, n_folds=2, image_layer=0, text_layer=1,
                        max_new_tokens=10, num_beams=2, device="cpu")
    assert run.lens.layer_max.shape == (10, 3, len(COCO_WORDS)) and run.confidence.shape == (10, len(COCO_WORDS))
    assert len(run.captions) == 10 and set(run.edited) == {"self", "oracle"}
    assert all(len(v) == 8 for v in run.edited.values())
    assert list(run.folds.index) == [0, 1] and run.folds["images"].tolist() == [4, 4]
    assert run.settings["dtype"] == "float32" and run.settings["num_beams"] == 2
    assert run.folds["pointing"].between(0, 1).all() and run.folds["pointing_minus_chance"].notna().all()
    # the oracle erases exactly the hallucinated categories of each test caption
    assert run.selected["oracle"] == [list(h) for h in run.chair["hallucinated"][2:]]
    assert all(all(run.confidence[2 + j, COCO_WORDS.index(c)] < run.theta for c in s)
               for j, s in enumerate(run.selected["self"]))


def test_full_scale_refuses_bad_input_before_reading_weights(llava_folder, coco, tmp_path, monkeypatch):
    from transformers import BertConfig, BertForMaskedLM, LlavaForConditionalGeneration

    def no_weights(*a, **k):
        raise AssertionError("weights were read before the checks")

    monkeypatch.setattr(LlavaForConditionalGeneration, "from_pretrained", no_weights)
    kw = dict(n_images=10, n_cal=2, n_folds=2, image_layer=0, device="cpu")
    BertForMaskedLM(BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=8)).save_pretrained(tmp_path / "bert")
    with pytest.raises(ValueError, match="BertForMaskedLM.*supports LlavaForConditionalGeneration"):
        ve.full_scale(tmp_path / "bert", coco, **kw)
    with pytest.raises(ValueError, match="cannot load the config.*LlavaForConditionalGeneration"):
        ve.full_scale(tmp_path / "nothing", coco, **kw)
    with pytest.raises(ValueError, match="GiB free"):
        ve.full_scale(llava_folder, coco, free_bytes=1000, **kw)
    with pytest.raises(ValueError, match="not in COCO's format"):
        (tmp_path / "bad" / "annotations").mkdir(parents=True)
        (tmp_path / "bad" / "val2014").mkdir()
        (tmp_path / "bad" / "annotations" / "instances_val2014.json").write_text('{"images": []}')
        ve.full_scale(llava_folder, tmp_path / "bad", **kw)
    with pytest.raises(ValueError, match="image_layer 2 out of range"):
        ve.full_scale(llava_folder, coco, **{**kw, "image_layer": 2})
    with pytest.raises(ValueError, match="n_folds=5 needs at least 10"):
        ve.full_scale(llava_folder, coco, **{**kw, "n_folds": 5})
    with pytest.raises(ValueError, match="n_folds must be at least 2"):
        ve.full_scale(llava_folder, coco, **{**kw, "n_folds": 1})
    with pytest.raises(ValueError, match="q must lie"):
        ve.full_scale(llava_folder, coco, **{**kw, "q": 2})
    with pytest.raises(TypeError, match="hub id"):
        ve.full_scale(3, coco, **kw)


@pytest.mark.slow
def test_reproduce_page_runs_at_full_scale_on_a_tiny_llava(run_reproduce, llava_folder, coco):
    from pathlib import Path

    md = Path(__file__).resolve().parents[1] / "chapters" / "17-vlm-editing" / "reproduce.md"
    params = dict(seeds=[0, 1], n_cal=[10, 5], n_test=[40, 20], n_removal=5, n_pilot=2,
                  model=str(llava_folder), data=str(coco), n_images=10, n_cal_images=2, n_folds=2, image_layer=0,
                  text_layer=1, num_beams=2, max_new_tokens=10)
    _, claims, error = run_reproduce(md, params, "full-scale", checks_off_before="At full scale")
    assert error is None, error
    assert claims["chapter"] == "17-vlm-editing-full-scale"
    assert [c["key"] for c in claims["claims"]] == ["confidence_separates", "presence", "threshold_detects",
                                                    "localises", "self_no_increase", "self_recall", "self_strong",
                                                    "oracle_reduces", "oracle_recall"]
    assert all(c["n"] == 2 for c in claims["claims"])
    import os

    written = sorted(p.name for p in Path(os.environ["BOOK_CLAIMS_DIR"]).glob("*.json"))
    assert written == ["17-vlm-editing-full-scale.json", "17-vlm-editing.json"]   # the book's table and its own
