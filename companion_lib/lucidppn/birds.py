r"""Synthetic isoluminant "birds": the data set of the LucidPPN chapter.

A bird has two parts, a *head* (a small disk, coloured) and a *body* (a grey disk or cross), on a
dark noisy background. Its class is the pair (head colour, body shape). All head colours have the
same luminance

$$
w(r, g, b) = 0.299\,r + 0.587\,g + 0.114\,b = 0.45 ,
$$

the grey-scale conversion LucidPPN feeds its shape/texture branch, so in grey scale every head looks
the same and only the colour branch can tell the head colours apart. The ground-truth part masks come
for free and replace the PDiscoNet part maps of the paper.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from companion_lib.common.validation import check_int, check_positive_int

__all__ = [
    "LUMA_WEIGHTS", "HEAD_LUMINANCE", "BODY_GREY", "PALETTE", "SHAPES", "PART_NAMES",
    "HUE_TEMPLATES", "hue_palette", "isoluminant_colour", "luminance", "to_grey", "check_images", "BirdGeometry", "BirdSet",
    "draw_geometry", "render_birds", "make_birds", "swap_head_colours", "swapped_labels",
]

#: The luminance weights of the paper's grey-scale conversion (ITU-R BT.601, as in PIL and torchvision).
LUMA_WEIGHTS = (0.299, 0.587, 0.114)
#: The common luminance of every head colour.
HEAD_LUMINANCE = 0.45
#: The grey of every body (luminance 0.55, brighter than any head).
BODY_GREY = 0.55
#: Body shapes.
SHAPES = ("disk", "cross")
#: Part names, in the order of the part axis k.
PART_NAMES = ("head", "body")


def isoluminant_colour(template: tuple[float | None, float | None, float | None],
                       target: float = HEAD_LUMINANCE) -> tuple[float, float, float]:
    r"""The colour with luminance ``target`` whose fixed channels are given and whose ``None`` channels share one value.

    For example ``(1.0, None, None)`` is a red: the green and blue channels are solved for so that
    $0.299\cdot 1 + (0.587 + 0.114)\,g = $ ``target``.
    """
    free = [i for i, c in enumerate(template) if c is None]
    if not free:
        raise ValueError("template must leave at least one channel free (None)")
    fixed = sum(LUMA_WEIGHTS[i] * c for i, c in enumerate(template) if c is not None)
    value = (target - fixed) / sum(LUMA_WEIGHTS[i] for i in free)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"no isoluminant colour with template {template} and luminance {target}")
    return tuple(float(value) if c is None else float(c) for c in template)


#: The isoluminant head palette (every colour has luminance 0.45 exactly, up to float rounding).
PALETTE = {
    "red": isoluminant_colour((1.0, None, None)),
    "green": isoluminant_colour((0.15, None, 0.15)),
    "blue": isoluminant_colour((None, None, 1.0)),
    "yellow": isoluminant_colour((None, None, 0.0)),
}


#: The hue of each palette colour: the fixed channels of its template for :func:`isoluminant_colour`.
HUE_TEMPLATES = {
    "red": (1.0, None, None),
    "green": (0.15, None, 0.15),
    "blue": (None, None, 1.0),
    "yellow": (None, None, 0.0),
}


def hue_palette(luminances: dict[str, float]) -> dict[str, tuple[float, float, float]]:
    """A palette with each named colour's hue (:data:`HUE_TEMPLATES`) at the luminance ``luminances[name]``.

    ``hue_palette({c: 0.45 for c in ...})`` is :data:`PALETTE`; unequal luminances give a palette whose
    colours the grey image can tell apart (a "leaky" palette). Raises ``ValueError`` for an unknown name or
    a luminance that the hue cannot reach within [0, 1].
    """
    out = {}
    for name, target in dict(luminances).items():
        if name not in HUE_TEMPLATES:
            raise ValueError(f"luminances: unknown colour name {name!r}; known: {sorted(HUE_TEMPLATES)}")
        out[name] = isoluminant_colour(HUE_TEMPLATES[name], float(target))
    return out


def luminance(images: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """$w = 0.299 r + 0.587 g + 0.114 b$ over the channel axis of (..., 3, H, W) images (or (..., 3) colours)."""
    axis = -3 if images.shape[-1] != 3 else -1
    if isinstance(images, torch.Tensor):
        w = torch.tensor(LUMA_WEIGHTS, dtype=images.dtype, device=images.device)
        shape = [1] * images.ndim
        shape[axis] = 3
        return (images * w.reshape(shape)).sum(dim=axis)
    images = np.asarray(images, dtype=float)
    shape = [1] * images.ndim
    shape[axis] = 3
    return (images * np.reshape(LUMA_WEIGHTS, shape)).sum(axis=axis)


def check_images(images: object, name: str = "images") -> torch.Tensor:
    """``images`` as a float32 tensor, after checking it is (N, 3, H, W) with values in [0, 1]."""
    x = torch.as_tensor(images, dtype=torch.float32)
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"{name} must have shape (N, 3, H, W), got {tuple(x.shape)}")
    if not torch.isfinite(x).all() or x.min() < 0 or x.max() > 1:
        raise ValueError(f"{name} must hold finite values in [0, 1]")
    return x


def to_grey(images: object) -> torch.Tensor:
    """The paper's grey input $x_S = (w, w, w)$: the luminance copied to three channels, (N, 3, H, W)."""
    x = check_images(images)
    w = luminance(x).unsqueeze(1)
    return w.expand(-1, 3, -1, -1).contiguous()


