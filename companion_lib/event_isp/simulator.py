r"""A synthetic RGB-event camera: the stand-in for the paper's confidential hybrid vision sensor.

Lu et al., *RGB-Event ISP: The Dataset and Benchmark* (ICLR 2025) record pixel-aligned quad-Bayer RAW
frames and events with one sensor. Their data are licensed on request, so this module simulates the same
kind of capture from images bundled with scikit-image:

- the scene is linear light $L$ (display images pre-linearised with $L = I^{1/\gamma}$, $\gamma = 0.45$,
  the paper's display transfer), mapped into a camera colour space $c = W^{-1} M^{-1} L$ with a colour
  correction matrix $M$ and white-balance gains $W$;
- motion during the exposure: $K$ sharp sub-frames along a line; the RAW integrates all of them (blur),
  the reference image is the clean middle sub-frame;
- a quad-Bayer mosaic (4 x 4 tile ``RR GG / RR GG / GG BB / GG BB``), Poisson shot noise on
  $N_\mathrm{fw}\,\tau\,c$ electrons (full well $N_\mathrm{fw}$, exposure mode $\tau$), Gaussian read noise,
  a gain back to the full range, black level, a fixed column pattern, white level and 8-bit quantisation;
- events at half resolution (one event pixel per 2 x 2 quad): a pixel fires a signed event each time
  its log intensity moves by the contrast threshold $C$ from its reference,
  $|\log I_k - \log I_\mathrm{ref}| \ge C$, and the events are binned into a voxel grid of $B$ time bins on
  the same grid as the packed RAW.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..common.validation import check_int, check_positive, check_positive_int, check_probability

__all__ = [
    "SensorConfig", "Capture", "COLORCHECKER_SRGB", "GAMMA", "TRAIN_SCENES", "TEST_SCENES",
    "srgb_to_linear", "linear_to_display", "load_scenes", "linear_to_camera", "quad_bayer_pattern",
    "mosaic_quad_bayer", "pack_quad_bayer", "unpack_quad_bayer", "fixed_pattern_noise", "dark_frame",
    "expose", "motion_subframes", "luminance", "simulate_events", "render_colorchecker",
    "simulate_capture", "simulate_dataset",
]

#: The paper's display transfer (``RGBE_ISP.m``: a pure power law, not the sRGB curve).
GAMMA = 0.45
#: Scenes for training and testing: split by image, as the paper splits by sequence.
TRAIN_SCENES = ("astronaut", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field", "retina")
TEST_SCENES = ("chelsea", "colorwheel")

#: The 24 patches of the ColorChecker Classic in 8-bit sRGB, row by row (dark skin ... black); patch 21
#: (1-based) is "neutral 6.5", the paper's white-balance reference.
COLORCHECKER_SRGB = np.array([
    [115, 82, 68], [194, 150, 130], [98, 122, 157], [87, 108, 67], [133, 128, 177], [103, 189, 170],
    [214, 126, 44], [80, 91, 166], [193, 90, 99], [94, 60, 108], [157, 188, 64], [224, 163, 46],
    [56, 61, 150], [70, 148, 73], [175, 54, 60], [231, 199, 31], [187, 86, 149], [8, 133, 161],
    [243, 243, 242], [200, 200, 200], [160, 160, 160], [122, 122, 121], [85, 85, 85], [52, 52, 52],
], dtype=float) / 255.0

# A plausible camera-to-sRGB colour correction matrix (rows sum to one: white stays white).
_DEFAULT_CCM = ((1.62, -0.42, -0.20), (-0.28, 1.46, -0.18), (0.02, -0.52, 1.50))


@dataclass(frozen=True)
class SensorConfig:
    r"""The simulated sensor.

    full_well: electrons at the white level in the normal exposure mode ($N_\mathrm{fw}$).
    read_noise: Gaussian read noise in electrons. black_level, white_level: in 8-bit DN.
    fpn_sigma: standard deviation (DN) of the fixed column offsets; fpn_seed fixes them for a sensor.
    wb_gains: the true white-balance gains $W$ (camera G/R, 1, G/B of a grey).
    ccm: the true colour correction matrix $M$ (white-balanced camera RGB to linear sRGB).
    """

    full_well: float = 800.0
    read_noise: float = 2.0
    black_level: float = 16.0
    white_level: float = 242.0
    fpn_sigma: float = 1.5
    fpn_seed: int = 2025
    wb_gains: tuple = (2.0, 1.0, 1.6)
    ccm: tuple = _DEFAULT_CCM


@dataclass
class Capture:
    """One simulated capture. raw: (H, W) uint8 quad-Bayer RAW; events: (B, H/2, W/2) signed event counts;
    target: (H, W, 3) display-referred clean middle sub-frame; target_linear: the same in linear light;
    blur: motion length in pixels; exposure: the exposure mode (1 normal, < 1 low light)."""

    raw: np.ndarray
    events: np.ndarray
    target: np.ndarray
    target_linear: np.ndarray
    blur: float
    exposure: float
    meta: dict = field(default_factory=dict)


def _check_image(image: np.ndarray, name: str = "image", channels: int | None = 3) -> np.ndarray:
    image = np.asarray(image, dtype=float)
    if channels is not None and (image.ndim != 3 or image.shape[-1] != channels):
        raise ValueError(f"{name} must have shape (H, W, {channels}), got {image.shape}")
    if not np.all(np.isfinite(image)) or image.min() < 0 or image.max() > 1:
        raise ValueError(f"{name} must hold finite values in [0, 1]")
    return image


def srgb_to_linear(image: np.ndarray) -> np.ndarray:
    r"""Pre-linearise a display image: $L = I^{1/\gamma}$ with the paper's $\gamma = 0.45$."""
    return _check_image(image, channels=None) ** (1.0 / GAMMA)


