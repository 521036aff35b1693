r"""The conventional ISP that produces the paper's reference images (``RGBE_ISP.m``), step by step, and
the image-quality metrics of the benchmark.

With $R$ the 8-bit quad-Bayer RAW, $w$ the white level and $D$ a dark calibration frame:

1. normalise and clip: $x = \min(\max(R, 0), w)/w$;
2. black level and fixed pattern: $x \leftarrow \mathrm{clip}(x - D/w, 0, 1)$;
3. demosaic (here: bin each quad to a Bayer pixel, demosaic the half-resolution Bayer image with
   ``colour-demosaicing``, upsample x 2);
4. white balance from the grey patch 21 of a ColorChecker: $g = (c_G/c_R, 1, c_G/c_B)$;
5. denoise (the paper: colour BM3D, $\sigma = 25$; here an optional scikit-image denoiser);
6. colour correction: a 3 x 3 matrix $M$ fitted by least squares on the 24 patches, $y = M(sx)$;
7. display transfer $y \leftarrow y^{\gamma}$, $\gamma = 0.45$.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..common.validation import check_int
from .simulator import GAMMA, SensorConfig, _check_mosaic_size, linear_to_display

__all__ = [
    "NEUTRAL_PATCH", "normalize_raw", "bin_quads", "demosaic_quad_bayer", "patch_means",
    "white_balance_gains", "fit_ccm", "apply_ccm", "denoise", "ConventionalISP", "delta_e2000", "psnr",
    "ssim", "image_metrics",
]

#: Index (0-based) of ColorChecker patch 21, "neutral 6.5", the paper's white-balance reference.
NEUTRAL_PATCH = 20


def normalize_raw(raw: np.ndarray, dark: np.ndarray, sensor: SensorConfig = SensorConfig()) -> np.ndarray:
    r"""Steps 1-2: $x = \mathrm{clip}(\min(\max(R,0),w)/w - D/w,\ 0,\ 1)$ for one RAW (H, W) or a stack."""
    raw = np.asarray(raw, dtype=float)
    dark = np.asarray(dark, dtype=float)
    if raw.shape[-2:] != dark.shape[-2:]:
        raise ValueError(f"dark must match the RAW's last two dimensions {raw.shape[-2:]}, got {dark.shape}")
    w = sensor.white_level
    return np.clip(np.clip(raw, 0, w) / w - dark / w, 0.0, 1.0)


def bin_quads(x: np.ndarray) -> np.ndarray:
    """Average every 2 x 2 quad: a quad-Bayer (H, W) becomes an RGGB Bayer mosaic (H/2, W/2)."""
    x = np.asarray(x, dtype=float)
    h, w = x.shape
    _check_mosaic_size(h, w, "x")
    return x.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))


def _upsample2(image: np.ndarray) -> np.ndarray:
    """Bilinear x 2 upsampling with pixel centres aligned (edge pixels replicated)."""
    out = image
    for axis in (0, 1):
        n = out.shape[axis]
        coords = (np.arange(2 * n) + 0.5) / 2 - 0.5
        lo = np.clip(np.floor(coords).astype(int), 0, n - 1)
        hi = np.clip(lo + 1, 0, n - 1)
        frac = np.clip(coords - np.floor(coords), 0, 1)
        frac = np.where(coords < 0, 0.0, frac)
        a, b = np.take(out, lo, axis=axis), np.take(out, hi, axis=axis)
        shape = [1] * out.ndim
        shape[axis] = -1
        out = a * (1 - frac.reshape(shape)) + b * frac.reshape(shape)
    return out


def demosaic_quad_bayer(x: np.ndarray, method: str = "bilinear") -> np.ndarray:
    """Step 3: quad-Bayer (H, W) -> camera RGB (H, W, 3): bin the quads to an RGGB Bayer image, demosaic
    it with ``colour-demosaicing`` (``bilinear``, ``malvar`` or ``menon``), upsample x 2."""
    with warnings.catch_warnings():   # colour-demosaicing 0.2.7 imports a deprecated scipy namespace
        warnings.simplefilter("ignore", DeprecationWarning)
        import colour_demosaicing as cd

    methods = {"bilinear": cd.demosaicing_CFA_Bayer_bilinear, "malvar": cd.demosaicing_CFA_Bayer_Malvar2004,
               "menon": cd.demosaicing_CFA_Bayer_Menon2007}
    if method not in methods:
        raise ValueError(f"method must be one of {sorted(methods)}, got {method!r}")
    # reflect-pad by two pixels: a reflection by an even width keeps the RGGB phase at the border
    bayer = np.pad(bin_quads(x), 2, mode="reflect")
    rgb = methods[method](bayer, "RGGB")[2:-2, 2:-2]
    return np.clip(_upsample2(rgb), 0.0, 1.0)


def patch_means(image: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Mean colour of every box (top, left, bottom, right) of ``image`` (H, W, 3): (n_boxes, 3)."""
    image = np.asarray(image, dtype=float)
    return np.array([image[t:b, l:r].reshape(-1, image.shape[-1]).mean(axis=0) for t, l, b, r in boxes])


