r"""Two-person social-force simulator (Helbing & Molnar 1995) on a floor plan: the LocoVR stand-in."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .floorplan import ROOM_M, astar_route, cell_of, clearance_m, sample_free_point

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


def _vnorm(a: np.ndarray) -> float:
    """Euclidean norm of one vector, computed exactly as ``np.linalg.norm(a)`` does (``sqrt(a.dot(a))``)
    without its argument checks (the simulator calls it a million times)."""
    return np.sqrt(a.dot(a))


def _rownorms(a: np.ndarray, keepdims: bool = False) -> np.ndarray:
    """Row norms of a real (n, 2) array, computed exactly as ``np.linalg.norm(a, axis=1)`` does."""
    return np.sqrt(np.add.reduce(a * a, axis=1, keepdims=keepdims))


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
                     params: SocialForceParams = SocialForceParams(), layout: int = 0) -> Episode:
    r"""Simulate one two-person episode on ``occ``; stops when person 1 reaches its goal (as LocoVR)."""
    occ = np.asarray(occ, dtype=bool)
    clear, gy, gx, cost, free = _layout_maps(occ.tobytes(), occ.shape)
    while True:
        s1, g1 = sample_free_point(rng, occ, free=free), sample_free_point(rng, occ, free=free)
        if np.linalg.norm(s1 - g1) >= min_goal_m:
            break
    crossing = rng.random() < crossing_prob
    while True:
        if crossing:       # person 2 starts near person 1's goal and walks towards person 1's start
            s2, g2 = _near(rng, occ, g1, 1.0, free), _near(rng, occ, s1, 1.0, free)
        else:
            s2, g2 = sample_free_point(rng, occ, free=free), sample_free_point(rng, occ, free=free)
        if np.linalg.norm(s2 - g2) >= min_goal_m and np.linalg.norm(s2 - s1) > 1.0:
            break
    routes = [astar_route(occ, s1, g1, cost), astar_route(occ, s2, g2, cost)]
    routes = [np.vstack([r[:-1], g]) for r, g in zip(routes, (g1, g2))]
    v0 = rng.uniform(*v0_range, size=2)
    traj, reached = _walk(occ, clear, gx, gy, routes, np.array([s1, s2], dtype=float), np.array([g1, g2]),
                          v0, params)
    return Episode(occ=occ, p1=traj[:, 0], p2=traj[:, 1], goal1=g1, goal2=g2, reached=reached,
                   layout=layout, meta={"crossing": bool(crossing), "v0": v0})


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
    r"""The time loop of :func:`simulate_episode`: positions (T, 2, 2) and whether person 1 arrived.

    Each step: the look-ahead target on each person's route (:func:`_target`), the desired directions,
    the forces of :func:`social_forces` plus the wall repulsion of the cell a person stands in, the
    velocity update capped at $1.3\,v_0$, and the move (sliding along a wall, stopping at the goal).
    The arithmetic is written out on Python floats for speed; every operation is the one the array form
    performs, in the same order (IEEE sums, products, quotients and square roots round identically in
    Python and NumPy), and the vector norms, dot products and exponentials still go through NumPy's
    ``dot``, ``@`` and ``exp``, so the trajectories are bitwise those of the array form."""
    size = occ.shape[0]
    occl = occ.tolist()
    dt, tau, lam, L = params.dt, params.tau, params.lam, params.lookahead
    buf = np.empty(2)

    def vnorm(a: float, b: float):               # np.linalg.norm of the 2-vector (a, b)
        buf[0] = a
        buf[1] = b
        return np.sqrt(buf.dot(buf))

    def mat(a0: float, a1: float, b0: float, b1: float) -> float:   # float(a @ b) of two 2-vectors
        return float(np.array([a0, a1]) @ np.array([b0, b1]))

    rx = [np.ascontiguousarray(r[:, 0]) for r in routes]
    ry = [np.ascontiguousarray(r[:, 1]) for r in routes]
    segs = [_rownorms(np.diff(r, axis=0)).tolist() for r in routes]
    rl = [r.tolist() for r in routes]
    P = x.tolist()                      # positions [[x, y], [x, y]]
    V = [[0.0, 0.0], [0.0, 0.0]]
    G = goals.tolist()
    v0l = v0.tolist()
    ks = [0, 0]
    arrived = [False, False]
    wall = {}                           # the wall force depends on the cell only: once per visited cell
    traj = [[P[0][0], P[0][1], P[1][0], P[1][1]]]
    n_steps = int(params.max_time / params.dt)
    for _ in range(n_steps):
        E = [[0.0, 0.0], [0.0, 0.0]]
        for i in range(2):
            px, py = P[i]
            k = ks[i]
            dx = rx[i][k:k + _WINDOW] - px
            dy = ry[i][k:k + _WINDOW] - py
            k = k + int(np.sqrt(dx * dx + dy * dy).argmin())
            j = _ahead(segs[i], k, L)
            ks[i] = k
            tx, ty = rl[i][min(k + j, len(rl[i]) - 1)]
            d0, d1 = tx - px, ty - py
            den = vnorm(d0, d1) + 1e-9
            E[i] = [d0 / den, d1 / den]
        # social_forces
        F = [[(v0l[i] * E[i][0] - V[i][0]) / tau, (v0l[i] * E[i][1] - V[i][1]) / tau] for i in range(2)]
        for i, o in ((0, 1), (1, 0)):
            d0, d1 = P[i][0] - P[o][0], P[i][1] - P[o][1]
            dist = vnorm(d0, d1) + 1e-9
            n0, n1 = d0 / dist, d1 / dist
            cos_phi = mat(-n0, -n1, E[i][0], E[i][1])
            amp = params.A * np.exp((2 * params.radius - dist) / params.B)
            w = lam + (1 - lam) * (1 + cos_phi) / 2
            F[i][0] = F[i][0] + amp * n0 * w
            F[i][1] = F[i][1] + amp * n1 * w
            if dist < 3.0 and cos_phi > 0.8 and mat(V[i][0] - V[o][0], V[i][1] - V[o][1], n0, n1) < 0:
                F[i][0] = F[i][0] + params.sidestep * E[i][1]
                F[i][1] = F[i][1] + params.sidestep * -E[i][0]
        for i in range(2):
            rc = cell_of(*P[i], size)
            if rc not in wall:
                r, c = rc
                grad = np.array([gx[r, c], gy[r, c]])
                gn = _vnorm(grad)
                wall[rc] = ((params.A_wall * np.exp((params.radius - clear[r, c]) / params.B_wall) * grad / gn
                             ).tolist() if gn > 0 else None)
            if wall[rc] is not None:
                F[i][0] = F[i][0] + wall[rc][0]
                F[i][1] = F[i][1] + wall[rc][1]
        for i in range(2):
            a, b = V[i][0] + dt * F[i][0], V[i][1] + dt * F[i][1]
            speed = np.sqrt(a * a + b * b)
            if speed > 1.3 * v0l[i]:
                m = max(speed, 1e-9)
                a, b = a * 1.3 * v0l[i] / m, b * 1.3 * v0l[i] / m
            V[i] = [0.0, 0.0] if arrived[i] else [a, b]
        for i in range(2):
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
            if vnorm(nx - G[i][0], ny - G[i][1]) < params.goal_tol:
                arrived[i] = True
                V[i] = [0.0, 0.0]
        traj.append([P[0][0], P[0][1], P[1][0], P[1][1]])
        if arrived[0]:
            break
    return np.array(traj).reshape(-1, 2, 2), arrived[0]


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
