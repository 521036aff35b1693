"""Unit tests for companion_lib.lucidppn (Pach et al., ICLR 2025)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from companion_lib import lucidppn as lp


@pytest.fixture(scope="module")
def birds():
    return lp.make_birds(4, np.random.default_rng(0))


# -- data ---------------------------------------------------------------------------------------
def test_palette_is_exactly_isoluminant():
    for name, colour in lp.PALETTE.items():
        assert abs(lp.luminance(np.array(colour)) - lp.HEAD_LUMINANCE) < 1e-6, name
        assert all(0.0 <= c <= 1.0 for c in colour), name
    assert lp.isoluminant_colour((1.0, None, None))[1] == pytest.approx(0.151 / 0.701)


def test_isoluminant_colour_rejects_impossible_templates():
    with pytest.raises(ValueError, match="template"):
        lp.isoluminant_colour((1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="no isoluminant colour"):
        lp.isoluminant_colour((1.0, 1.0, None))


def test_grey_image_of_any_palette_colour_is_identical_across_classes():
    a = lp.make_birds(3, np.random.default_rng(5), colours=("red", "green", "blue"))
    b = lp.make_birds(3, np.random.default_rng(5), colours=("blue", "yellow", "green"))
    assert not np.allclose(a.images, b.images)
    torch.testing.assert_close(lp.to_grey(a.images), lp.to_grey(b.images), atol=1e-6, rtol=0)
    swapped = lp.swap_head_colours(a)
    assert not np.allclose(swapped.images, a.images)
    torch.testing.assert_close(lp.to_grey(swapped.images), lp.to_grey(a.images), atol=1e-6, rtol=0)


def test_make_birds_shapes_labels_and_masks(birds):
    assert birds.images.shape == (24, 3, 24, 24) and birds.masks.shape == (24, 2, 24, 24)
    assert birds.images.min() >= 0 and birds.images.max() <= 1
    np.testing.assert_array_equal(np.bincount(birds.labels), [4] * 6)
    assert not (birds.masks[:, 0] * birds.masks[:, 1]).any()          # head and body are disjoint
    assert birds.masks[:, 0].sum((1, 2)).min() > 10                   # every head is visible
    head_pixels = birds.images.transpose(0, 2, 3, 1)[birds.masks[:, 0] > 0]
    np.testing.assert_allclose(lp.luminance(head_pixels), lp.HEAD_LUMINANCE, atol=1e-6)
    assert birds.class_names[0] == "red disk" and birds.n_classes == 6


def test_swapped_labels_cycle_the_colour_and_keep_the_shape(birds):
    new = lp.swapped_labels(birds)
    np.testing.assert_array_equal(birds.shape_index(new), birds.shape_index())
    np.testing.assert_array_equal(birds.colour_index(new), (birds.colour_index() + 1) % 3)


def test_bad_data_input_names_the_argument():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="colours: unknown colour name 'purple'"):
        lp.make_birds(2, rng, colours=("red", "purple"))
    with pytest.raises(ValueError, match="shapes"):
        lp.make_birds(2, rng, shapes=("triangle",))
    with pytest.raises(ValueError, match="n_per_class"):
        lp.make_birds(0, rng)
    with pytest.raises(ValueError, match=r"images must have shape \(N, 3, H, W\)"):
        lp.to_grey(np.zeros((2, 1, 8, 8)))
    with pytest.raises(ValueError, match=r"images must hold finite values in \[0, 1\]"):
        lp.to_grey(np.full((2, 3, 8, 8), 1.5))
    with pytest.raises(ValueError, match="images"):
        lp.LucidPPN(2, 6)(torch.full((1, 3, 24, 24), -0.1))


# -- model --------------------------------------------------------------------------------------
def test_forward_and_fusion_shapes(birds):
    torch.manual_seed(0)
    model = lp.LucidPPN(2, 6)
    out = model(torch.as_tensor(birds.images[:5]))
    assert out.shape_maps.shape == out.colour_maps.shape == out.fused_maps.shape == (5, 2, 6, 12, 12)
    assert out.shape_scores.shape == out.fused_scores.shape == (5, 2, 6)
    assert out.logits.shape == out.shape_logits.shape == (5, 6)
    torch.testing.assert_close(out.fused_maps, out.colour_maps * out.shape_maps)
    torch.testing.assert_close(out.logits, out.fused_maps.amax((-2, -1)).mean(1))
    assert lp.BlackBoxCNN(6)(torch.as_tensor(birds.images[:5])).shape == (5, 6)
    with pytest.raises(ValueError, match="differ"):
        lp.fuse(torch.zeros(1, 2, 3, 4, 4), torch.zeros(1, 2, 3, 2, 2))


def test_colour_net_sees_only_colour():
    torch.manual_seed(1)
    net = lp.ColorNet(2, 3)
    img = torch.rand(1, 3, 4, 4)
    maps = net(img, (4, 4))
    flat = net.respond(img[0].permute(1, 2, 0).reshape(-1, 3))       # the same pixels as plain colours
    torch.testing.assert_close(maps[0].permute(2, 3, 0, 1).reshape(-1, 2, 3), flat)


def test_detach_keeps_the_colour_loss_out_of_shapetexnet(birds):
    x, m, y = torch.as_tensor(birds.images[:6]), torch.as_tensor(birds.masks[:6]), torch.as_tensor(birds.labels[:6])
    for detach, reaches in [(True, False), (False, True)]:
        torch.manual_seed(0)
        model = lp.LucidPPN(2, 6, detach=detach)
        lp.lucid_losses(model(x), m, y)["L_C"].backward()
        grad = sum(p.grad.abs().sum() for p in model.shape_net.parameters() if p.grad is not None)
        assert (float(grad) > 0) is reaches
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.colour_net.parameters())


def test_n_parts_must_be_positive():
    with pytest.raises(ValueError, match="n_parts must be >= 1"):
        lp.LucidPPN(0, 6)
    with pytest.raises(ValueError, match="n_parts"):
        lp.ColorNet(0, 6)


# -- losses and metrics on hand-made maps --------------------------------------------------------
def _output(zs, zc):
    z = zc * zs
    rs, r = zs.amax((-2, -1)), z.amax((-2, -1))
    return lp.LucidOutput(zs, zc, z, rs, r, rs.mean(1), r.mean(1))


def test_loss_values_on_hand_made_maps():
    n, k, m = 2, 2, 3
    half = _output(torch.full((n, k, m, 4, 4), 0.5), torch.ones(n, k, m, 4, 4))
    masks, labels = torch.zeros(n, k, 8, 8), torch.tensor([0, 2])
    losses = lp.lucid_losses(half, masks, labels)
    for key in ("L_D", "L_S", "L_C"):
        assert float(losses[key]) == pytest.approx(math.log(2), rel=1e-6)
    assert float(losses["total"]) == pytest.approx(3.4 * math.log(2), rel=1e-6)
    # a perfect model: true-class maps equal the masks (0/1), scores one-hot
    zs = torch.full((n, k, m, 4, 4), 1e-6)
    masks = torch.zeros(n, k, 4, 4)
    masks[:, 0, :2, :2] = 1
    masks[:, 1, 2:, 2:] = 1
    for i, y in enumerate(labels):
        zs[i, :, y] = masks[i].clamp(1e-6, 1 - 1e-6)
    perfect = lp.lucid_losses(_output(zs, torch.ones_like(zs)), masks, labels)
    assert float(perfect["total"]) < 1e-4
    # L_S depends on the scores only: pe = 0.9 on the true class, 0.1 elsewhere
    zs = torch.full((n, k, m, 4, 4), 0.1)
    for i, y in enumerate(labels):
        zs[i, :, y] = 0.9
    assert float(lp.lucid_losses(_output(zs, torch.ones_like(zs)), masks, labels)["L_S"]) == pytest.approx(-math.log(0.9), rel=1e-5)


def test_losses_reject_bad_masks():
    out = _output(torch.full((2, 2, 3, 4, 4), 0.5), torch.ones(2, 2, 3, 4, 4))
    with pytest.raises(ValueError, match="masks must have shape"):
        lp.lucid_losses(out, torch.zeros(2, 3, 4, 4), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="labels"):
        lp.lucid_losses(out, torch.zeros(2, 2, 4, 4), torch.tensor([0]))
    with pytest.raises(ValueError, match="masks must have shape"):
        lp.part_hit_rate(out.shape_maps, torch.zeros(3, 2, 8, 8), torch.tensor([0, 1]))


def test_part_hit_rate_on_hand_made_maps():
    zs = torch.zeros(2, 2, 3, 4, 4)
    masks = torch.zeros(2, 2, 8, 8)
    masks[:, 0, :4, :4] = 1          # head: top-left quarter
    masks[:, 1, 4:, 4:] = 1          # body: bottom-right quarter
    labels = torch.tensor([1, 2])
    zs[0, 0, 1, 0, 0] = 1            # image 0: head peak inside, body peak outside
    zs[0, 1, 1, 0, 3] = 1
    zs[1, 0, 2, 1, 1] = 1            # image 1: both inside
    zs[1, 1, 2, 3, 3] = 1
    zs[1, 0, 0, 3, 3] = 5            # a wrong-class map peaking elsewhere does not count
    np.testing.assert_allclose(lp.part_hit_rate(zs, masks, labels), [1.0, 0.5])


def test_part_iou_on_hand_made_maps():
    zs = torch.zeros(1, 2, 2, 4, 4)
    masks = torch.zeros(1, 2, 4, 4)
    masks[0, 0, :2, :2] = 1
    masks[0, 1, 2:, :] = 1
    zs[0, 0, 1, :2, :] = 0.9          # predicted head: the top two rows (4 of 8 cells are the head)
    zs[0, 1, 1, 2:, :] = 0.4          # body map below the threshold everywhere
    np.testing.assert_allclose(lp.part_iou(zs, masks, torch.tensor([1])), [0.5, 0.0])
    with pytest.raises(ValueError, match="masks must have shape"):
        lp.part_iou(zs, torch.zeros(1, 3, 4, 4), torch.tensor([1]))


def test_nearest_palette_colour():
    assert lp.nearest_palette_colour([[1, 0, 0], [0, 1, 0], [0.3, 0.3, 0.9]], ("red", "green", "blue")) == [
        "red", "green", "blue"]


def test_masks_must_match_the_images(birds):
    from dataclasses import replace

    with pytest.raises(ValueError, match="masks must have shape"):
        lp.fit_lucidppn(replace(birds, masks=birds.masks[:, :, :12, :12]), epochs=1)
    with pytest.raises(ValueError, match="masks must have shape"):
        lp.fit_lucidppn(replace(birds, masks=birds.masks[:5]), epochs=1)
    with pytest.raises(ValueError, match="palette"):
        lp.make_birds(2, np.random.default_rng(0), colours=("red",), palette={"red": (1.2, 0, 0)})


# -- training (tiny) ------------------------------------------------------------------------------
def test_training_reduces_the_loss_and_analyses_run(birds):
    model, history = lp.fit_lucidppn(birds, epochs=4, batch_size=8, seed=0)
    assert history[-1]["total"] < history[0]["total"]
    assert lp.colour_prototypes(model, part=0, steps=3).shape == (6, 3)
    assert lp.top_patches(model, birds, part=0, cls=1, n=2, patch=8).shape == (2, 8, 8, 3)
    with pytest.raises(ValueError, match="part must be <"):
        lp.colour_prototypes(model, part=2)
    cnn = lp.fit_blackbox(birds, epochs=2, seed=0)
    assert lp.blackbox_predict(cnn, birds.images).shape == (24,)


# -- custom palettes, the hue swap at kept luminance, the pointwise layers ---------------------------
def test_swap_with_a_custom_palette_stays_in_that_palette():
    leaky = lp.hue_palette({"red": 0.30, "green": 0.45, "blue": 0.60})
    birds = lp.make_birds(3, np.random.default_rng(2), palette=leaky)
    swapped = lp.swap_head_colours(birds)
    target = lp.swapped_labels(birds)
    # a swapped bird is pixel for pixel the bird of the new class painted from the same (leaky) palette
    heads = birds.masks[:, 0] > 0
    for i in range(len(birds)):
        new_colour = np.array(leaky[birds.colours[target[i] // 2]])
        np.testing.assert_allclose(swapped.images[i].transpose(1, 2, 0)[heads[i]], np.broadcast_to(new_colour, (heads[i].sum(), 3)),
                                   atol=1e-6)
    # the leaky palette changes luminance under the swap (the default palette would not)
    assert np.abs(lp.luminance(swapped.images) - lp.luminance(birds.images)).max() > 0.1
    with pytest.raises(ValueError, match="permutation"):
        lp.swap_head_colours(birds, {"red": "yellow"})
    with pytest.raises(ValueError, match="palette"):
        lp.swap_head_colours(birds, palette={"red": (1.0, 0.0, 0.0)})


def test_hue_palette_and_the_luminance_preserving_hue_swap():
    assert lp.hue_palette({c: lp.HEAD_LUMINANCE for c in lp.PALETTE}) == lp.PALETTE
    with pytest.raises(ValueError, match="unknown colour"):
        lp.hue_palette({"purple": 0.4})
    train, test, swapped, target = lp.leaky_data(0, 2, 2)
    np.testing.assert_allclose(lp.luminance(swapped.images), lp.luminance(test.images), atol=1e-6)
    assert not np.allclose(swapped.images, test.images)
    np.testing.assert_array_equal(target, lp.swapped_labels(test))
    # the grey images of the classes differ: the grey branch can read the colour class from luminance
    head_lum = [lp.luminance(test.images.transpose(0, 2, 3, 1)[i][test.masks[i, 0] > 0]).mean() for i in range(len(test))]
    np.testing.assert_allclose(head_lum, np.array([0.30, 0.45, 0.60])[test.colour_index()], atol=1e-6)


def test_nearest_palette_colour_with_a_custom_palette():
    leaky = lp.hue_palette({"red": 0.30, "green": 0.45, "blue": 0.60})
    assert lp.nearest_palette_colour(np.array([leaky["blue"]]), ["red", "blue"], leaky) == ["blue"]
    with pytest.raises(ValueError, match="names"):
        lp.nearest_palette_colour(np.zeros((1, 3)), ["purple"])


def test_pointwise_layers_equal_the_1x1_convolutions():
    torch.manual_seed(0)
    net = lp.ColorNet(2, 3)
    x = torch.rand(4, 3, 5, 6)
    torch.testing.assert_close(net.forward(x, (5, 6)),
                               torch.sigmoid(net.mlp(net.pixel_colours(x, (5, 6)))).unflatten(1, (2, 3)))
    shape = lp.ShapeTexNet(2, 3).eval()
    grey = torch.rand(4, 3, 12, 12)
    ref = torch.sigmoid(shape.add_on(shape.features((grey - lp.GREY_MEAN) / lp.GREY_STD))).unflatten(1, (2, 3))
    torch.testing.assert_close(shape(grey), ref)


def test_run_experiment_without_the_cnn_and_run_leaky_on_tiny_data():
    res = lp.run_experiment(0, n_train=2, n_test=1, epochs=1, alphas=(1.4,), cnn=False)
    assert "cnn_acc" not in res and set(res["alpha"]) == {1.4}
    assert 0 <= res["alpha"][1.4]["prototype_colour_correct"] <= 6
    leaky = lp.run_leaky(0, n_train=2, n_test=1, epochs=1, cnn_epochs=1)
    assert leaky["shape_agreement"] == 1.0
    assert leaky["follows_hue"] + leaky["keeps_class"] <= 1.0


# -- device (issue 37): the models train on a device argument, the GPU when present ----------------------
def test_an_explicit_cpu_device_gives_the_same_numbers(birds):
    """On the CPU, device="cpu" computes bit for bit what the default computes; models and results stay there."""
    from companion_lib.common import module_device

    kw = dict(n_train=2, n_test=1, epochs=1, cnn_epochs=1)
    a, b = lp.run_experiment(0, alphas=(1.4, 0.0), device="cpu", **kw), lp.run_experiment(0, alphas=(1.4, 0.0), **kw)
    assert a["alpha"] == b["alpha"] and a["cnn_acc"] == b["cnn_acc"]
    for alpha in (1.4, 0.0):
        for key, t in a["models"][alpha].items():
            assert t.device.type == "cpu" and torch.equal(t, b["models"][alpha][key]), key
    assert lp.run_leaky(0, device="cpu", **kw) == lp.run_leaky(0, **kw)
    (m1, h1), (m2, h2) = lp.fit_lucidppn(birds, epochs=1, batch_size=8, device="cpu"), lp.fit_lucidppn(birds, epochs=1, batch_size=8)
    assert h1 == h2 and module_device(m1).type == "cpu"
    assert all(torch.equal(p, q) for p, q in zip(m1.state_dict().values(), m2.state_dict().values()))
    cnn = lp.fit_blackbox(birds, epochs=1, device=torch.device("cpu"))
    assert module_device(cnn).type == "cpu"
    out = lp.lucid_predict(m1, birds.images)
    assert all(t.device.type == "cpu" for t in out)


def test_the_losses_run_on_the_maps_device():
    """Masks and labels given on the CPU follow the maps: on the meta device a CPU tensor left behind would raise."""
    zs = torch.rand(3, 2, 6, 12, 12, device="meta")
    out = _output(zs, torch.rand(3, 2, 6, 12, 12, device="meta"))
    losses = lp.lucid_losses(out, np.zeros((3, 2, 24, 24), np.float32), np.array([0, 5, 2]))
    assert {v.device.type for v in losses.values()} == {"meta"}
    assert losses["total"].shape == ()