def white_balance_gains(patches: np.ndarray, neutral: int = NEUTRAL_PATCH) -> np.ndarray:
    r"""Step 4: gains $g = (c_G/c_R,\ 1,\ c_G/c_B)$ from the camera colour $c$ of the neutral patch."""
    patches = np.asarray(patches, dtype=float)
    if patches.ndim != 2 or patches.shape[1] != 3:
        raise ValueError(f"patches must have shape (n, 3), got {patches.shape}")
    c = patches[check_int(neutral, "neutral", low=0)]
    if np.any(c <= 0):
        raise ValueError(f"the neutral patch must have positive camera values, got {c}")
    return np.array([c[1] / c[0], 1.0, c[1] / c[2]])


def fit_ccm(measured: np.ndarray, target: np.ndarray, preserve_white: bool = False) -> np.ndarray:
    r"""Step 6: the 3 x 3 matrix $M$ minimising $\sum_k \|M p_k - t_k\|^2$ over the patches.

    Unconstrained: $M^\top = (P^\top P)^{-1} P^\top T$ (rows of $P$, $T$ are patches). With
    ``preserve_white`` every row of $M$ sums to one ($M\mathbf 1 = \mathbf 1$, so a white-balanced grey
    stays grey), solved by a Lagrange multiplier per row:
    $m = m_0 - (P^\top P)^{-1}\mathbf 1\,(\mathbf 1^\top m_0 - 1)/(\mathbf 1^\top (P^\top P)^{-1}\mathbf 1)$."""
    P, T = np.asarray(measured, dtype=float), np.asarray(target, dtype=float)
    if P.shape != T.shape or P.ndim != 2 or P.shape[1] != 3 or P.shape[0] < 3:
        raise ValueError(f"measured and target must both have shape (n >= 3, 3), got {P.shape} and {T.shape}")
    gram_inv = np.linalg.inv(P.T @ P)
    m0 = gram_inv @ P.T @ T                      # column j is row j of M
    if preserve_white:
        ones = np.ones(3)
        u = gram_inv @ ones
        m0 = m0 - np.outer(u, (ones @ m0 - 1.0) / (ones @ u))
    return m0.T


