r"""Data sets, rasterised inputs, and the three task models (path and goal U-Nets, trajectory MLP)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..common.device import module_device
from .floorplan import ROOM_M, clearance_m, downsample, make_floorplan, to_cell, to_metres
from .metrics import chamfer
from .sim import Episode, simulate_episode
from skimage.graph import route_through_array

__all__ = ["generate_dataset", "make_samples", "rasterise", "TinyUNet", "train_unet", "predict_maps",
           "extract_path", "astar_baseline", "goal_from_map", "random_goal_baseline",
           "trajectory_features", "map_patch", "TrajectoryMLP", "train_trajectory", "predict_trajectory",
           "constant_velocity", "goal_targets", "nearest_furniture_goal", "path_chamfers", "goal_errors"]

OBS, FUT = 15, 30      # 1 s observed, 2 s predicted, at 15 Hz


def generate_dataset(n_layouts: int, n_episodes: int, seed: int, size: int = 64,
                     v0_range: tuple[float, float] = (1.0, 1.4), partner: bool = True,
                     max_attempts: int = 20) -> list[Episode]:
    """``n_episodes`` successful episodes spread evenly over ``n_layouts`` random homes: two people, or
    person 1 alone with ``partner=False`` (a single-person data set). Episodes that do not reach the goal
    or are shorter than a sample (3 s) are drawn again, at most ``max_attempts`` times per episode."""
    if n_layouts < 1 or n_episodes < 1:
        raise ValueError(f"n_layouts and n_episodes must be >= 1, got {n_layouts}, {n_episodes}")
    rng = np.random.default_rng(seed)
    occs = [make_floorplan(rng, size) for _ in range(n_layouts)]
    out, k, tries = [], 0, 0
    while len(out) < n_episodes:
        tries += 1
        if tries > max_attempts * n_episodes:
            raise RuntimeError(f"only {len(out)} of {n_episodes} episodes succeeded in {tries - 1} attempts")
        ep = simulate_episode(occs[k % n_layouts], rng, v0_range=v0_range, layout=k % n_layouts,
                              partner=partner)
        if ep.reached and len(ep.p1) > OBS + FUT:
            out.append(ep)
            k += 1
    return out


def make_samples(episodes: list[Episode], per_episode: int = 2, seed: int = 0) -> dict:
    """Cut each episode at ``per_episode`` random times t0: 1 s of past, 2 s of future, the rest of the path.
    Without a second person (a single-person episode) ``past2`` is NaN."""
    rng = np.random.default_rng(seed)
    keys = ("past1", "past2", "fut1", "goal", "path", "occ")
    s = {k: [] for k in keys}
    for ep in episodes:
        for t0 in rng.integers(OBS - 1, len(ep.p1) - FUT - 1, size=per_episode):
            s["past1"].append(ep.p1[t0 - OBS + 1:t0 + 1])
            s["past2"].append(ep.p2[t0 - OBS + 1:t0 + 1] if ep.p2 is not None else np.full((OBS, 2), np.nan))
            s["fut1"].append(ep.p1[t0 + 1:t0 + 1 + FUT])
            s["goal"].append(ep.goal1)
            s["path"].append(ep.p1[t0:])
            s["occ"].append(ep.occ)
    return {k: (v if k in ("path", "occ") else np.array(v)) for k, v in s.items()}


def _blobs(points: np.ndarray, res: int, sigma: float = 1.0) -> np.ndarray:
    cell = ROOM_M / res
    g = (np.arange(res) + 0.5) * cell
    X, Y = np.meshgrid(g, g)
    out = np.zeros((res, res))
    P = np.atleast_2d(points)
    P = P[np.isfinite(P).all(axis=1)]    # an absent person (NaN) leaves the channel empty
    if len(P):     # all blobs in one array, then their elementwise maximum (exact, order-free)
        x, y = P[:, 0, None, None], P[:, 1, None, None]
        out = np.maximum(out, np.exp(-((X - x) ** 2 + (Y - y) ** 2) / (2 * (sigma * cell) ** 2)).max(axis=0))
    return out


def rasterise(samples: dict, res: int = 32, with_goal: bool = True, with_p2: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Input channels [map, p1 past, (p2 past), (goal)] and the path mask target, both (n, ., res, res)."""
    X, Y = [], []
    for i in range(len(samples["goal"])):
        occ = downsample(samples["occ"][i], samples["occ"][i].shape[0] // res)
        ch = [occ.astype(float), _blobs(samples["past1"][i][::3], res)]
        if with_p2:
            ch.append(_blobs(samples["past2"][i][::3], res))
        if with_goal:
            ch.append(_blobs(samples["goal"][i], res))
        X.append(ch)
        m = np.zeros((res, res))
        for p in samples["path"][i]:
            m[to_cell(p, res)] = 1
        Y.append(m[None])
    return np.array(X, dtype=np.float32), np.array(Y, dtype=np.float32)


class TinyUNet(nn.Module):
    """A three-level U-Net (the paper's PRED_GM in miniature: conv blocks, max-pool, bilinear up, skips)."""

    def __init__(self, in_ch: int, width: int = 16):
        super().__init__()
        def block(a, b):
            return nn.Sequential(nn.Conv2d(a, b, 3, padding=1), nn.ReLU(), nn.Conv2d(b, b, 3, padding=1), nn.ReLU())
        w = width
        self.e1, self.e2, self.e3 = block(in_ch, w), block(w, 2 * w), block(2 * w, 4 * w)
        self.d2, self.d1 = block(6 * w, 2 * w), block(3 * w, w)
        self.head = nn.Conv2d(w, 1, 1)
        self.pool = nn.MaxPool2d(2)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(self.pool(a))
        c = self.e3(self.pool(b))
        b = self.d2(torch.cat([self.up(c), b], 1))
        return self.head(self.d1(torch.cat([self.up(b), a], 1)))


def train_unet(X: np.ndarray, Y: np.ndarray, loss: str = "bce", steps: int = 300, batch: int = 32,
               lr: float = 2e-3, width: int = 16, seed: int = 0, pos_weight: float = 4.0,
               device=None) -> TinyUNet:
    """Adam on per-pixel BCE (path maps, ``loss="bce"``) or the cross-entropy of a softmax over the free
    pixels to a target heatmap summing to one (goal maps, ``"ce"``).

    ``device`` (default: the CPU) is where the U-Net trains and is returned, e.g. a GPU; it is initialised
    and its batches are drawn on the CPU as before and then moved there, so the CPU path is the same
    whatever the device argument."""
    if loss not in ("bce", "ce"):
        raise ValueError(f"loss must be 'bce' or 'ce', got {loss!r}")
    dev = torch.device("cpu") if device is None else torch.device(device)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = TinyUNet(X.shape[1], width).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    Xt, Yt = torch.from_numpy(X).to(dev), torch.from_numpy(Y).to(dev)
    bce = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pos_weight).to(dev))
    for _ in range(steps):
        idx = torch.from_numpy(rng.integers(0, len(X), size=min(batch, len(X)))).to(dev)
        out = net(Xt[idx])
        if loss == "bce":
            l = bce(out, Yt[idx])
        else:
            logits = out.flatten(1).masked_fill(Xt[idx, 0].flatten(1) > 0.5, -1e4)
            l = nn.functional.cross_entropy(logits, Yt[idx].flatten(1))   # soft targets (heatmaps)
        opt.zero_grad()
        l.backward()
        opt.step()
    return net


