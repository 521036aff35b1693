"""Unit tests for companion_lib.event_isp (Lu et al., RGB-Event ISP, ICLR 2025)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion_lib import event_isp as ei


# -- simulator --------------------------------------------------------------------------------------
def test_quad_bayer_phase_and_packing():
    pattern = ei.quad_bayer_pattern(8, 8)
    np.testing.assert_array_equal(pattern[:4, :4], [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 2, 2], [1, 1, 2, 2]])
    planes = ei.pack_quad_bayer(pattern)
    assert planes.shape == (4, 4, 4)
    # plane 0 holds only red pixels, planes 1 and 2 only green, plane 3 only blue
    for k, colour in enumerate([0, 1, 1, 2]):
        assert (planes[k] == colour).all()
    raw = np.arange(2 * 8 * 12).reshape(2, 8, 12)
    np.testing.assert_array_equal(ei.unpack_quad_bayer(ei.pack_quad_bayer(raw)), raw)


def test_mosaic_samples_the_right_channel():
    cam = np.zeros((4, 4, 3))
    cam[..., 0], cam[..., 1], cam[..., 2] = 0.1, 0.5, 0.9
    np.testing.assert_allclose(ei.mosaic_quad_bayer(cam), np.choose(ei.quad_bayer_pattern(4, 4), [0.1, 0.5, 0.9]))


def test_mosaic_rejects_bad_images():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ei.mosaic_quad_bayer(np.full((4, 4, 3), 1.5))
    with pytest.raises(ValueError, match="multiples of 4"):
        ei.mosaic_quad_bayer(np.zeros((6, 8, 3)))
    with pytest.raises(ValueError, match="multiples of 4"):
        ei.quad_bayer_pattern(5, 8)


def test_mean_photon_count_and_gain():
    sensor = ei.SensorConfig(fpn_sigma=0.0, read_noise=0.0)
    rng = np.random.default_rng(0)
    level = 0.3
    for exposure in (1.0, 0.25):
        raw = ei.expose(np.full((200, 200), level), exposure, rng, sensor).astype(float)
        expected = sensor.black_level + level * (sensor.white_level - sensor.black_level)
        assert abs(raw.mean() - expected) < 0.5
        # shot noise: variance in DN is gain^2 * photons = gain * (signal in DN above black)
        gain = (sensor.white_level - sensor.black_level) / (sensor.full_well * exposure)
        assert raw.var() == pytest.approx(gain * (expected - sensor.black_level) + 1 / 12, rel=0.1)


def test_expose_rejects_negative_exposure():
    with pytest.raises(ValueError, match="exposure"):
        ei.expose(np.zeros((4, 4)), -1.0, np.random.default_rng(0))


def test_dark_frame_holds_the_fixed_pattern():
    sensor = ei.SensorConfig(read_noise=0.0)
    rng = np.random.default_rng(1)
    dark = ei.dark_frame(8, 16, sensor)
    raw = ei.expose(np.zeros((8, 16)), 1.0, rng, sensor).astype(float)
    assert np.abs(raw - dark).max() <= 0.5 + 1e-9
    assert np.std(dark[0]) > 0.5    # columns differ


def test_event_polarity_on_a_brightening_ramp():
    frames = np.stack([np.full((4, 4, 3), 0.1 * np.exp(0.1 * k)) for k in range(9)])   # log I grows by 0.1
    grid = ei.simulate_events(frames, n_bins=8, threshold=0.15, noise_rate=0.0)
    assert grid.shape == (8, 2, 2)
    assert (grid >= 0).all()
    # the log intensity grows by 0.8 in total: floor(0.8 / 0.15) = 5 positive events per pixel
    np.testing.assert_allclose(grid.sum(axis=0), np.floor(0.8 / 0.15 + 1e-9), atol=1)
    darkening = ei.simulate_events(frames[::-1], n_bins=8, threshold=0.15, noise_rate=0.0)
    assert (darkening <= 0).all() and darkening.sum() < 0


def test_events_reject_bad_arguments():
    frames = np.zeros((3, 4, 4, 3))
    with pytest.raises(ValueError, match="threshold"):
        ei.simulate_events(frames, threshold=0.0)
    with pytest.raises(ValueError, match="n_bins"):
        ei.simulate_events(frames, n_bins=0)


def test_capture_shapes_and_motion():
    scene = ei.srgb_to_linear(np.random.default_rng(0).random((80, 80, 3)))
    cap = ei.simulate_capture(scene, np.random.default_rng(1), size=16, blur=6.0, exposure=0.25)
    assert cap.raw.shape == (16, 16) and cap.raw.dtype == np.uint8
    assert cap.events.shape == (8, 8, 8) and cap.target.shape == (16, 16, 3)
    still = ei.simulate_capture(scene, np.random.default_rng(1), size=16, blur=0.0, noise_rate=0.0)
    assert np.abs(still.events).sum() == 0       # no motion, no noise events: no events
    with pytest.raises(ValueError, match="blur"):
        ei.simulate_capture(scene, np.random.default_rng(1), size=16, blur=-1.0)


def test_colorchecker_chart():
    image, boxes = ei.render_colorchecker(patch=8, border=2)
    assert boxes.shape == (24, 4) and image.shape[0] % 4 == 0 and image.shape[1] % 4 == 0
    patches = ei.patch_means(image, boxes)
    np.testing.assert_allclose(patches, ei.COLORCHECKER_SRGB ** (1 / ei.GAMMA), atol=1e-12)


# -- conventional ISP -------------------------------------------------------------------------------
def test_isp_on_a_flat_grey_field():
    sensor = ei.SensorConfig(fpn_sigma=1.5, read_noise=0.0)
    grey = np.full((16, 16, 3), 0.2)
    cam = ei.linear_to_camera(grey, sensor)
    np.testing.assert_allclose(cam[0, 0] * np.asarray(sensor.wb_gains), 0.2, atol=1e-12)  # M maps grey to grey
    raw = ei.expose(ei.mosaic_quad_bayer(cam), 1.0, np.random.default_rng(0),
                    ei.SensorConfig(fpn_sigma=1.5, read_noise=0.0, full_well=1e7))
    dark = ei.dark_frame(16, 16, sensor)
    x = ei.normalize_raw(raw, dark, sensor)
    rgb = ei.demosaic_quad_bayer(x)
    gains = ei.white_balance_gains(np.tile(rgb.reshape(-1, 3).mean(0), (24, 1)))
    np.testing.assert_allclose(gains, sensor.wb_gains, rtol=0.03)
    assert np.std(rgb[..., 1]) < 0.01              # dark-frame subtraction removes the column pattern


def test_demosaic_rejects_unknown_method():
    with pytest.raises(ValueError, match="method"):
        ei.demosaic_quad_bayer(np.zeros((8, 8)), method="magic")


def test_fit_ccm_recovers_a_matrix_and_preserves_white():
    rng = np.random.default_rng(0)
    M = np.array([[1.5, -0.3, -0.2], [-0.2, 1.4, -0.2], [0.0, -0.4, 1.4]])
    P = rng.random((24, 3))
    np.testing.assert_allclose(ei.fit_ccm(P, P @ M.T), M, atol=1e-10)
    noisy = P @ M.T + 0.01 * rng.standard_normal(P.shape)
    Mw = ei.fit_ccm(P, noisy, preserve_white=True)
    np.testing.assert_allclose(Mw.sum(axis=1), 1.0, atol=1e-12)
    ref = np.linalg.lstsq(P, noisy, rcond=None)[0].T
    np.testing.assert_allclose(ei.fit_ccm(P, noisy), ref, atol=1e-10)


def test_calibration_recovers_gains_and_reduces_delta_e():
    isp, chart = ei.calibrate(np.random.default_rng(0))
    report = ei.calibration_report(isp)
    assert report["max_gain_error"] < 0.1
    assert report["dE_ccm"] < 0.5 * report["dE_white_balanced"] < report["dE_camera"]
    stages = isp.process(chart["raw"], chart["dark"], stages=True)
    assert list(stages) == ["normalized", "demosaiced", "white_balanced", "denoised", "color_corrected", "display"]
    assert stages["display"].shape == chart["linear"].shape


def test_delta_e_agrees_with_colour():
    a = np.array([0.2, 0.3, 0.4])
    assert ei.delta_e2000(a, a) == pytest.approx(0.0, abs=1e-9)
    assert ei.delta_e2000(a, a * 1.1) > 0.5


def test_metrics():
    t = np.full((1, 8, 8, 3), 0.5)
    m = ei.image_metrics(t + 0.1, t)
    assert m["PSNR"][0] == pytest.approx(20.0, abs=1e-6) and m["L1"][0] == pytest.approx(0.1)
    assert ei.ssim(t[0], t[0]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="match"):
        ei.image_metrics(t, t[:, :4])


# -- models -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ei.MODEL_CLASSES))
def test_models_map_packed_raw_to_full_resolution(name):
    torch.manual_seed(0)
    model = ei.build_model(name, width=4, event_bins=3)
    raw, events, base = torch.rand(2, 4, 8, 8), torch.rand(2, 3, 8, 8), torch.rand(2, 3, 16, 16)
    assert model(raw, events, base).shape == (2, 3, 16, 16)
    assert ei.count_parameters(model) > 0


def test_event_unet_uses_events_and_unet_ignores_them():
    torch.manual_seed(0)
    ev, plain = ei.build_model("EV-UNet", width=4, event_bins=3), ei.build_model("UNet", width=4)
    raw = torch.rand(1, 4, 8, 8)
    assert torch.count_nonzero(ev(raw, torch.rand(1, 3, 8, 8))) == 0     # residual models start at zero
    for model in (ev, plain):
        torch.nn.init.normal_(model.head.weight)
    e1, e2 = torch.rand(1, 3, 8, 8), torch.rand(1, 3, 8, 8)
    assert not torch.allclose(ev(raw, e1), ev(raw, e2))
    assert torch.allclose(plain(raw, e1), plain(raw, e2))
    with pytest.raises(ValueError, match="events"):
        ev(raw)


def test_build_model_rejects_unknown_names():
    with pytest.raises(ValueError, match="name"):
        ei.build_model("PyNet")
    with pytest.raises(ValueError, match="residual"):
        ei.build_model("TwoStage", residual=False)


@pytest.mark.parametrize("name", ["UNet", "EV-UNet"])
def test_from_scratch_models_ignore_the_conventional_output(name):
    """A residual model's prediction is the conventional output plus its correction (at start, the output
    itself); a from-scratch model's prediction does not depend on the conventional output at all."""
    torch.manual_seed(0)
    n = 3
    tensors = {"raw": torch.rand(n, 4, 8, 8), "events": torch.rand(n, 3, 8, 8), "base": torch.rand(n, 3, 16, 16)}
    other = dict(tensors, base=torch.rand(n, 3, 16, 16))
    residual = ei.build_model(name, width=4, event_bins=3)
    scratch = ei.build_model(name, width=4, event_bins=3, residual=False)
    assert np.allclose(ei.predict_isp(residual, tensors), np.moveaxis(tensors["base"].numpy(), 1, -1), atol=1e-6)
    assert not np.allclose(ei.predict_isp(residual, tensors), ei.predict_isp(residual, other))
    assert np.allclose(ei.predict_isp(scratch, tensors), ei.predict_isp(scratch, other))
    assert torch.count_nonzero(scratch.head.weight) > 0      # default initialisation, not the residual's zeros


