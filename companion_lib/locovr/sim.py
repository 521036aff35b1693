r"""Two-person social-force simulator (Helbing & Molnar 1995) on a floor plan: the LocoVR stand-in."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .floorplan import ROOM_M, astar_route, clearance_m, sample_free_point, to_cell

__all__ = ["SocialForceParams", "Episode", "anisotropy", "social_forces", "simulate_episode",
           "route_cost"]


@dataclass(frozen=True)
class SocialForceParams:
    r"""Parameters of the force model; defaults are the research note's (Delta t = 1/15 s as LocoVR's 15 Hz)."""
    dt: float = 1 / 15          # time step (s)
    tau: float = 0.5            # relaxation time (s)
    A: float = 2.0              # interpersonal strength (m/s^2)
    B: float = 0.35             # interpersonal range (m)
    radius: float = 0.3         # body radius r (m)
    lam: float = 0.3            # anisotropy: weight of a person straight behind
    A_wall: float = 3.0         # wall strength (m/s^2)
    B_wall: float = 0.15        # wall range (m)
    sidestep: float = 0.6       # right-hand sidestep acceleration when head-on (m/s^2)
    lookahead: float = 1.0      # look-ahead along the route (m)
    goal_tol: float = 0.2       # arrival radius (m)
    max_time: float = 25.0      # give up after this many seconds

    def __post_init__(self):
        if not self.dt > 0:
            raise ValueError(f"dt must be > 0, got {self.dt}")
        if not self.tau > 0:
            raise ValueError(f"tau must be > 0, got {self.tau}")


@dataclass
class Episode:
    """One two-person episode: positions (T, 2) in metres at 15 Hz, until person 1 arrives."""
    occ: np.ndarray
    p1: np.ndarray
    p2: np.ndarray
    goal1: np.ndarray
    goal2: np.ndarray
    reached: bool
    layout: int = 0
    meta: dict = field(default_factory=dict)


def anisotropy(cos_phi: np.ndarray, lam: float = 0.3) -> np.ndarray:
    r"""$w(\varphi)=\lambda+(1-\lambda)\frac{1+\cos\varphi}{2}$: people react more to what is ahead."""
    return lam + (1 - lam) * (1 + np.asarray(cos_phi)) / 2


def social_forces(x: np.ndarray, v: np.ndarray, e: np.ndarray, v0: np.ndarray,
                  p: SocialForceParams = SocialForceParams()) -> np.ndarray:
    r"""Goal attraction plus interpersonal repulsion (with anisotropy and sidestep) for two people.

    ``x``, ``v``, ``e`` are (2, 2): positions, velocities, desired unit directions; ``v0`` (2,).
    Walls are added by the simulator. Returns accelerations (2, 2)."""
    f = (v0[:, None] * e - v) / p.tau
    for i, j in ((0, 1), (1, 0)):
        d = x[i] - x[j]
        dist = np.linalg.norm(d) + 1e-9
        n = d / dist                                   # from j to i
        cos_phi = float(-n @ e[i])                     # j straight ahead of i: cos = 1
        f[i] += p.A * np.exp((2 * p.radius - dist) / p.B) * n * anisotropy(cos_phi, p.lam)
        # head-on: both ahead of each other and approaching -> step to the right
        if dist < 3.0 and cos_phi > 0.8 and float((v[i] - v[j]) @ n) < 0:
            right = np.array([e[i][1], -e[i][0]])
            f[i] += p.sidestep * right
    return f


def route_cost(occ: np.ndarray) -> np.ndarray:
    r"""Clearance cost $c = 1 + 4 e^{-d/0.5\,\mathrm{m}}$: people keep away from walls and furniture."""
    return 1 + 4 * np.exp(-clearance_m(occ) / 0.5)


def _target(route: np.ndarray, k: int, x: np.ndarray, lookahead: float) -> tuple[np.ndarray, int]:
    """Advance the route index k past points already reached and return the look-ahead target."""
    d = np.linalg.norm(route[k:] - x, axis=1)
    k = k + int(np.argmin(d[: max(1, int(6 / (ROOM_M / 64)))]))
    ahead = np.cumsum(np.r_[0, np.linalg.norm(np.diff(route[k:], axis=0), axis=1)])
    t = k + int(np.searchsorted(ahead, lookahead))
    return route[min(t, len(route) - 1)], k


def simulate_episode(occ: np.ndarray, rng: np.random.Generator, crossing_prob: float = 0.6,
                     v0_range: tuple[float, float] = (1.0, 1.4), min_goal_m: float = 2.0,
                     params: SocialForceParams = SocialForceParams(), layout: int = 0) -> Episode:
    r"""Simulate one two-person episode on ``occ``; stops when person 1 reaches its goal (as LocoVR)."""
    occ = np.asarray(occ, dtype=bool)
    size = occ.shape[0]
    clear = clearance_m(occ)
    gy, gx = np.gradient(clear)
    cost = route_cost(occ)
    while True:
        s1, g1 = sample_free_point(rng, occ), sample_free_point(rng, occ)
        if np.linalg.norm(s1 - g1) >= min_goal_m:
            break
    crossing = rng.random() < crossing_prob
    while True:
        if crossing:       # person 2 starts near person 1's goal and walks towards person 1's start
            s2, g2 = _near(rng, occ, g1, 1.0), _near(rng, occ, s1, 1.0)
        else:
            s2, g2 = sample_free_point(rng, occ), sample_free_point(rng, occ)
        if np.linalg.norm(s2 - g2) >= min_goal_m and np.linalg.norm(s2 - s1) > 1.0:
            break
    routes = [astar_route(occ, s1, g1, cost), astar_route(occ, s2, g2, cost)]
    routes = [np.vstack([r[:-1], g]) for r, g in zip(routes, (g1, g2))]
    x = np.array([s1, s2], dtype=float)
    v = np.zeros((2, 2))
    v0 = rng.uniform(*v0_range, size=2)
    goals = np.array([g1, g2])
    ks = [0, 0]
    arrived = np.zeros(2, dtype=bool)
    traj = [x.copy()]
    n_steps = int(params.max_time / params.dt)
    for _ in range(n_steps):
        e = np.zeros((2, 2))
        for i in range(2):
            tgt, ks[i] = _target(routes[i], ks[i], x[i], params.lookahead)
            d = tgt - x[i]
            e[i] = d / (np.linalg.norm(d) + 1e-9)
        f = social_forces(x, v, e, v0, params)
        for i in range(2):
            r, c = to_cell(x[i], size)
            dw = clear[r, c]
            grad = np.array([gx[r, c], gy[r, c]])
            gn = np.linalg.norm(grad)
            if gn > 0:
                f[i] += params.A_wall * np.exp((params.radius - dw) / params.B_wall) * grad / gn
        v = v + params.dt * f
        speed = np.linalg.norm(v, axis=1, keepdims=True)
        v = np.where(speed > 1.3 * v0[:, None], v * 1.3 * v0[:, None] / np.maximum(speed, 1e-9), v)
        v[arrived] = 0.0
        for i in range(2):
            if arrived[i]:
                continue
            new = x[i] + params.dt * v[i]
            if occ[to_cell(new, size)]:                    # slide along the wall
                for trial in (np.array([new[0], x[i][1]]), np.array([x[i][0], new[1]])):
                    if not occ[to_cell(trial, size)]:
                        new = trial
                        break
                else:
                    new = x[i]
                v[i] = (new - x[i]) / params.dt
            x[i] = new
            if np.linalg.norm(x[i] - goals[i]) < params.goal_tol:
                arrived[i] = True
                v[i] = 0.0
        traj.append(x.copy())
        if arrived[0]:
            break
    traj = np.array(traj)
    return Episode(occ=occ, p1=traj[:, 0], p2=traj[:, 1], goal1=g1, goal2=g2, reached=bool(arrived[0]),
                   layout=layout, meta={"crossing": bool(crossing), "v0": v0})


def _near(rng: np.random.Generator, occ: np.ndarray, p: np.ndarray, radius: float) -> np.ndarray:
    """A free point (clearance >= 0.35 m) within ``radius`` of ``p`` (any free point if none)."""
    clear = clearance_m(occ)
    cell = ROOM_M / occ.shape[0]
    rc = np.argwhere(clear >= 0.35)
    xy = (rc[:, ::-1] + 0.5) * cell
    ok = np.linalg.norm(xy - p, axis=1) <= radius
    pool = xy[ok] if ok.any() else xy
    return pool[rng.integers(len(pool))] + rng.uniform(-0.25, 0.25, size=2) * cell
