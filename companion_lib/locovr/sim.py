r"""Two-person social-force simulator (Helbing & Molnar 1995) on a floor plan: the LocoVR stand-in."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import math

import numpy as np

from .floorplan import ROOM_M, astar_route, cell_of, clearance_m, sample_free_point

__all__ = ["SocialForceParams", "Episode", "anisotropy", "social_forces", "wall_force", "simulate_episode",
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
    """One episode: positions (T, 2) in metres at 15 Hz, until person 1 arrives (``p2``, ``goal2``: ``None``
    when person 1 walks alone)."""
    occ: np.ndarray
    p1: np.ndarray
    p2: np.ndarray | None
    goal1: np.ndarray
    goal2: np.ndarray | None
    reached: bool
    layout: int = 0
    meta: dict = field(default_factory=dict)


def _rownorms(a: np.ndarray, keepdims: bool = False) -> np.ndarray:
    """Row norms of a real (n, 2) array, computed exactly as ``np.linalg.norm(a, axis=1)`` does."""
    return np.sqrt(np.add.reduce(a * a, axis=1, keepdims=keepdims))


def anisotropy(cos_phi: np.ndarray, lam: float = 0.3) -> np.ndarray:
    r"""$w(\varphi)=\lambda+(1-\lambda)\frac{1+\cos\varphi}{2}$: people react more to what is ahead."""
    return lam + (1 - lam) * (1 + cos_phi) / 2


def social_forces(x, v, e, v0, p: SocialForceParams = SocialForceParams()) -> np.ndarray:
    r"""Goal attraction plus interpersonal repulsion (with anisotropy and sidestep), for one or two people.

    ``x``, ``v``, ``e`` are (n, 2) (n = 1 or 2): positions, velocities, desired unit directions; ``v0`` (n,).
    Walls are added by the simulator (:func:`wall_force`). Returns the accelerations, (n, 2). The
    simulator calls this function at every step; it is written on Python floats because it works on two
    people at a time, where NumPy's per-call overhead would dominate."""
    n = len(x)
    if not (len(v) == len(e) == len(v0) == n) or n not in (1, 2):
        raise ValueError(f"x, v, e and v0 must describe the same one or two people, got {len(x)}, {len(v)}, "
                         f"{len(e)}, {len(v0)}")
    f = [[(v0[i] * e[i][0] - v[i][0]) / p.tau, (v0[i] * e[i][1] - v[i][1]) / p.tau] for i in range(n)]
    for i, j in ((0, 1), (1, 0))[: 2 if n == 2 else 0]:
        dx, dy = x[i][0] - x[j][0], x[i][1] - x[j][1]
        dist = math.sqrt(dx * dx + dy * dy) + 1e-9
        nx, ny = dx / dist, dy / dist                      # unit vector from j to i
        cos_phi = -(nx * e[i][0] + ny * e[i][1])           # j straight ahead of i: cos = 1
        push = p.A * math.exp((2 * p.radius - dist) / p.B) * anisotropy(cos_phi, p.lam)
        f[i][0] += push * nx
        f[i][1] += push * ny
        # head-on: each ahead of the other and approaching -> step to the right of the desired direction
        closing = (v[i][0] - v[j][0]) * nx + (v[i][1] - v[j][1]) * ny
        if dist < 3.0 and cos_phi > 0.8 and closing < 0:
            f[i][0] += p.sidestep * e[i][1]
            f[i][1] -= p.sidestep * e[i][0]
    return np.array(f, dtype=float)


def wall_force(clear: np.ndarray, gx: np.ndarray, gy: np.ndarray, cell: tuple[int, int],
               p: SocialForceParams = SocialForceParams()) -> np.ndarray:
    r"""Wall repulsion $A_w e^{(r-d_W)/B_w}\,\nabla d_W/\|\nabla d_W\|$ in the grid cell ``cell`` (row, col):
    ``clear`` is the clearance map $d_W$ (m), ``gx``, ``gy`` its gradient. Zero where the gradient vanishes."""
    r, c = cell
    g0, g1 = float(gx[r, c]), float(gy[r, c])
    gn = math.sqrt(g0 * g0 + g1 * g1)
    if gn == 0:
        return np.zeros(2)
    a = p.A_wall * math.exp((p.radius - float(clear[r, c])) / p.B_wall) / gn
    return np.array([a * g0, a * g1])