@dataclass(frozen=True)
class BirdGeometry:
    """Where each bird's parts are, independent of its colour (so colours can be swapped later)."""

    background: np.ndarray   # (N, H, W) grey background with noise
    head: np.ndarray         # (N, H, W) bool head mask
    body: np.ndarray         # (N, H, W) bool body mask (the head drawn on top is removed)


@dataclass(frozen=True)
class BirdSet:
    """Images, part masks and labels of a synthetic bird data set.

    ``images`` is (N, 3, H, W) in [0, 1], ``masks`` (N, K, H, W) with K = 2 parts (head, body),
    ``labels`` (N,) with class ``m = colour_index * len(shapes) + shape_index``.
    """

    images: np.ndarray
    masks: np.ndarray
    labels: np.ndarray
    colours: tuple[str, ...]
    shapes: tuple[str, ...]
    geometry: BirdGeometry
    palette: dict | None = None   # the colour names' RGB triples the set was painted with (None: PALETTE)

    @property
    def colour_table(self) -> dict:
        """The palette this set was painted with (:data:`PALETTE` unless :func:`make_birds` got another)."""
        return PALETTE if self.palette is None else self.palette

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def n_classes(self) -> int:
        return len(self.colours) * len(self.shapes)

    @property
    def class_names(self) -> list[str]:
        return [f"{c} {s}" for c in self.colours for s in self.shapes]

    def colour_index(self, labels: np.ndarray | None = None) -> np.ndarray:
        """The head-colour index of each label (default: of this set's labels)."""
        return np.asarray(self.labels if labels is None else labels) // len(self.shapes)

    def shape_index(self, labels: np.ndarray | None = None) -> np.ndarray:
        """The body-shape index of each label."""
        return np.asarray(self.labels if labels is None else labels) % len(self.shapes)