def test_training_reduces_the_loss():
    rng = np.random.default_rng(0)
    scene = ei.srgb_to_linear(rng.random((96, 96, 3)))
    data = ei.simulate_dataset({"noise": scene}, 16, rng, size=16, max_blur=4.0)
    dark = ei.dark_frame(16, 16)
    isp, _ = ei.calibrate(rng)
    tensors = ei.to_tensors(data, isp.process_batch(data["raw"], dark), dark)
    torch.manual_seed(0)
    model = ei.build_model("UNet", width=4)
    fit = ei.train_isp(model, tensors, steps=30, batch=8, lr=3e-3, seed=0)
    assert fit["loss"][-5:].mean() < fit["loss"][:5].mean()
    out = ei.predict_isp(model, tensors)
    assert out.shape == (16, 16, 16, 3) and out.min() >= 0 and out.max() <= 1
    with pytest.raises(ValueError, match="steps"):
        ei.train_isp(model, tensors, steps=0)


def test_an_explicit_cpu_device_gives_the_same_numbers():
    """Issue 37: the models train and predict on a device argument (the GPU when present); on the CPU,
    passing device="cpu" explicitly changes nothing, bit for bit."""
    kw = dict(n_train=4, n_test=2, size=16, steps=2, batch=2, width=4, models=("TwoStage", "EV-UNet"),
              scratch_models=("UNet",), sweep_blurs=(8,), n_sweep=2, n_examples=2)
    a, b = ei.run_benchmark(0, **kw), ei.run_benchmark(0, device="cpu", **kw)
    metrics = ["PSNR", "SSIM", "L1", "params"]
    assert a["table"][["model", "mode", *metrics]].equals(b["table"][["model", "mode", *metrics]])
    assert a["sweep"].equals(b["sweep"])
    assert all(np.array_equal(a["losses"][k], b["losses"][k]) for k in a["losses"])
    assert all(np.array_equal(a["examples"][k], b["examples"][k]) for k in a["examples"])


def test_training_runs_on_the_models_device():
    """train_isp moves each CPU-drawn batch to the model's device: on the meta device (which computes
    nothing) a step runs through forward, backward and the optimizer and stops only at reading the loss,
    where a batch left on the CPU would have failed earlier, in the backward pass."""
    torch.manual_seed(0)
    tensors = {"raw": torch.rand(4, 4, 8, 8), "events": torch.rand(4, 8, 8, 8), "base": torch.rand(4, 3, 16, 16),
               "target": torch.rand(4, 3, 16, 16), "target_linear": torch.rand(4, 3, 16, 16)}
    for name in ("TwoStage", "EV-UNet"):
        model = ei.build_model(name, width=4).to("meta")
        with pytest.raises(RuntimeError, match="item.*meta"):
            ei.train_isp(model, tensors, steps=1, batch=2)