def route_cost(occ: np.ndarray, clear: np.ndarray | None = None) -> np.ndarray:
    r"""Clearance cost $c = 1 + 4 e^{-d/0.5\,\mathrm{m}}$: people keep away from walls and furniture.
    ``clear`` (optional): ``clearance_m(occ)``, already computed."""
    return 1 + 4 * np.exp(-(clearance_m(occ) if clear is None else clear) / 0.5)


_WINDOW = max(1, int(6 / (ROOM_M / 64)))   # route points searched for the nearest one (6 m of route)


def _ahead(seg: list, k: int, lookahead: float) -> int:
    """``searchsorted(cumsum([0, seg[k], seg[k+1], ...]), lookahead)``: the running sum walks the segment
    lengths from ``k`` one by one (the same additions in the same order as the cumulative sum) and stops as
    soon as it reaches ``lookahead``."""
    if not 0.0 < lookahead:
        return 0
    i, acc = 1, 0.0
    for j in range(k, len(seg)):
        acc = acc + seg[j]
        if acc >= lookahead:
            break
        i += 1
    return i


def _target(route: np.ndarray, k: int, x: np.ndarray, lookahead: float,
            seg: list | None = None) -> tuple[np.ndarray, int]:
    """Advance the route index k past points already reached and return the look-ahead target.

    The nearest of the next ``_WINDOW`` route points becomes the new k; the target is the first route
    point at least ``lookahead`` metres of route beyond it. ``seg`` (optional) holds the route's segment
    lengths, ``np.linalg.norm(np.diff(route, axis=0), axis=1)`` as a list; the running sum walks them one
    by one from k, which is exactly the cumulative sum (and its ``searchsorted``) over the rest of the
    route, stopped as soon as the look-ahead is reached."""
    d = _rownorms(route[k:k + _WINDOW] - x)
    k = k + int(d.argmin())
    if seg is None:
        seg = _rownorms(np.diff(route, axis=0)).tolist()
    t = k + _ahead(seg, k, lookahead)
    return route[min(t, len(route) - 1)], k


def simulate_episode(occ: np.ndarray, rng: np.random.Generator, crossing_prob: float = 0.6,
                     v0_range: tuple[float, float] = (1.0, 1.4), min_goal_m: float = 2.0,
                     params: SocialForceParams = SocialForceParams(), layout: int = 0,
                     partner: bool = True) -> Episode:
    r"""Simulate one episode on ``occ``; stops when person 1 reaches its goal (as LocoVR).

    With ``partner=False`` person 1 walks alone (a single-person data set such as GIMO): no second person
    is drawn, and ``Episode.p2`` and ``goal2`` are ``None``."""
    occ = np.asarray(occ, dtype=bool)
    clear, gy, gx, cost, free = _layout_maps(occ.tobytes(), occ.shape)
    while True:
        s1, g1 = sample_free_point(rng, occ, free=free), sample_free_point(rng, occ, free=free)
        if np.linalg.norm(s1 - g1) >= min_goal_m:
            break
    starts, goals, crossing = [s1], [g1], False
    if partner:
        crossing = rng.random() < crossing_prob
        while True:
            if crossing:       # person 2 starts near person 1's goal and walks towards person 1's start
                s2, g2 = _near(rng, occ, g1, 1.0, free), _near(rng, occ, s1, 1.0, free)
            else:
                s2, g2 = sample_free_point(rng, occ, free=free), sample_free_point(rng, occ, free=free)
            if np.linalg.norm(s2 - g2) >= min_goal_m and np.linalg.norm(s2 - s1) > 1.0:
                break
        starts, goals = [s1, s2], [g1, g2]
    routes = [astar_route(occ, s, g, cost) for s, g in zip(starts, goals)]
    routes = [np.vstack([r[:-1], g]) for r, g in zip(routes, goals)]
    v0 = rng.uniform(*v0_range, size=len(starts))
    traj, reached = _walk(occ, clear, gx, gy, routes, np.array(starts, dtype=float), np.array(goals), v0, params)
    return Episode(occ=occ, p1=traj[:, 0], p2=traj[:, 1] if partner else None, goal1=g1,
                   goal2=goals[1] if partner else None, reached=reached, layout=layout,
                   meta={"crossing": bool(crossing), "v0": v0, "partner": partner})