def apply_ccm(image: np.ndarray, M: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """$y = \\mathrm{clip}(M (s x))$ for an image (..., 3)."""
    return np.clip(scale * np.asarray(image) @ np.asarray(M).T, 0.0, 1.0)


def denoise(image: np.ndarray, method: str = "none", strength: float = 0.02) -> np.ndarray:
    """Step 5, optional: ``none``, ``nl_means`` or ``tv`` (scikit-image) on an (H, W, 3) image in [0, 1]."""
    from skimage import restoration

    if method == "none":
        return image
    if method == "nl_means":
        return restoration.denoise_nl_means(image, h=strength, patch_size=3, patch_distance=4,
                                            fast_mode=True, channel_axis=-1)
    if method == "tv":
        return restoration.denoise_tv_chambolle(image, weight=strength, channel_axis=-1)
    raise ValueError(f"method must be 'none', 'nl_means' or 'tv', got {method!r}")


@dataclass
class ConventionalISP:
    """The seven steps with every stage inspectable. ``fit`` calibrates white balance and the colour
    correction matrix on a ColorChecker capture; ``process`` runs a RAW through the pipeline."""

    sensor: SensorConfig = SensorConfig()
    demosaic: str = "bilinear"
    denoiser: str = "none"
    preserve_white: bool = False
    gains: np.ndarray | None = None
    ccm: np.ndarray | None = None

    def fit(self, chart_raw: np.ndarray, dark: np.ndarray, boxes: np.ndarray, target_linear: np.ndarray):
        """Calibrate on a RAW capture of the chart: gains from patch 21, then $M$ on the white-balanced
        patches against their linear sRGB targets (the fitted matrix absorbs the exposure scale $s$)."""
        camera = demosaic_quad_bayer(normalize_raw(chart_raw, dark, self.sensor), self.demosaic)
        self.camera_patches_ = patch_means(camera, boxes)
        self.gains = white_balance_gains(self.camera_patches_)
        self.wb_patches_ = self.camera_patches_ * self.gains
        self.ccm = fit_ccm(self.wb_patches_, target_linear, self.preserve_white)
        return self

    def process(self, raw: np.ndarray, dark: np.ndarray, stages: bool = False):
        """One RAW (H, W) -> display RGB (H, W, 3); with ``stages`` a dict of every intermediate image."""
        if self.gains is None or self.ccm is None:
            raise RuntimeError("call fit() on a ColorChecker capture before process()")
        out = {"normalized": normalize_raw(raw, dark, self.sensor)}
        out["demosaiced"] = demosaic_quad_bayer(out["normalized"], self.demosaic)
        out["white_balanced"] = np.clip(out["demosaiced"] * self.gains, 0.0, 1.0)
        out["denoised"] = denoise(out["white_balanced"], self.denoiser)
        out["color_corrected"] = apply_ccm(out["denoised"], self.ccm)
        out["display"] = linear_to_display(out["color_corrected"])
        return out if stages else out["display"]

    def process_batch(self, raws: np.ndarray, dark: np.ndarray) -> np.ndarray:
        """Display RGB of a stack of RAWs (n, H, W) -> (n, H, W, 3)."""
        return np.stack([self.process(r, dark) for r in raws])


def delta_e2000(linear_a: np.ndarray, linear_b: np.ndarray) -> np.ndarray:
    """CIEDE2000 colour difference between two linear sRGB colours (..., 3), via ``colour-science``
    (sRGB primaries, D65, CIE Lab)."""
    import colour

    space = colour.RGB_COLOURSPACES["sRGB"]
    lab = [colour.XYZ_to_Lab(colour.RGB_to_XYZ(np.clip(np.asarray(x, float), 0, None), space), space.whitepoint)
           for x in (linear_a, linear_b)]
    return colour.delta_E(lab[0], lab[1], method="CIE 2000")


def psnr(prediction: np.ndarray, target: np.ndarray) -> float:
    r"""The benchmark's PSNR on [0, 1] images: $-10\log_{10}(\mathrm{MSE} + 10^{-10})$."""
    mse = float(np.mean((np.asarray(prediction, float) - np.asarray(target, float)) ** 2))
    return -10.0 * np.log10(mse + 1e-10)


def ssim(prediction: np.ndarray, target: np.ndarray) -> float:
    """SSIM of two (H, W, 3) images in [0, 1] (scikit-image, 7 x 7 window, channels averaged)."""
    from skimage.metrics import structural_similarity

    return float(structural_similarity(np.asarray(prediction, float), np.asarray(target, float),
                                       data_range=1.0, channel_axis=-1))


def image_metrics(predictions: np.ndarray, targets: np.ndarray) -> dict:
    """Per-image PSNR, SSIM and L1 of stacks (n, H, W, 3): a dict of (n,) arrays."""
    predictions, targets = np.asarray(predictions), np.asarray(targets)
    if predictions.shape != targets.shape:
        raise ValueError(f"predictions {predictions.shape} and targets {targets.shape} must match")
    return {"PSNR": np.array([psnr(p, t) for p, t in zip(predictions, targets)]),
            "SSIM": np.array([ssim(p, t) for p, t in zip(predictions, targets)]),
            "L1": np.abs(predictions - targets).reshape(len(targets), -1).mean(axis=1)}
