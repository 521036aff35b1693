r"""Training, prediction and the analyses of the LucidPPN chapter: accuracies of both branches, the
part hit rate, the colour each colour prototype prefers, the top-activating patches of each
prototypical part, and one seeded experiment that the reproduce notebook runs per seed.

Training runs on a ``device`` argument (default :func:`companion_lib.common.device`: the GPU when present);
the random draws (initialisation, batch order) stay on the CPU, and predictions come back on the CPU.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from companion_lib.common.device import module_device, resolve_device, to_device
from companion_lib.common.validation import check_int, check_positive

from .birds import PALETTE, BirdSet, hue_palette, make_birds, swap_head_colours, swapped_labels
from .birds import check_images
from .model import BlackBoxCNN, LucidOutput, LucidPPN, lucid_losses, resize_masks

__all__ = [
    "check_birds", "fit_lucidppn", "fit_blackbox", "lucid_predict", "blackbox_predict", "part_hit_rate", "part_iou",
    "colour_prototypes", "nearest_palette_colour", "top_patches", "experiment_data", "lucidppn_from_state",
    "run_experiment", "leaky_data", "run_leaky",
]


def _batches(n: int, batch_size: int, gen: torch.Generator):
    order = torch.randperm(n, generator=gen)
    for start in range(0, n, batch_size):
        yield order[start:start + batch_size]


def check_birds(birds: BirdSet) -> None:
    """Check that a bird set's images are (N, 3, H, W) in [0, 1] and its masks (N, K, H, W) with K >= 1."""
    images = check_images(birds.images)
    masks = np.asarray(birds.masks)
    if masks.ndim != 4 or masks.shape[0] != images.shape[0] or masks.shape[2:] != tuple(images.shape[2:]) or masks.shape[1] < 1:
        raise ValueError(f"masks must have shape (N, K, H, W) = ({images.shape[0]}, K >= 1, {images.shape[2]}, "
                         f"{images.shape[3]}) to match the images, got {masks.shape}")
    if np.asarray(birds.labels).shape != (images.shape[0],):
        raise ValueError(f"labels must have shape ({images.shape[0]},), got {np.asarray(birds.labels).shape}")


def fit_lucidppn(birds: BirdSet, alpha_d: float = 1.4, alpha_s: float = 1.0, alpha_c: float = 1.0,
                 epochs: int = 45, lr: float = 5e-3, batch_size: int = 64, seed: int = 0,
                 detach: bool = True, widths=(16, 32, 32), colour_hidden=(20, 50), device=None):
    r"""Train LucidPPN on ``birds`` with Adam on $\alpha_D\mathcal L_D + \alpha_S\mathcal L_S + \alpha_C\mathcal L_C$.

    The paper: Adam, lr 0.002, batch 64, 40 epochs (15 with a frozen backbone), $\alpha_D = 1.4$.
    Here both branches train from scratch at lr 5e-3. Returns ``(model, history)``, the model in eval
    mode and ``history`` a list of per-epoch mean losses. ``device`` (default
    :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the model trains and stays;
    the initialisation and the batch order are drawn on the CPU, so on the CPU the argument changes nothing.
    """
    if alpha_d < 0 or alpha_s < 0 or alpha_c < 0:
        raise ValueError("alpha_d, alpha_s and alpha_c must be >= 0")
    check_birds(birds)
    epochs = check_int(epochs, "epochs", low=1)
    batch_size = check_int(batch_size, "batch_size", low=1)
    lr = check_positive(lr, "lr")
    dev = resolve_device(device)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(int(seed))
    model = LucidPPN(birds.masks.shape[1], birds.n_classes, widths, colour_hidden, detach=detach).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    x, masks, y = to_device((torch.as_tensor(birds.images), torch.as_tensor(birds.masks),
                             torch.as_tensor(birds.labels)), dev)
    history = []
    for _ in range(epochs):
        model.train()
        sums = {"L_D": 0.0, "L_S": 0.0, "L_C": 0.0, "total": 0.0}
        for idx in _batches(len(y), batch_size, gen):
            idx = idx.to(dev)
            losses = lucid_losses(model(x[idx]), masks[idx], y[idx], alpha_d, alpha_s, alpha_c)
            opt.zero_grad(set_to_none=True)
            losses["total"].backward()
            opt.step()
            for key in sums:
                sums[key] += losses[key].detach().item() * len(idx) / len(y)
        history.append(sums)
    return model.eval(), history