@lru_cache(maxsize=64)
def _layout_maps(occ_bytes: bytes, shape: tuple) -> tuple:
    """Per home (cached, as a data set walks many episodes in each): the clearance map, its gradient,
    the route cost and the cells of clearance >= 0.35 m, exactly as :func:`clearance_m`,
    ``np.gradient``, :func:`route_cost` and :func:`sample_free_point` compute them. Read-only arrays."""
    occ = np.frombuffer(occ_bytes, dtype=bool).reshape(shape)
    clear = clearance_m(occ)
    gy, gx = np.gradient(clear)
    cost = route_cost(occ, clear)
    free = np.argwhere(clear >= 0.35)
    for a in (clear, gy, gx, cost, free):
        a.setflags(write=False)
    return clear, gy, gx, cost, free


def _walk(occ: np.ndarray, clear: np.ndarray, gx: np.ndarray, gy: np.ndarray, routes: list, x: np.ndarray,
          goals: np.ndarray, v0: np.ndarray, params: SocialForceParams) -> tuple[np.ndarray, bool]:
    r"""The time loop of :func:`simulate_episode` for ``len(routes)`` people (one or two): positions
    (T, n, 2) and whether person 1 arrived.

    Each step: the look-ahead target on each person's route (:func:`_target`) gives the desired
    direction; :func:`social_forces` plus the :func:`wall_force` of the cell a person stands in give the
    acceleration; the velocity is updated and capped at $1.3\,v_0$; the person moves (sliding along a
    wall, stopping at the goal)."""
    size, n, dt = occ.shape[0], len(routes), params.dt
    occl = occ.tolist()
    segs = [_rownorms(np.diff(r, axis=0)).tolist() for r in routes]
    P, G, v0l = x.tolist(), goals.tolist(), v0.tolist()
    V = [[0.0, 0.0] for _ in range(n)]
    ks, arrived = [0] * n, [False] * n
    wall = {}                           # the wall force depends on the cell only: once per visited cell
    traj = [[c for p in P for c in p]]
    for _ in range(int(params.max_time / dt)):
        E = []
        for i in range(n):
            (tx, ty), ks[i] = _target(routes[i], ks[i], np.array(P[i]), params.lookahead, segs[i])
            d0, d1 = tx - P[i][0], ty - P[i][1]
            den = math.sqrt(d0 * d0 + d1 * d1) + 1e-9
            E.append([d0 / den, d1 / den])
        F = social_forces(P, V, E, v0l, params).tolist()
        for i in range(n):
            rc = cell_of(P[i][0], P[i][1], size)
            if rc not in wall:
                wall[rc] = wall_force(clear, gx, gy, rc, params).tolist()
            a, b = V[i][0] + dt * (F[i][0] + wall[rc][0]), V[i][1] + dt * (F[i][1] + wall[rc][1])
            speed = math.sqrt(a * a + b * b)
            if speed > 1.3 * v0l[i]:                     # people do not run: cap the speed at 1.3 v0
                a, b = a * 1.3 * v0l[i] / speed, b * 1.3 * v0l[i] / speed
            V[i] = [0.0, 0.0] if arrived[i] else [a, b]
        for i in range(n):
            if arrived[i]:
                continue
            px, py = P[i]
            nx, ny = px + dt * V[i][0], py + dt * V[i][1]
            r, c = cell_of(nx, ny, size)
            if occl[r][c]:                               # slide along the wall
                for qx, qy in ((nx, py), (px, ny)):
                    r, c = cell_of(qx, qy, size)
                    if not occl[r][c]:
                        nx, ny = qx, qy
                        break
                else:
                    nx, ny = px, py
                V[i] = [(nx - px) / dt, (ny - py) / dt]
            P[i] = [nx, ny]
            if math.hypot(nx - G[i][0], ny - G[i][1]) < params.goal_tol:
                arrived[i] = True
                V[i] = [0.0, 0.0]
        traj.append([c for p in P for c in p])
        if arrived[0]:
            break
    return np.array(traj).reshape(-1, n, 2), arrived[0]


def _near(rng: np.random.Generator, occ: np.ndarray, p: np.ndarray, radius: float,
          free: np.ndarray | None = None) -> np.ndarray:
    """A free point (clearance >= 0.35 m) within ``radius`` of ``p`` (any free point if none);
    ``free``: those cells, precomputed."""
    cell = ROOM_M / occ.shape[0]
    rc = np.argwhere(clearance_m(occ) >= 0.35) if free is None else free
    xy = (rc[:, ::-1] + 0.5) * cell
    ok = np.linalg.norm(xy - p, axis=1) <= radius
    pool = xy[ok] if ok.any() else xy
    return pool[rng.integers(len(pool))] + rng.uniform(-0.25, 0.25, size=2) * cell