@torch.no_grad()
def predict_maps(net: TinyUNet, X: np.ndarray) -> np.ndarray:
    """Sigmoid maps (n, res, res), computed where ``net`` is and returned as a NumPy array."""
    return torch.sigmoid(net(torch.from_numpy(X).to(module_device(net)))[:, 0]).cpu().numpy()


def extract_path(prob: np.ndarray, occ: np.ndarray, start: np.ndarray, goal: np.ndarray) -> np.ndarray:
    r"""A* from ``start`` to ``goal`` on the cost $1+20(1-\hat p)$ of a predicted path map (metres)."""
    res = prob.shape[0]
    occ = downsample(occ, occ.shape[0] // res)
    cost = 1 + 20 * (1 - prob)
    s, g = to_cell(start, res), to_cell(goal, res)
    occ = occ.copy()
    occ[s] = occ[g] = False
    cost[occ] = np.inf
    path, _ = route_through_array(cost, s, g, fully_connected=True, geometric=True)
    return to_metres(np.array(path), res)


def astar_baseline(occ: np.ndarray, start: np.ndarray, goal: np.ndarray, res: int = 32) -> np.ndarray:
    """The paper's baseline: the shortest 8-connected path on the same coarse map."""
    return extract_path(np.ones((res, res)), occ, start, goal)


def goal_from_map(logits_or_prob: np.ndarray, occ_coarse: np.ndarray) -> np.ndarray:
    """Arg-max free cell of a goal map, in metres."""
    m = np.where(occ_coarse, -np.inf, logits_or_prob)
    return to_metres(np.array(np.unravel_index(np.argmax(m), m.shape)), m.shape[0])[0]


def random_goal_baseline(occ_coarse: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random free cell (the paper's random baseline)."""
    free = np.argwhere(~occ_coarse)
    return to_metres(free[rng.integers(len(free))], occ_coarse.shape[0])[0]


def _frame(past1: np.ndarray) -> np.ndarray:
    """Rotation matrices (n, 2, 2) taking each person's last heading to +x."""
    h = past1[:, -1] - past1[:, -5]
    a = np.arctan2(h[:, 1], h[:, 0])
    c, s = np.cos(a), np.sin(a)
    return np.stack([np.stack([c, s], -1), np.stack([-s, c], -1)], 1)


PATCH_FORWARD = np.arange(-0.5, 2.51, 0.5)   # the local map patch: 7 x 7 points, 0.5 m apart, in the
PATCH_SIDE = np.arange(-1.5, 1.51, 0.5)      # heading frame (from 0.5 m behind to 2.5 m ahead, 1.5 m each side)
CLEAR_CAP = 1.0                              # clearance beyond 1 m counts as open space


def map_patch(samples: dict) -> np.ndarray:
    r"""The trajectory model's view of the map: the clearance (distance to the nearest obstacle, capped at
    1 m) at a 7 x 7 grid of points around person 1's current position, in the heading frame
    (:data:`PATCH_FORWARD` ahead, :data:`PATCH_SIDE` to the left); points outside the home read 0.
    Returns (n, 49) in metres."""
    p1 = samples["past1"]
    R = _frame(p1)
    u, w = np.meshgrid(PATCH_FORWARD, PATCH_SIDE, indexing="ij")
    local = np.stack([u.ravel(), w.ravel()], -1)                       # (49, 2) in the heading frame
    world = np.einsum("nji,kj->nki", R, local) + p1[:, -1:]            # R^T rotates back to the world
    out = np.zeros(world.shape[:2])
    cache = {}
    for i, occ in enumerate(samples["occ"]):
        if id(occ) not in cache:
            cache[id(occ)] = np.minimum(clearance_m(occ), CLEAR_CAP)
        clear = cache[id(occ)]
        size = clear.shape[0]
        col, row = np.floor(world[i] / (ROOM_M / size)).astype(int).T
        inside = (row >= 0) & (row < size) & (col >= 0) & (col < size)
        out[i, inside] = clear[row[inside], col[inside]]
    return out


def trajectory_features(samples: dict, use_p2: bool = True, use_map: bool = True) -> np.ndarray:
    """Heading-frame features: p1's past relative to now (30), the goal offset (2, in units of 5 m),
    the local map patch (49, :func:`map_patch`) and, compactly, p2's relative position (2, in units of
    3 m) and velocity (2, in m per 0.2 s). The units bring every feature to order one."""
    p1, p2, g = samples["past1"], samples["past2"], samples["goal"]
    R = _frame(p1)
    now = p1[:, -1:]
    rot = lambda v: np.einsum("nij,ntj->nti", R, v)
    f = [rot(p1 - now).reshape(len(p1), -1), rot((g[:, None] - now)).reshape(len(p1), -1) / 5]
    if use_map:
        f.append(map_patch(samples))
    if use_p2:
        if not np.isfinite(p2[:, -4:]).all():
            raise ValueError("use_p2=True needs a second person in every sample (single-person data has none)")
        f += [rot(p2[:, -1:] - now).reshape(len(p1), -1) / 3,
              rot(p2[:, -1:] - p2[:, -4:-3]).reshape(len(p1), -1) * 5]
    return np.hstack(f).astype(np.float32)


class TrajectoryMLP(nn.Module):
    """Features -> 30 future offsets in the heading frame."""

    def __init__(self, d_in: int, hidden: int = 128):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 2 * FUT))

    def forward(self, x):
        return self.net(x)


def train_trajectory(samples: dict, use_p2: bool = True, steps: int = 600, lr: float = 2e-3,
                     seed: int = 0, use_map: bool = True, device=None) -> TrajectoryMLP:
    """Full-batch Adam on the mean squared error of heading-frame future offsets.

    ``device`` (default: the CPU) is where the MLP trains and is returned, e.g. a GPU; it is initialised
    on the CPU as before and moved there with its features, so the CPU path is the same whatever the
    device argument."""
    dev = torch.device("cpu") if device is None else torch.device(device)
    torch.manual_seed(seed)
    X = torch.from_numpy(trajectory_features(samples, use_p2, use_map))
    R = _frame(samples["past1"])
    Y = np.einsum("nij,ntj->nti", R, samples["fut1"] - samples["past1"][:, -1:]).reshape(len(X), -1)
    Y = torch.from_numpy(Y.astype(np.float32))
    net = TrajectoryMLP(X.shape[1]).to(dev)
    X, Y = X.to(dev), Y.to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=1e-4)
    for _ in range(steps):
        l = ((net(X) - Y) ** 2).mean()
        opt.zero_grad()
        l.backward()
        opt.step()
    return net