def fit_blackbox(birds: BirdSet, epochs: int = 30, lr: float = 5e-3, batch_size: int = 64, seed: int = 0,
                 widths=(16, 32, 32), device=None) -> BlackBoxCNN:
    """Train the black-box CNN baseline (cross-entropy, Adam) on the RGB images. Returns it in eval mode.

    ``device`` (default :func:`companion_lib.common.device`) is where it trains and stays, as in :func:`fit_lucidppn`."""
    check_birds(birds)
    epochs = check_int(epochs, "epochs", low=1)
    dev = resolve_device(device)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(int(seed) + 1)
    model = BlackBoxCNN(birds.n_classes, widths).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=check_positive(lr, "lr"))
    x, y = to_device((torch.as_tensor(birds.images), torch.as_tensor(birds.labels)), dev)
    for _ in range(epochs):
        model.train()
        for idx in _batches(len(y), check_int(batch_size, "batch_size", low=1), gen):
            idx = idx.to(dev)
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return model.eval()


@torch.no_grad()
def lucid_predict(model: LucidPPN, images) -> LucidOutput:
    """LucidPPN's maps, scores and logits for ``images`` (N, 3, H, W) in [0, 1], in eval mode.

    The images go to the model's device; the outputs come back on the CPU."""
    out = model.eval()(torch.as_tensor(images).to(module_device(model)))
    return LucidOutput(*(t.cpu() for t in out))


@torch.no_grad()
def blackbox_predict(model: BlackBoxCNN, images) -> np.ndarray:
    """The black-box CNN's predicted classes (the images go to the model's device)."""
    return model.eval()(torch.as_tensor(images).to(module_device(model))).argmax(1).cpu().numpy()


def part_hit_rate(shape_maps, masks, labels, min_coverage: float = 0.25) -> np.ndarray:
    r"""The share of images whose map $z^S_{k,y}$ peaks inside part k's mask, for each part k.

    The mask is resized to the map's resolution (antialiased, so a cell's value is the share of it the
    part covers); a peak is "inside" when the part covers at least ``min_coverage`` of its cell.
    Replaces the paper's IoU of maps rounded at 0.5, which reads 0 when the maps stay below 0.5.
    Computed on the maps' device; the result is on the CPU.
    """
    zs = torch.as_tensor(shape_maps)
    masks = torch.as_tensor(masks, dtype=torch.float32, device=zs.device)
    labels = torch.as_tensor(labels, dtype=torch.long, device=zs.device)
    if zs.ndim != 5:
        raise ValueError(f"shape_maps must be (N, K, M, h, w), got {tuple(zs.shape)}")
    n, k = zs.shape[:2]
    if masks.ndim != 4 or masks.shape[:2] != (n, k):
        raise ValueError(f"masks must have shape ({n}, {k}, H, W), got {tuple(masks.shape)}")
    coverage = resize_masks(masks, tuple(zs.shape[-2:]))            # (N, K, h, w)
    true_maps = zs[torch.arange(n, device=zs.device), :, labels].flatten(2)   # (N, K, h*w)
    peak = true_maps.argmax(-1)                                      # (N, K)
    hit = coverage.flatten(2).gather(2, peak.unsqueeze(-1)).squeeze(-1) >= min_coverage
    return hit.float().mean(0).cpu().numpy()


def part_iou(shape_maps, masks, labels, threshold: float = 0.5) -> np.ndarray:
    r"""The official code's alignment score: IoU of $z^S_{k,y} > $ ``threshold`` with part k's resized mask (> 1/2), per part."""
    zs = torch.as_tensor(shape_maps)
    masks = torch.as_tensor(masks, dtype=torch.float32, device=zs.device)
    labels = torch.as_tensor(labels, dtype=torch.long, device=zs.device)
    if zs.ndim != 5 or masks.ndim != 4 or masks.shape[:2] != zs.shape[:2]:
        raise ValueError(f"masks must have shape ({zs.shape[0]}, {zs.shape[1]}, H, W) to match shape_maps, got "
                         f"{tuple(masks.shape)}")
    pred = zs[torch.arange(zs.shape[0], device=zs.device), :, labels] > threshold
    true = resize_masks(masks, tuple(zs.shape[-2:])) > 0.5
    inter = (pred & true).sum((-2, -1)).float()
    union = (pred | true).sum((-2, -1)).float().clamp(min=1)
    return (inter / union).mean(0).cpu().numpy()


@torch.no_grad()
def colour_prototypes(model: LucidPPN, part: int = 0, steps: int = 11) -> np.ndarray:
    """For each class m, the RGB colour of a ``steps``^3 grid to which ColorNet's map (part, m) responds most. (M, 3).

    The grid goes to the model's device; the colours come back on the CPU."""
    part = check_int(part, "part", low=0)
    if part >= model.n_parts:
        raise ValueError(f"part must be < {model.n_parts}, got {part}")
    axis = torch.linspace(0, 1, check_int(steps, "steps", low=2))
    grid = torch.cartesian_prod(axis, axis, axis)                   # (steps^3, 3)
    response = model.colour_net.respond(grid.to(module_device(model)))[:, part]   # (steps^3, M)
    return grid[response.argmax(0).cpu()].numpy()


