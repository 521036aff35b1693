r"""LucidPPN-mini: the two branches, their fusion and the three BCE losses (Pach et al., ICLR 2025).

Shapes: N images, K parts, M classes, an h x w latent map. Channel (k, m) of a map is the
prototypical part of object part k for class m (one prototype per part and class, as in the paper).

* ShapeTexNet: $Z_S = \sigma(f^{cl}_S(f^b_S(x_S)))$ on the grey image $x_S$;
  resemblances $r^S_{km} = \max_{ij} z^S_{km}[i,j]$, prediction $p^S_m = \frac1K\sum_k r^S_{km}$.
* ColorNet: $Z_C = \sigma(\mathrm{MLP}(x_C))$, a per-pixel MLP on the RGB image resized (with
  antialiasing) to h x w.
* Fusion: $z_{km} = z^C_{km}\odot \mathrm{sg}(z^S_{km})$ (sg = stop-gradient, the code's ``detach``),
  $r_{km} = \max_{ij} z_{km}[i,j]$, $p_m = \frac1K\sum_k r_{km}$, $\hat y = \arg\max_m p_m$.
* Losses: $\mathcal L = \alpha_D\mathcal L_D + \alpha_S\mathcal L_S + \alpha_C\mathcal L_C$ with
  $\mathcal L_D = \frac1K\sum_k \mathrm{BCE}(z^S_{k,y}, \mathrm{resize}(m_k))$,
  $\mathcal L_S = \frac1K\sum_k \mathrm{BCE}(r^S_{k\cdot}, \mathrm{onehot}(y))$,
  $\mathcal L_C = \frac1K\sum_k \mathrm{BCE}(r_{k\cdot}, \mathrm{onehot}(y))$.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from companion_lib.common.validation import check_int

from .birds import check_images, to_grey

__all__ = [
    "GREY_MEAN", "GREY_STD", "backbone", "ShapeTexNet", "ColorNet", "LucidOutput", "LucidPPN",
    "BlackBoxCNN", "fuse", "lucid_losses", "resize_masks",
]

#: Normalisation of the grey input (the official code's mean and standard deviation).
GREY_MEAN, GREY_STD = 0.445, 0.269


def backbone(in_channels: int = 3, widths: tuple[int, int, int] = (16, 32, 32)) -> nn.Sequential:
    """A tiny conv backbone (the stand-in for ConvNeXt-tiny): conv-BN-ReLU, 2x max-pool, two more conv-BN-ReLU."""
    a, b, c = (check_int(w, "widths", low=1) for w in widths)
    return nn.Sequential(
        nn.Conv2d(in_channels, a, 3, padding=1), nn.BatchNorm2d(a), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(a, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU(),
        nn.Conv2d(b, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
    )


def _pointwise(x: torch.Tensor, layers: list) -> torch.Tensor:
    """Apply 1x1 convolutions (and ReLUs) to (N, C, h, w) as matrix products over the pixels.

    The same function as ``nn.Sequential(*layers)(x)`` (up to float rounding): a 1x1 convolution is one
    linear map applied at every pixel. On a CPU the matrix product is several times faster than
    PyTorch's convolution kernels at these tiny channel counts, backward pass included.
    """
    h = x.permute(0, 2, 3, 1)
    for layer in layers:
        if isinstance(layer, nn.Conv2d):
            h = F.linear(h, layer.weight.flatten(1), layer.bias)
        else:
            h = layer(h)
    return h.permute(0, 3, 1, 2)


class ShapeTexNet(nn.Module):
    r"""The non-colour branch: grey image -> $Z_S \in (0,1)^{N\times K\times M\times h\times w}$."""

    def __init__(self, n_parts: int, n_classes: int, widths: tuple[int, int, int] = (16, 32, 32)) -> None:
        super().__init__()
        self.n_parts = check_int(n_parts, "n_parts", low=1)
        self.n_classes = check_int(n_classes, "n_classes", low=1)
        self.features = backbone(3, widths)
        self.add_on = nn.Conv2d(widths[-1], self.n_parts * self.n_classes, 1)

    def forward(self, grey: torch.Tensor) -> torch.Tensor:
        features = self.features(((grey - GREY_MEAN) / GREY_STD).contiguous(memory_format=torch.channels_last))
        z = torch.sigmoid(_pointwise(features, [self.add_on]))
        return z.unflatten(1, (self.n_parts, self.n_classes))


class ColorNet(nn.Module):
    r"""The colour branch: a per-pixel MLP on the RGB image resized to the latent size, $Z_C$."""

    def __init__(self, n_parts: int, n_classes: int, hidden: tuple[int, ...] = (20, 50)) -> None:
        super().__init__()
        self.n_parts = check_int(n_parts, "n_parts", low=1)
        self.n_classes = check_int(n_classes, "n_classes", low=1)
        layers, width = [], 3
        for h in hidden:
            layers += [nn.Conv2d(width, check_int(h, "hidden", low=1), 1), nn.ReLU()]
            width = h
        layers.append(nn.Conv2d(width, self.n_parts * self.n_classes, 1))
        self.mlp = nn.Sequential(*layers)   # 1x1 convolutions = the same MLP at every pixel

    def pixel_colours(self, images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        """The RGB image resized with antialiasing to ``size``: each latent cell's average colour."""
        return F.interpolate(images, size=size, mode="bilinear", antialias=True, align_corners=False).clamp(0, 1)

    def forward(self, images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        z = torch.sigmoid(_pointwise(self.pixel_colours(images, size), list(self.mlp)))
        return z.unflatten(1, (self.n_parts, self.n_classes))

    def respond(self, colours: torch.Tensor) -> torch.Tensor:
        """ColorNet's response to plain colours, (C, 3) -> (C, K, M): what each colour prototype prefers."""
        z = torch.sigmoid(_pointwise(colours.reshape(-1, 3, 1, 1), list(self.mlp)))
        return z.reshape(-1, self.n_parts, self.n_classes)


class LucidOutput(NamedTuple):
    """Everything LucidPPN computes for a batch (maps are (N, K, M, h, w), scores (N, K, M), logits (N, M))."""

    shape_maps: torch.Tensor      # Z_S
    colour_maps: torch.Tensor     # Z_C
    fused_maps: torch.Tensor      # Z = Z_C * sg(Z_S)
    shape_scores: torch.Tensor    # r^S
    fused_scores: torch.Tensor    # r
    shape_logits: torch.Tensor    # p^S (ShapeTexNet alone)
    logits: torch.Tensor          # p (the model's prediction)


def fuse(shape_maps: torch.Tensor, colour_maps: torch.Tensor, detach: bool = True) -> torch.Tensor:
    r"""$z_{km} = z^C_{km}\odot \mathrm{sg}(z^S_{km})$; with ``detach=False`` the gradient also reaches ShapeTexNet."""
    if shape_maps.shape != colour_maps.shape:
        raise ValueError(f"shape_maps {tuple(shape_maps.shape)} and colour_maps {tuple(colour_maps.shape)} differ")
    return colour_maps * (shape_maps.detach() if detach else shape_maps)


class LucidPPN(nn.Module):
    """LucidPPN with a tiny backbone: ShapeTexNet on the grey image, ColorNet on the colours, fused."""

    def __init__(self, n_parts: int, n_classes: int, widths: tuple[int, int, int] = (16, 32, 32),
                 colour_hidden: tuple[int, ...] = (20, 50), detach: bool = True) -> None:
        super().__init__()
        self.n_parts = check_int(n_parts, "n_parts", low=1)
        self.n_classes = check_int(n_classes, "n_classes", low=1)
        self.shape_net = ShapeTexNet(n_parts, n_classes, widths)
        self.colour_net = ColorNet(n_parts, n_classes, colour_hidden)
        self.detach = bool(detach)

    def forward(self, images: torch.Tensor) -> LucidOutput:
        images = check_images(images)
        zs = self.shape_net(to_grey(images))
        zc = self.colour_net(images, tuple(zs.shape[-2:]))
        z = fuse(zs, zc, self.detach)
        rs = zs.amax(dim=(-2, -1))
        r = z.amax(dim=(-2, -1))
        return LucidOutput(zs, zc, z, rs, r, rs.mean(dim=1), r.mean(dim=1))


class BlackBoxCNN(nn.Module):
    """The black-box baseline of similar size: the same backbone on the RGB image, global max-pool, linear."""

    def __init__(self, n_classes: int, widths: tuple[int, int, int] = (16, 32, 32)) -> None:
        super().__init__()
        self.n_classes = check_int(n_classes, "n_classes", low=1)
        self.features = backbone(3, widths)
        self.head = nn.Linear(widths[-1], self.n_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = check_images(images)
        x = ((x - 0.5) / 0.25).contiguous(memory_format=torch.channels_last)   # faster convolutions on a CPU
        return self.head(self.features(x).amax(dim=(-2, -1)))


def resize_masks(masks: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Part masks (N, K, H, W) resized with antialiasing to the latent ``size`` and clamped to [0, 1]."""
    return F.interpolate(masks, size=size, mode="bilinear", antialias=True, align_corners=False).clamp(0, 1)


def lucid_losses(out: LucidOutput, masks: torch.Tensor, labels: torch.Tensor, alpha_d: float = 1.4,
                 alpha_s: float = 1.0, alpha_c: float = 1.0) -> dict[str, torch.Tensor]:
    r"""The three BCE losses and their weighted sum $\alpha_D\mathcal L_D + \alpha_S\mathcal L_S + \alpha_C\mathcal L_C$.

    ``masks`` is (N, K, H, W) (any resolution; resized to the maps'), ``labels`` (N,) class indices.
    $\mathcal L_D$ acts on ShapeTexNet's map of the true class only; each BCE is a mean over its
    elements, and each loss a mean over the K parts, as in the official code. ``masks`` and ``labels`` go
    to the maps' device.
    """
    zs = out.shape_maps
    n, k, m = zs.shape[:3]
    masks = torch.as_tensor(masks, dtype=torch.float32, device=zs.device)
    if masks.ndim != 4 or masks.shape[0] != n or masks.shape[1] != k:
        raise ValueError(f"masks must have shape ({n}, {k}, H, W), got {tuple(masks.shape)}")
    labels = torch.as_tensor(labels, dtype=torch.long, device=zs.device)
    if labels.shape != (n,):
        raise ValueError(f"labels must have shape ({n},), got {tuple(labels.shape)}")
    target_maps = resize_masks(masks, tuple(zs.shape[-2:]))
    true_class_maps = zs[torch.arange(n, device=zs.device), :, labels]   # (N, K, h, w)
    onehot = F.one_hot(labels, m).float()
    loss_d = torch.stack([F.binary_cross_entropy(true_class_maps[:, j], target_maps[:, j]) for j in range(k)]).mean()
    loss_s = torch.stack([F.binary_cross_entropy(out.shape_scores[:, j], onehot) for j in range(k)]).mean()
    loss_c = torch.stack([F.binary_cross_entropy(out.fused_scores[:, j], onehot) for j in range(k)]).mean()
    total = alpha_d * loss_d + alpha_s * loss_s + alpha_c * loss_c
    return {"L_D": loss_d, "L_S": loss_s, "L_C": loss_c, "total": total}