@torch.no_grad()
def predict_trajectory(net: TrajectoryMLP, samples: dict, use_p2: bool = True, use_map: bool = True) -> np.ndarray:
    """Future positions (n, 30, 2) in world metres (the MLP runs where ``net`` is)."""
    X = torch.from_numpy(trajectory_features(samples, use_p2, use_map)).to(module_device(net))
    out = net(X).cpu().numpy().reshape(-1, FUT, 2)
    R = _frame(samples["past1"])
    return np.einsum("nji,ntj->nti", R, out) + samples["past1"][:, -1:]


def constant_velocity(samples: dict) -> np.ndarray:
    """Constant-velocity extrapolation from the last 0.27 s of the past."""
    p1 = samples["past1"]
    v = (p1[:, -1] - p1[:, -5]) / 4
    return p1[:, -1:] + v[:, None] * np.arange(1, FUT + 1)[None, :, None]


def goal_targets(samples: dict, res: int = 32, sigma: float = 1.5) -> np.ndarray:
    """Goal heatmaps (n, 1, res, res) summing to one: a Gaussian blob of ``sigma`` cells at the goal on the
    free cells, as the paper's goal heatmaps (the goal U-Net's soft target; ``sigma=0``: one-hot)."""
    Y = np.zeros((len(samples["goal"]), 1, res, res), dtype=np.float32)
    for i, g in enumerate(samples["goal"]):
        if sigma > 0:
            free = ~downsample(samples["occ"][i], samples["occ"][i].shape[0] // res)
            blob = _blobs(g, res, sigma) * free
            Y[i, 0] = blob / blob.sum()
        else:
            Y[(i, 0) + to_cell(g, res)] = 1
    return Y


def nearest_furniture_goal(occ_coarse: np.ndarray, past1: np.ndarray) -> np.ndarray:
    r"""The "nearest furniture" baseline: the free cell touching an indoor obstacle (furniture or an
    interior wall, not the outer wall) that is nearest to the walker, among those ahead of its heading
    (all such cells if none is ahead). Metres."""
    occ_coarse = np.asarray(occ_coarse, dtype=bool)
    res = occ_coarse.shape[0]
    inner = occ_coarse.copy()
    inner[0, :] = inner[-1, :] = inner[:, 0] = inner[:, -1] = False
    touch = np.zeros_like(inner)
    touch[1:] |= inner[:-1]
    touch[:-1] |= inner[1:]
    touch[:, 1:] |= inner[:, :-1]
    touch[:, :-1] |= inner[:, 1:]
    cand = np.argwhere(touch & ~occ_coarse)
    if len(cand) == 0:
        raise ValueError("occ_coarse: no free cell touches an indoor obstacle")
    xy = to_metres(cand, res)
    now, heading = past1[-1], past1[-1] - past1[-5]
    d = xy - now
    ahead = d @ heading > 0.5 * np.linalg.norm(d, axis=1) * (np.linalg.norm(heading) + 1e-9)
    pool = xy[ahead] if ahead.any() else xy
    return pool[np.argmin(np.linalg.norm(pool - now, axis=1))]


def path_chamfers(prob: np.ndarray | None, samples: dict) -> np.ndarray:
    """Chamfer distance (m) of the path extracted from each predicted map (``None``: the A* baseline)
    to the walked rest of the path, one value per sample."""
    out = []
    for i in range(len(samples["goal"])):
        start, goal, occ = samples["past1"][i, -1], samples["goal"][i], samples["occ"][i]
        res = 32 if prob is None else prob.shape[-1]
        p = astar_baseline(occ, start, goal, res) if prob is None else extract_path(prob[i], occ, start, goal)
        out.append(chamfer(p, samples["path"][i]))
    return np.array(out)


def goal_errors(pred: np.ndarray, samples: dict) -> np.ndarray:
    """Distance (m) of each predicted goal (n, 2) to the true goal."""
    return np.linalg.norm(np.asarray(pred) - samples["goal"], axis=1)