def nearest_palette_colour(colours, names, palette: dict | None = None) -> list[str]:
    """The name (among ``names``) of the ``palette`` colour (default :data:`PALETTE`) nearest (in RGB) to each of ``colours`` (C, 3)."""
    colours = np.asarray(colours, dtype=float).reshape(-1, 3)
    palette = PALETTE if palette is None else palette
    for n in names:
        if n not in palette:
            raise ValueError(f"names: colour {n!r} is not in the palette")
    ref = np.array([palette[n] for n in names])
    return [names[i] for i in np.linalg.norm(colours[:, None] - ref[None], axis=-1).argmin(1)]


@torch.no_grad()
def top_patches(model: LucidPPN, birds: BirdSet, part: int, cls: int, n: int = 3, patch: int = 10) -> np.ndarray:
    """The ``n`` image patches (``patch`` px square, RGB) where ShapeTexNet's prototype (part, cls) fires most.

    This is how the paper visualises a prototypical part (no projection step): the top-activating
    training patches. Returns (n, patch, patch, 3) for plotting.
    """
    out = lucid_predict(model, birds.images)
    maps = out.shape_maps[:, part, cls]                              # (N, h, w)
    h, w = maps.shape[-2:]
    best = maps.flatten(1).max(1)
    order = best.values.argsort(descending=True)[:n]
    size = birds.images.shape[-1]
    stride = size / w
    padded = np.pad(birds.images, ((0, 0), (0, 0), (patch, patch), (patch, patch)), mode="edge")
    crops = []
    for i in order.tolist():
        r, c = divmod(int(best.indices[i]), w)
        cy, cx = int((r + 0.5) * stride) + patch, int((c + 0.5) * stride) + patch
        crops.append(padded[i, :, cy - patch // 2: cy + patch - patch // 2, cx - patch // 2: cx + patch - patch // 2])
    return np.stack(crops).transpose(0, 2, 3, 1)


def experiment_data(seed: int, n_train: int = 60, n_test: int = 30) -> tuple[BirdSet, BirdSet]:
    """The training and test birds of one seed (``n_train`` / ``n_test`` per class), as :func:`run_experiment` draws them."""
    rng = np.random.default_rng(check_int(seed, "seed", low=0))
    return make_birds(n_train, rng), make_birds(n_test, rng)


def lucidppn_from_state(state: dict, n_parts: int = 2, n_classes: int = 6, **kwargs) -> LucidPPN:
    """Rebuild a trained LucidPPN (in eval mode) from the ``state_dict`` that :func:`run_experiment` stores."""
    model = LucidPPN(n_parts, n_classes, **kwargs)
    model.load_state_dict(state)
    return model.eval()


def run_experiment(seed: int, n_train: int = 60, n_test: int = 30, epochs: int = 45, cnn_epochs: int = 30,
                   alphas=(1.4, 0.0), cnn: bool = True, device=None) -> dict:
    r"""One seed of the reproduction: data, LucidPPN at each $\alpha_D$ in ``alphas``, the black-box CNN, analyses.

    Returns plain numbers and the trained models' ``state_dict`` (so a disk cache can store it):
    per $\alpha_D$ the fused and shape-only test accuracy, the part hit rates, the colour prototypes
    of the head part, and the colour-swap analysis; and (if ``cnn``) the CNN's accuracy (also under the swap).
    ``device`` (default :func:`companion_lib.common.device`: the GPU when present, else the CPU) is where the
    models train and predict; the stored ``state_dict`` tensors are on the CPU, and on the CPU the results are
    the same numbers whatever the argument.
    """
    dev = resolve_device(device)
    train, test = experiment_data(seed, n_train, n_test)
    swapped = swap_head_colours(test)
    target = swapped_labels(test)
    result = {"seed": seed, "models": {}, "alpha": {}}
    for alpha in alphas:
        model, history = fit_lucidppn(train, alpha_d=alpha, epochs=epochs, seed=seed, device=dev)
        out, out_sw = lucid_predict(model, test.images), lucid_predict(model, swapped.images)
        pred, pred_shape = out.logits.argmax(1).numpy(), out.shape_logits.argmax(1).numpy()
        pred_sw, pred_shape_sw = out_sw.logits.argmax(1).numpy(), out_sw.shape_logits.argmax(1).numpy()
        protos = colour_prototypes(model, part=0)
        names = nearest_palette_colour(protos, test.colours)
        result["alpha"][float(alpha)] = {
            "fused_acc": float((pred == test.labels).mean()),
            "shape_acc": float((pred_shape == test.labels).mean()),
            "hit_rate": part_hit_rate(out.shape_maps, test.masks, test.labels).tolist(),
            "colour_prototypes": protos.tolist(),
            "prototype_colour_correct": int(sum(nm == test.colours[m // len(test.shapes)] for m, nm in enumerate(names))),
            "swap_fused_acc": float((pred_sw == test.labels).mean()),
            "swap_follows_colour": float((pred_sw == target).mean()),
            "swap_keeps_shape": float((test.shape_index(pred_sw) == test.shape_index()).mean()),
            "swap_shape_agreement": float((pred_shape_sw == pred_shape).mean()),
            "final_loss": history[-1],
        }
        result["models"][float(alpha)] = {k: v.cpu().clone() for k, v in model.state_dict().items()}
    if cnn:
        cnn_model = fit_blackbox(train, epochs=cnn_epochs, seed=seed, device=dev)
        result["cnn_acc"] = float((blackbox_predict(cnn_model, test.images) == test.labels).mean())
        result["cnn_swap_follows_colour"] = float((blackbox_predict(cnn_model, swapped.images) == target).mean())
    return result


def leaky_data(seed: int, n_train: int = 60, n_test: int = 30, luminances=(0.30, 0.45, 0.60)):
    r"""Birds whose head colours (red, green, blue hues) have the luminances ``luminances``, and the hue swap.

    Returns ``(train, test, swapped, target)``: ``swapped`` is the test set with every head repainted in
    the next hue (red -> green -> blue -> red) *at its own luminance* (the paper's luminance-preserving
    hue change), so its grey images equal the test set's; ``target`` is the class of the new hue and the
    same body shape. Drawn with ``default_rng(seed)`` as :func:`experiment_data` draws the default birds.
    """
    colours = ("red", "green", "blue")
    if len(luminances) != len(colours):
        raise ValueError(f"luminances must give one luminance per colour {colours}, got {luminances!r}")
    palette = hue_palette(dict(zip(colours, luminances)))
    perm = {c: colours[(i + 1) % len(colours)] for i, c in enumerate(colours)}
    kept = hue_palette({perm[c]: lum for c, lum in zip(colours, luminances)})
    rng = np.random.default_rng(check_int(seed, "seed", low=0))
    train = make_birds(n_train, rng, colours=colours, palette=palette)
    test = make_birds(n_test, rng, colours=colours, palette=palette)
    return train, test, swap_head_colours(test, perm, palette=kept), swapped_labels(test, perm)


def run_leaky(seed: int, n_train: int = 60, n_test: int = 30, epochs: int = 45, cnn_epochs: int = 30,
              luminances=(0.30, 0.45, 0.60), alpha_d: float = 1.4, device=None) -> dict:
    r"""One seed of the leaky-palette analysis: LucidPPN and the black-box CNN trained on birds whose head
    colours differ in luminance (:func:`leaky_data`), tested on their test birds and under the
    luminance-preserving hue swap.

    Returns the test accuracies (fused, ShapeTexNet alone, CNN) and, under the swap, the share of birds
    whose prediction is the new hue's class (``follows_hue``, ``cnn_follows_hue``), the original class
    (``keeps_class``, ``cnn_keeps_class``), and ShapeTexNet's agreement with itself (1 by construction).
    ``device`` (default :func:`companion_lib.common.device`) is where both models train and predict, as in
    :func:`run_experiment`.
    """
    dev = resolve_device(device)
    train, test, swapped, target = leaky_data(seed, n_train, n_test, luminances)
    model, _ = fit_lucidppn(train, alpha_d=alpha_d, epochs=epochs, seed=seed, device=dev)
    out, out_sw = lucid_predict(model, test.images), lucid_predict(model, swapped.images)
    pred, pred_sw = out.logits.argmax(1).numpy(), out_sw.logits.argmax(1).numpy()
    shape, shape_sw = out.shape_logits.argmax(1).numpy(), out_sw.shape_logits.argmax(1).numpy()
    cnn_model = fit_blackbox(train, epochs=cnn_epochs, seed=seed, device=dev)
    cnn_pred, cnn_sw = blackbox_predict(cnn_model, test.images), blackbox_predict(cnn_model, swapped.images)
    return {"seed": seed, "fused_acc": float((pred == test.labels).mean()),
            "shape_acc": float((shape == test.labels).mean()),
            "cnn_acc": float((cnn_pred == test.labels).mean()),
            "follows_hue": float((pred_sw == target).mean()), "keeps_class": float((pred_sw == test.labels).mean()),
            "shape_agreement": float((shape_sw == shape).mean()),
            "cnn_follows_hue": float((cnn_sw == target).mean()), "cnn_keeps_class": float((cnn_sw == test.labels).mean())}