def _check_names(colours, shapes, palette=None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    colours, shapes = tuple(colours), tuple(shapes)
    palette = PALETTE if palette is None else palette
    for c in colours:
        if c not in palette:
            raise ValueError(f"colours: unknown colour name {c!r}; known: {sorted(palette)}")
    for s in shapes:
        if s not in SHAPES:
            raise ValueError(f"shapes: unknown shape name {s!r}; known: {list(SHAPES)}")
    if len(colours) < 1 or len(shapes) < 1 or len(set(colours)) != len(colours) or len(set(shapes)) != len(shapes):
        raise ValueError("colours and shapes must be non-empty lists of distinct names")
    return colours, shapes


def draw_geometry(shape_of_each: np.ndarray, rng: np.random.Generator, size: int = 24,
                  noise: float = 0.03) -> BirdGeometry:
    """Draw one bird per entry of ``shape_of_each`` (a shape index into :data:`SHAPES`).

    Body: centred near the middle (jitter of 2 px), half-size 4.5-6 px, a disk or a cross.
    Head: a disk of radius 2.5-3.2 px, up-left or up-right of the body, overlapping it a little.
    Background: grey 0.12 with uniform grey noise of +-``noise`` (colourless, so it only adds luminance noise).
    The random numbers drawn do not depend on any colour, so two sets drawn with the same ``rng`` state
    have identical geometry and identical grey images.
    """
    n = len(shape_of_each)
    yy, xx = np.mgrid[0:size, 0:size] + 0.5
    background = 0.12 + rng.uniform(-noise, noise, size=(n, size, size))
    heads = np.zeros((n, size, size), bool)
    bodies = np.zeros((n, size, size), bool)
    scale = size / 24
    for i, shape in enumerate(shape_of_each):
        cy, cx = (size / 2 + 1 * scale) + rng.uniform(-2, 2, 2) * scale
        s = rng.uniform(4.5, 6.0) * scale
        r = rng.uniform(2.5, 3.2) * scale
        side = rng.choice([-1.0, 1.0])
        d = (s + 0.6 * r) / np.sqrt(2)
        hy, hx = cy - d, cx + side * d
        dy, dx = yy - cy, xx - cx
        if SHAPES[int(shape)] == "disk":
            body = dy ** 2 + dx ** 2 <= s ** 2
        else:
            t = 0.38 * s
            body = ((np.abs(dy) <= s) & (np.abs(dx) <= t)) | ((np.abs(dx) <= s) & (np.abs(dy) <= t))
        head = (yy - hy) ** 2 + (xx - hx) ** 2 <= r ** 2
        heads[i] = head
        bodies[i] = body & ~head
    return BirdGeometry(background=background, head=heads, body=bodies)


def render_birds(geometry: BirdGeometry, head_colours: np.ndarray) -> np.ndarray:
    """Paint the birds: background, grey body, head in ``head_colours`` ((N, 3) RGB). Returns (N, 3, H, W)."""
    head_colours = np.asarray(head_colours, dtype=float)
    n = geometry.head.shape[0]
    if head_colours.shape != (n, 3):
        raise ValueError(f"head_colours must have shape ({n}, 3), got {head_colours.shape}")
    img = np.repeat(geometry.background[:, None], 3, axis=1)
    body = geometry.body[:, None]
    head = geometry.head[:, None]
    img = np.where(body, BODY_GREY, img)
    img = np.where(head, head_colours[:, :, None, None], img)
    return img.astype(np.float32)


def make_birds(n_per_class: int, rng: np.random.Generator, colours=("red", "green", "blue"),
               shapes=SHAPES, size: int = 24, noise: float = 0.03, palette: dict | None = None) -> BirdSet:
    """A shuffled set of ``n_per_class`` birds per class (head colour x body shape).

    ``palette`` maps colour names to RGB triples in [0, 1] (default :data:`PALETTE`, isoluminant); another
    palette lets an exercise break isoluminance. Raises ``ValueError`` naming the argument for an
    unknown colour or shape name, a colour outside [0, 1] or a bad size.
    """
    palette = PALETTE if palette is None else dict(palette)
    colours, shapes = _check_names(colours, shapes, palette)
    for c in colours:
        rgb = np.asarray(palette[c], dtype=float)
        if rgb.shape != (3,) or not (np.all(rgb >= 0) and np.all(rgb <= 1)):
            raise ValueError(f"palette: colour {c!r} must be an RGB triple in [0, 1], got {palette[c]!r}")
    n_per_class = check_positive_int(n_per_class, "n_per_class")
    size = check_int(size, "size", low=12)
    n_classes = len(colours) * len(shapes)
    labels = rng.permutation(np.repeat(np.arange(n_classes), n_per_class))
    shape_index = np.array([SHAPES.index(shapes[m % len(shapes)]) for m in labels])
    geometry = draw_geometry(shape_index, rng, size=size, noise=noise)
    head_colours = np.array([palette[colours[m // len(shapes)]] for m in labels])
    images = render_birds(geometry, head_colours)
    masks = np.stack([geometry.head, geometry.body], axis=1).astype(np.float32)
    return BirdSet(images=images, masks=masks, labels=labels.astype(np.int64), colours=colours,
                   shapes=shapes, geometry=geometry,
                   palette={c: tuple(float(v) for v in palette[c]) for c in colours})


def swap_head_colours(birds: BirdSet, permutation: dict[str, str] | None = None,
                      palette: dict | None = None) -> BirdSet:
    """The same birds (same geometry, same noise) with every head colour replaced by ``permutation[colour]``.

    The default permutation cycles the colours (red -> green -> blue -> red for the default palette).
    The new colours are painted from ``palette`` (default: the palette the set was drawn with, so a set
    drawn with a custom palette is swapped within that palette); another ``palette`` paints, e.g., the
    new hue at the old luminance. Labels keep the *original* classes; the swapped class of bird i is
    ``swapped_index * len(shapes) + shape_index``, see :func:`swapped_labels`. With an isoluminant palette
    the swap preserves luminance exactly, so the grey images do not change.
    """
    colours = birds.colours
    palette = birds.colour_table if palette is None else dict(palette)
    if permutation is None:
        permutation = {c: colours[(i + 1) % len(colours)] for i, c in enumerate(colours)}
    for c in list(permutation) + list(permutation.values()):
        if c not in colours:
            raise ValueError(f"permutation: unknown colour name {c!r}; this set's colours: {list(colours)}")
    new_names = [permutation.get(colours[j], colours[j]) for j in birds.colour_index()]
    for c in set(new_names):
        if c not in palette:
            raise ValueError(f"palette: no colour for {c!r}")
        rgb = np.asarray(palette[c], dtype=float)
        if rgb.shape != (3,) or not (np.all(rgb >= 0) and np.all(rgb <= 1)):
            raise ValueError(f"palette: colour {c!r} must be an RGB triple in [0, 1], got {palette[c]!r}")
    images = render_birds(birds.geometry, np.array([palette[c] for c in new_names]))
    return replace(birds, images=images)


def swapped_labels(birds: BirdSet, permutation: dict[str, str] | None = None) -> np.ndarray:
    """The class each bird of ``swap_head_colours(birds, permutation)`` shows: new colour, same shape."""
    colours = birds.colours
    if permutation is None:
        permutation = {c: colours[(i + 1) % len(colours)] for i, c in enumerate(colours)}
    new = np.array([colours.index(permutation.get(colours[j], colours[j])) for j in birds.colour_index()])
    return new * len(birds.shapes) + birds.shape_index()