def linear_to_display(linear: np.ndarray) -> np.ndarray:
    r"""The paper's display transfer $y = \mathrm{clip}(x)^{\gamma}$, $\gamma = 0.45$."""
    return np.clip(linear, 0.0, 1.0) ** GAMMA


def load_scenes(names=TRAIN_SCENES + TEST_SCENES, max_side: int = 512) -> dict:
    """Linear-light scenes from :mod:`skimage.data`, decimated by an integer factor so that no side exceeds
    ``max_side`` (the two large images shrink by 2 or 3)."""
    from skimage import data

    max_side = check_positive_int(max_side, "max_side")
    scenes = {}
    for name in names:
        image = getattr(data, name)()[..., :3].astype(float) / 255.0
        step = int(np.ceil(max(image.shape[:2]) / max_side))
        if step > 1:   # box-average decimation keeps the image free of aliasing
            h, w = (image.shape[0] // step) * step, (image.shape[1] // step) * step
            image = image[:h, :w].reshape(h // step, step, w // step, step, 3).mean(axis=(1, 3))
        scenes[name] = srgb_to_linear(image)
    return scenes


def linear_to_camera(linear: np.ndarray, sensor: SensorConfig = SensorConfig()) -> np.ndarray:
    r"""Camera RGB of a linear sRGB image, $c = W^{-1} M^{-1} L$, clipped to [0, 1]."""
    linear = _check_image(linear, "linear")
    camera = linear @ np.linalg.inv(np.asarray(sensor.ccm)).T / np.asarray(sensor.wb_gains)
    return np.clip(camera, 0.0, 1.0)


def _check_mosaic_size(h: int, w: int, name: str) -> None:
    if h % 4 or w % 4 or h == 0 or w == 0:
        raise ValueError(f"{name} must have a height and width that are positive multiples of 4 "
                         f"(one quad-Bayer tile), got {h} x {w}")


def quad_bayer_pattern(height: int, width: int) -> np.ndarray:
    """Channel index (0 R, 1 G, 2 B) of every pixel of a quad-Bayer sensor: the 4 x 4 tile is
    ``RR GG / RR GG / GG BB / GG BB``."""
    height, width = check_positive_int(height, "height"), check_positive_int(width, "width")
    _check_mosaic_size(height, width, "the mosaic")
    tile = np.array([[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 2, 2], [1, 1, 2, 2]])
    return np.tile(tile, (height // 4, width // 4))


def mosaic_quad_bayer(camera: np.ndarray) -> np.ndarray:
    """Sample a camera-RGB image through the quad-Bayer colour filter array: (H, W, 3) -> (H, W)."""
    camera = _check_image(camera, "camera")
    h, w = camera.shape[:2]
    _check_mosaic_size(h, w, "camera")
    pattern = quad_bayer_pattern(h, w)
    return np.take_along_axis(camera, pattern[..., None], axis=2)[..., 0]


def pack_quad_bayer(raw: np.ndarray) -> np.ndarray:
    """Pack a quad-Bayer RAW (..., H, W) into 4 planes (..., 4, H/2, W/2): R, G1, G2, B.

    Each plane keeps its own 2 x 2 sub-mosaic: plane R holds ``raw[4i+a, 4j+b]``, G1 ``raw[4i+a, 4j+2+b]``,
    G2 ``raw[4i+2+a, 4j+b]`` and B ``raw[4i+2+a, 4j+2+b]`` at ``[2i+a, 2j+b]`` (the official
    ``quad_raw_to_rggb``). The planes share the event grid (one event pixel per quad)."""
    raw = np.asarray(raw)
    h, w = raw.shape[-2:]
    _check_mosaic_size(h, w, "raw")
    lead = raw.shape[:-2]
    tiles = raw.reshape(*lead, h // 4, 2, 2, w // 4, 2, 2)   # (i, quad row, a, j, quad col, b)
    n = len(lead)
    order = list(range(n)) + [n + 1, n + 4, n + 0, n + 2, n + 3, n + 5]
    planes = tiles.transpose(order)                          # (quad row, quad col, i, a, j, b)
    return planes.reshape(*lead, 4, h // 2, w // 2)


def unpack_quad_bayer(planes: np.ndarray) -> np.ndarray:
    """The inverse of :func:`pack_quad_bayer`: (..., 4, H/2, W/2) -> (..., H, W)."""
    planes = np.asarray(planes)
    if planes.ndim < 3 or planes.shape[-3] != 4:
        raise ValueError(f"planes must have shape (..., 4, H/2, W/2), got {planes.shape}")
    h2, w2 = planes.shape[-2:]
    _check_mosaic_size(2 * h2, 2 * w2, "the unpacked raw")
    lead = planes.shape[:-3]
    n = len(lead)
    x = planes.reshape(*lead, 2, 2, h2 // 2, 2, w2 // 2, 2)  # (quad row, quad col, i, a, j, b)
    order = list(range(n)) + [n + 2, n + 0, n + 3, n + 4, n + 1, n + 5]
    return x.transpose(order).reshape(*lead, 2 * h2, 2 * w2)


def fixed_pattern_noise(width: int, sensor: SensorConfig = SensorConfig()) -> np.ndarray:
    """The sensor's fixed column offsets in DN (the same for every capture of one sensor)."""
    width = check_positive_int(width, "width")
    return np.random.default_rng(sensor.fpn_seed).normal(0.0, sensor.fpn_sigma, size=width)


def dark_frame(height: int, width: int, sensor: SensorConfig = SensorConfig()) -> np.ndarray:
    """The calibration dark frame in DN: black level plus the fixed column pattern (what averaging many
    capped-lens captures gives)."""
    height = check_positive_int(height, "height")
    return np.broadcast_to(sensor.black_level + fixed_pattern_noise(width, sensor), (height, width)).copy()


def expose(mosaic: np.ndarray, exposure: float, rng: np.random.Generator,
           sensor: SensorConfig = SensorConfig()) -> np.ndarray:
    r"""Turn a mosaic of relative irradiance in [0, 1] into an 8-bit RAW.

    Electrons $e \sim \mathrm{Poisson}(N_\mathrm{fw}\,\tau\,c) + \mathcal N(0, \sigma_r^2)$; the analog gain
    $g = (w - b)/(N_\mathrm{fw}\tau)$ brings every exposure mode to the same DN range (low light is
    noisier, not darker): $R = \mathrm{round}(\mathrm{clip}(b + \mathrm{FPN} + g\,e, 0, 255))$, then clipped at
    the white level $w$."""
    mosaic = np.asarray(mosaic, dtype=float)
    if mosaic.ndim != 2 or not np.all(np.isfinite(mosaic)) or mosaic.min() < 0 or mosaic.max() > 1:
        raise ValueError("mosaic must be a 2-D array of values in [0, 1]")
    exposure = check_positive(exposure, "exposure")
    photons = sensor.full_well * exposure
    electrons = rng.poisson(photons * mosaic) + rng.normal(0.0, sensor.read_noise, size=mosaic.shape)
    gain = (sensor.white_level - sensor.black_level) / photons
    dn = sensor.black_level + fixed_pattern_noise(mosaic.shape[1], sensor) + gain * electrons
    return np.clip(np.round(dn), 0, sensor.white_level).astype(np.uint8)


def motion_subframes(scene: np.ndarray, top: int, left: int, size: int, blur: float, angle: float,
                     n_sub: int = 9) -> np.ndarray:
    """``n_sub`` sharp crops of ``scene`` (size x size) whose offsets move by ``blur`` pixels along
    ``angle`` during the exposure (integer offsets, centred on (top, left)): (n_sub, size, size, 3)."""
    n_sub = check_int(n_sub, "n_sub", low=1)
    if blur < 0:
        raise ValueError(f"blur must be >= 0 pixels, got {blur}")
    t = np.linspace(-0.5, 0.5, n_sub) if n_sub > 1 else np.zeros(1)
    dy = np.round(t * blur * np.sin(angle)).astype(int)
    dx = np.round(t * blur * np.cos(angle)).astype(int)
    h, w = scene.shape[:2]
    if top + dy.min() < 0 or left + dx.min() < 0 or top + dy.max() + size > h or left + dx.max() + size > w:
        raise ValueError("the motion path leaves the scene; choose a crop further from the border")
    return np.stack([scene[top + y: top + y + size, left + x: left + x + size] for y, x in zip(dy, dx)])


def luminance(linear: np.ndarray) -> np.ndarray:
    """Rec. 709 luminance of linear RGB (..., 3) -> (...)."""
    return np.asarray(linear) @ np.array([0.2126, 0.7152, 0.0722])


def simulate_events(subframes: np.ndarray, n_bins: int = 8, threshold: float = 0.15,
                    rng: np.random.Generator | None = None, noise_rate: float = 0.01,
                    eps: float = 1e-3) -> np.ndarray:
    r"""Events of a half-resolution event sensor watching the sharp sub-frames, as a voxel grid.

    Each event pixel sees the mean luminance of one 2 x 2 quad, $I_k$. It keeps a reference
    $\ell_\mathrm{ref}$ (the log intensity at its last event) and at sub-frame $k$ fires
    $n = \mathrm{sign}(\Delta)\lfloor|\Delta|/C\rfloor$ events, $\Delta = \log(I_k+\epsilon) - \ell_\mathrm{ref}$,
    then moves the reference by $nC$. The $K - 1$ sub-frame intervals are spread over ``n_bins`` bins;
    ``noise_rate`` is the share of pixels per bin that get one spurious event of random sign.
    Returns (n_bins, H/2, W/2) signed counts."""
    subframes = np.asarray(subframes, dtype=float)
    if subframes.ndim != 4 or subframes.shape[-1] != 3 or subframes.shape[0] < 2:
        raise ValueError(f"subframes must have shape (K >= 2, H, W, 3), got {subframes.shape}")
    n_bins = check_int(n_bins, "n_bins", low=1)
    threshold = check_positive(threshold, "threshold")
    noise_rate = check_probability(noise_rate, "noise_rate")
    k, h, w = subframes.shape[:3]
    if h % 2 or w % 2:
        raise ValueError(f"subframes must have even height and width, got {h} x {w}")
    y = luminance(subframes).reshape(k, h // 2, 2, w // 2, 2).mean(axis=(2, 4))
    log_i = np.log(y + eps)
    reference = log_i[0].copy()
    grid = np.zeros((n_bins, h // 2, w // 2))
    bins = np.minimum((np.arange(k - 1) * n_bins) // (k - 1), n_bins - 1)
    for step in range(1, k):
        delta = log_i[step] - reference
        fired = np.sign(delta) * np.floor(np.abs(delta) / threshold)
        reference += fired * threshold
        grid[bins[step - 1]] += fired
    if noise_rate > 0:
        rng = np.random.default_rng() if rng is None else rng
        noisy = rng.random(grid.shape) < noise_rate
        grid[noisy] += rng.choice([-1.0, 1.0], size=int(noisy.sum()))
    return grid


def render_colorchecker(patch: int = 16, border: int = 4, background: float = 0.18):
    """A linear-light image of the 24-patch ColorChecker (4 rows x 6 columns) on a grey card.

    Returns ``(image, boxes)``: image (H, W, 3) in linear sRGB, boxes a (24, 4) int array of
    (top, left, bottom, right) of the inner half of every patch (where patch colours are averaged)."""
    patch, border = check_positive_int(patch, "patch"), check_int(border, "border", low=0)
    pitch = patch + border
    h, w = 4 * pitch + border, 6 * pitch + border
    h, w = h + (-h) % 4, w + (-w) % 4
    image = np.full((h, w, 3), background)
    linear = COLORCHECKER_SRGB ** (1.0 / GAMMA)
    boxes = []
    for k in range(24):
        r, c = divmod(k, 6)
        top, left = border + r * pitch, border + c * pitch
        image[top:top + patch, left:left + patch] = linear[k]
        q = patch // 4
        boxes.append((top + q, left + q, top + patch - q, left + patch - q))
    return image, np.array(boxes)


def simulate_capture(scene: np.ndarray, rng: np.random.Generator, size: int = 32, blur: float = 0.0,
                     exposure: float = 1.0, sensor: SensorConfig = SensorConfig(), n_sub: int = 9,
                     n_bins: int = 8, threshold: float = 0.15, noise_rate: float = 0.01,
                     top: int | None = None, left: int | None = None,
                     angle: float | None = None) -> Capture:
    """One RAW + event capture of a random crop of ``scene`` (linear light) with motion blur ``blur`` px."""
    scene = np.asarray(scene, dtype=float)
    size = check_positive_int(size, "size")
    _check_mosaic_size(size, size, "size")
    exposure = check_positive(exposure, "exposure")
    if blur < 0:
        raise ValueError(f"blur must be >= 0 pixels, got {blur}")
    angle = rng.uniform(0, 2 * np.pi) if angle is None else angle
    margin = int(np.ceil(blur / 2)) + 1
    h, w = scene.shape[:2]
    if h < size + 2 * margin or w < size + 2 * margin:
        raise ValueError(f"scene of {h} x {w} is too small for a {size}-px crop with {blur}-px motion")
    top = int(rng.integers(margin, h - size - margin + 1)) if top is None else top
    left = int(rng.integers(margin, w - size - margin + 1)) if left is None else left
    sub = motion_subframes(scene, top, left, size, blur, angle, n_sub)
    camera = linear_to_camera(sub.mean(axis=0), sensor)
    raw = expose(mosaic_quad_bayer(camera), exposure, rng, sensor)
    events = simulate_events(sub, n_bins, threshold, rng, noise_rate)
    mid = sub[n_sub // 2]
    return Capture(raw=raw, events=events, target=linear_to_display(mid), target_linear=mid,
                   blur=float(blur), exposure=float(exposure), meta={"top": top, "left": left, "angle": angle})


def simulate_dataset(scenes: dict, n: int, rng: np.random.Generator, size: int = 32,
                     max_blur: float = 8.0, blur: float | None = None, exposures=(1.0, 0.25),
                     **kwargs) -> dict:
    """``n`` captures from random scenes, random exposure modes and blur U(0, max_blur) (or a fixed
    ``blur``), stacked: raw (n, H, W) uint8, events (n, B, H/2, W/2), target and target_linear
    (n, H, W, 3), blur (n,), exposure (n,), scene (n,) names."""
    n = check_positive_int(n, "n")
    if not scenes:
        raise ValueError("scenes must hold at least one image")
    names = list(scenes)
    caps, picked = [], []
    for i in range(n):
        name = names[int(rng.integers(len(names)))]
        b = float(rng.uniform(0, max_blur)) if blur is None else float(blur)
        e = float(exposures[i % len(exposures)])
        caps.append(simulate_capture(scenes[name], rng, size=size, blur=b, exposure=e, **kwargs))
        picked.append(name)
    return {
        "raw": np.stack([c.raw for c in caps]), "events": np.stack([c.events for c in caps]).astype(np.float32),
        "target": np.stack([c.target for c in caps]).astype(np.float32),
        "target_linear": np.stack([c.target_linear for c in caps]).astype(np.float32),
        "blur": np.array([c.blur for c in caps]), "exposure": np.array([c.exposure for c in caps]),
        "scene": np.array(picked),
    }
