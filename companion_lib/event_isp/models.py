r"""Learnable ISPs in miniature: one model per class of the paper's benchmark, and the event-guided UNet.

Every model maps the packed RAW $X$ (4 planes R, G1, G2, B at half resolution; see
:func:`~companion_lib.event_isp.simulator.pack_quad_bayer`) and, for the event model, the voxel grid $E$
($B$ bins on the same grid) to a full-resolution display RGB image. In the book's *residual* set-up the
network predicts a correction added to the calibrated conventional ISP's output $y_0$:
$\hat y = y_0 + f_\theta(X, E)$, and its last layer starts at zero, so training starts *at* $y_0$. In the
paper's *from-scratch* set-up (``build_model(..., residual=False)``; :class:`UNet` and :class:`EventUNet`
only) the network maps the RAW to RGB on its own, $\hat y = f_\theta(X, E)$, from a default initialisation.

- :class:`PlainCNN`: a full-pipeline network (the class of PyNet, MV-ISPNet, InvertISP);
- :class:`TwoStageISP`: restoration to linear RGB (auxiliary loss), then enhancement (CameraNet, AWNet);
- :class:`UNet`: an image-enhancement network used as an ISP, RAW only (the benchmark's UNet);
- :class:`EventUNet`: the paper's event-guided ISP (``RGBEventISPUNet``): a RAW encoder and an event
  encoder of the same shape, fused by addition at every skip connection,
  $X_\ell \leftarrow \mathrm{conv}\big(\mathrm{conv}(\mathrm{up}(X_{\ell+1})) + S^\mathrm{raw}_\ell + S^\mathrm{ev}_\ell\big)$;
  the deepest features come from the RAW branch alone, as in the official code.

Training: Charbonnier loss $\sqrt{(\hat y - y)^2 + \epsilon^2}$, Adam, cosine learning-rate decay.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..common.device import module_device
from ..common.validation import check_int, check_positive, check_positive_int

__all__ = ["PlainCNN", "TwoStageISP", "UNet", "EventUNet", "MODEL_CLASSES", "build_model", "count_parameters",
           "charbonnier", "train_isp", "predict_isp", "to_tensors"]

_ACT = 0.1  # LeakyReLU slope of the official UNet


def _block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.LeakyReLU(_ACT),
                         nn.Conv2d(c_out, c_out, 3, padding=1), nn.LeakyReLU(_ACT))


def _zero_head(conv: nn.Conv2d) -> nn.Conv2d:
    """A residual model starts as the identity on the conventional ISP: its last layer starts at zero."""
    nn.init.zeros_(conv.weight)
    nn.init.zeros_(conv.bias)
    return conv


def _to_full_resolution(x: torch.Tensor, head: nn.Conv2d) -> torch.Tensor:
    """The official output stage: bilinear x 2 upsampling, then a 3 x 3 convolution to RGB."""
    return head(F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False))


class PlainCNN(nn.Module):
    """A plain stack of 3 x 3 convolutions on the packed RAW (full-pipeline class, e.g. PyNet)."""

    def __init__(self, width: int = 16, depth: int = 4, in_channels: int = 4):
        super().__init__()
        layers, c = [], in_channels
        for _ in range(depth):
            layers += [nn.Conv2d(c, width, 3, padding=1), nn.LeakyReLU(_ACT)]
            c = width
        self.body = nn.Sequential(*layers)
        self.head = _zero_head(nn.Conv2d(width, 3, 3, padding=1))

    def forward(self, raw, events=None, base=None):
        return _to_full_resolution(self.body(raw), self.head)


class TwoStageISP(nn.Module):
    r"""Restoration then enhancement (stage-wise class, e.g. CameraNet): stage 1 predicts linear RGB
    $\hat L = y_0^{1/\gamma} + r_\theta(X)$ from the packed RAW (trained with an auxiliary loss against the
    linear target), stage 2 is a per-pixel colour and tone network $h_\theta$ ($1\times1$ convolutions) on
    the display image $\hat L^{\gamma}$. ``forward`` returns the correction
    $\hat L^{\gamma} + h_\theta(\hat L^{\gamma}) - y_0$; ``restore`` the stage-1 linear image. Values below
    ``floor`` are clamped before the power laws, whose slopes are unbounded at zero."""

    def __init__(self, width: int = 16, in_channels: int = 4, gamma: float = 0.45, floor: float = 1e-2):
        super().__init__()
        self.gamma, self.floor = gamma, floor
        self.restoration = _block(in_channels, width)
        self.restoration_head = _zero_head(nn.Conv2d(width, 3, 3, padding=1))
        self.enhancement = nn.Sequential(nn.Conv2d(3, width, 1), nn.LeakyReLU(_ACT),
                                         nn.Conv2d(width, width, 1), nn.LeakyReLU(_ACT),
                                         _zero_head(nn.Conv2d(width, 3, 1)))

    def restore(self, raw, base):
        base_linear = base.clamp(self.floor, 1) ** (1 / self.gamma)
        return (base_linear + _to_full_resolution(self.restoration(raw), self.restoration_head)).clamp(0, 1)

    def forward(self, raw, events=None, base=None):
        restored = self.restore(raw, base).clamp(self.floor, 1) ** self.gamma
        return restored - base + self.enhancement(restored)


class _Encoder(nn.Module):
    """Levels 0..L-1: two 3 x 3 convolutions, then average pooling (stride 2) before the next level."""

    def __init__(self, in_channels: int, widths: tuple, first_kernel: int = 3):
        super().__init__()
        self.levels = nn.ModuleList()
        c = in_channels
        for i, w in enumerate(widths):
            k = first_kernel if i == 0 else 3
            self.levels.append(nn.Sequential(nn.Conv2d(c, w, k, padding=k // 2), nn.LeakyReLU(_ACT),
                                             nn.Conv2d(w, w, 3, padding=1), nn.LeakyReLU(_ACT)))
            c = w
        self.pool = nn.AvgPool2d(3, stride=2, padding=1)

    def forward(self, x):
        skips = []
        for i, level in enumerate(self.levels):
            x = level(x if i == 0 else self.pool(x))
            skips.append(x)
        return skips


class UNet(nn.Module):
    """A RAW-only UNet (the benchmark's UNet): encoder widths ``width * 2**l``, a bottleneck one pooling
    below the last level, a decoder that adds the encoder's skip at every level."""

    def __init__(self, width: int = 16, levels: int = 3, in_channels: int = 4):
        super().__init__()
        widths = tuple(width * 2 ** l for l in range(levels))
        self.encoder = _Encoder(in_channels, widths)
        self.bottleneck = _block(widths[-1], widths[-1])
        self.up_convs = nn.ModuleList()
        self.fuse_convs = nn.ModuleList()
        c = widths[-1]
        for w in reversed(widths):
            self.up_convs.append(nn.Sequential(nn.Conv2d(c, w, 3, padding=1), nn.LeakyReLU(_ACT)))
            self.fuse_convs.append(nn.Sequential(nn.Conv2d(w, w, 3, padding=1), nn.LeakyReLU(_ACT)))
            c = w
        self.head = _zero_head(nn.Conv2d(widths[0], 3, 3, padding=1))

    def decode(self, x, skips):
        for up, fuse, skip in zip(self.up_convs, self.fuse_convs, reversed(skips)):
            x = F.interpolate(x, size=skip.shape[-2:], mode="bilinear", align_corners=False)
            x = fuse(up(x) + skip)
        return _to_full_resolution(x, self.head)

    def forward(self, raw, events=None, base=None):
        skips = self.encoder(raw)
        return self.decode(self.bottleneck(self.encoder.pool(skips[-1])), skips)


class EventUNet(UNet):
    """The event-guided UNet: a second encoder of the same widths reads the voxel grid (its first
    convolution is 1 x 1, as in the official code); skip fusion by addition, $S^\\mathrm{raw}_\\ell +
    S^\\mathrm{ev}_\\ell$. There is no ablation switch: the RAW-only comparison is the separate
    :class:`UNet` (the official ``RGBEventISPUNet`` has a flag, ``with_events``, that when true *replaces* the
    events by a constant; its benchmark configs leave it false)."""

    def __init__(self, width: int = 16, levels: int = 3, in_channels: int = 4, event_bins: int = 8):
        super().__init__(width, levels, in_channels)
        widths = tuple(width * 2 ** l for l in range(levels))
        self.event_encoder = _Encoder(check_positive_int(event_bins, "event_bins"), widths, first_kernel=1)
        self.event_bins = event_bins

    def forward(self, raw, events=None, base=None):
        if events is None:
            raise ValueError("EventUNet needs events of shape (n, bins, H/2, W/2)")
        skips = self.encoder(raw)
        event_skips = self.event_encoder(events)
        fused = [s + e for s, e in zip(skips, event_skips)]
        return self.decode(self.bottleneck(self.encoder.pool(skips[-1])), fused)


MODEL_CLASSES = {"PlainCNN": PlainCNN, "TwoStage": TwoStageISP, "UNet": UNet, "EV-UNet": EventUNet}


def build_model(name: str, width: int = 16, event_bins: int = 8, residual: bool = True) -> nn.Module:
    """One of :data:`MODEL_CLASSES` by name, with base width ``width``. ``residual=False`` (UNet and EV-UNet
    only) gives the from-scratch set-up: the output layer gets PyTorch's default initialisation instead of
    zeros, and :func:`train_isp` / :func:`predict_isp` do not add the conventional ISP's output."""
    if name not in MODEL_CLASSES:
        raise ValueError(f"name must be one of {list(MODEL_CLASSES)}, got {name!r}")
    width = check_positive_int(width, "width")
    if not residual and name not in ("UNet", "EV-UNet"):
        raise ValueError(f"residual=False is implemented for UNet and EV-UNet only, got {name!r}")
    model = EventUNet(width, event_bins=event_bins) if name == "EV-UNet" else MODEL_CLASSES[name](width)
    model.residual = bool(residual)
    if not residual:
        model.head.reset_parameters()
    return model


def _offset(model: nn.Module, base: torch.Tensor) -> torch.Tensor:
    """What the network's output is added to: the conventional ISP's output (residual) or zero (from scratch)."""
    return base if getattr(model, "residual", True) else torch.zeros_like(base)


def _channels_last(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last)


def _batch(tensors: dict, keys: tuple, rows, dev: torch.device) -> dict:
    """Rows ``rows`` (an index tensor drawn on the CPU, or a slice) of the tensors ``keys`` of
    :func:`to_tensors`, on ``dev`` (the model's device); where they already are, nothing is copied."""
    out = {}
    for key in keys:
        t = tensors[key]
        out[key] = t[rows.to(t.device) if isinstance(rows, torch.Tensor) else rows].to(dev)
    return out


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


def charbonnier(prediction: torch.Tensor, target: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    r"""The benchmark's loss: mean of $\sqrt{(\hat y - y)^2 + \epsilon^2}$."""
    return torch.sqrt((prediction - target) ** 2 + eps ** 2).mean()


def to_tensors(data: dict, base: np.ndarray, dark: np.ndarray, white_level: float = 242.0) -> dict:
    """Network inputs of a simulated data set: packed normalised RAW (n, 4, H/2, W/2), events scaled to
    unit range, the conventional ISP output ``base`` and the targets as (n, 3, H, W) tensors."""
    from .simulator import pack_quad_bayer

    x = np.clip(np.clip(data["raw"].astype(float), 0, white_level) / white_level - dark / white_level, 0, 1)
    to = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float32)
    return {"raw": to(pack_quad_bayer(x)), "events": to(data["events"] / 2.0),
            "base": to(np.moveaxis(base, -1, 1)), "target": to(np.moveaxis(data["target"], -1, 1)),
            "target_linear": to(np.moveaxis(data["target_linear"], -1, 1))}


def train_isp(model: nn.Module, tensors: dict, steps: int = 300, batch: int = 16, lr: float = 3e-3,
              seed: int = 0, aux_weight: float = 0.5) -> dict:
    r"""Train ``model`` in its set-up, residual $\hat y = y_0 + f_\theta$ or from scratch $\hat y = f_\theta$
    (:func:`build_model`), with the Charbonnier loss, Adam and a cosine schedule; a :class:`TwoStageISP` also
    gets ``aux_weight`` times the stage-1 loss against the linear target. Tensors run in the channels-last
    memory layout (about a third faster for these small convolutions on a CPU; same arithmetic). The model
    trains where it is (move it first, e.g. ``model.to(device())``): each mini-batch is drawn by the CPU
    generator and moved to the model's device, so ``tensors`` may stay on the CPU or be moved there once.
    Returns the loss curve and the mean wall-clock milliseconds per step."""
    steps, batch = check_positive_int(steps, "steps"), check_positive_int(batch, "batch")
    lr = check_positive(lr, "lr")
    generator = torch.Generator().manual_seed(check_int(seed, "seed", low=0))
    n = tensors["raw"].shape[0]
    dev = module_device(model)
    keys = ("raw", "events", "base", "target") + (("target_linear",) if isinstance(model, TwoStageISP) else ())
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    losses = []
    model.to(memory_format=torch.channels_last).train()
    start = time.perf_counter()
    for _ in range(steps):
        idx = torch.randint(0, n, (batch,), generator=generator)
        b = _batch(tensors, keys, idx, dev)
        raw, events, base = _channels_last(b["raw"]), _channels_last(b["events"]), b["base"]
        loss = charbonnier(_offset(model, base) + model(raw, events, base), b["target"])
        if isinstance(model, TwoStageISP):
            loss = loss + aux_weight * charbonnier(model.restore(raw, base), b["target_linear"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    model.eval()
    return {"loss": np.array(losses), "ms_per_step": 1000 * (time.perf_counter() - start) / steps}


@torch.no_grad()
def predict_isp(model: nn.Module, tensors: dict, batch: int = 64) -> np.ndarray:
    """Display RGB predictions (n, H, W, 3) in [0, 1] of a trained model (residual or from scratch), computed
    on the model's device (each batch of ``tensors`` is moved there) and returned as a CPU array."""
    model.to(memory_format=torch.channels_last).eval()
    dev = module_device(model)
    out = []
    for i in range(0, tensors["raw"].shape[0], batch):
        b = _batch(tensors, ("raw", "events", "base"), slice(i, i + batch), dev)
        raw, events, base = _channels_last(b["raw"]), _channels_last(b["events"]), b["base"]
        out.append((_offset(model, base) + model(raw, events, base)).clamp(0, 1).contiguous())
    return np.moveaxis(torch.cat(out).cpu().numpy(), 1, -1)
