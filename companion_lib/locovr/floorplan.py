r"""Floor plans with connected free space, clearance maps and A* routes (the LocoVR homes' stand-in)."""

from __future__ import annotations

import numpy as np
from scipy import ndimage
from skimage.graph import route_through_array

__all__ = ["ROOM_M", "make_floorplan", "check_connected", "clearance_m", "astar_route",
           "to_cell", "to_metres", "sample_free_point", "downsample"]

ROOM_M = 10.0   # side of the square home in metres (LocoVR: 10 m = 1024 px)


def check_connected(occ: np.ndarray) -> None:
    """Raise ``ValueError`` unless the free cells of ``occ`` (True = obstacle) form one component."""
    occ = np.asarray(occ, dtype=bool)
    if occ.ndim != 2:
        raise ValueError(f"occ must be a 2-D grid, got shape {occ.shape}")
    _, n = ndimage.label(~occ)
    if n != 1:
        raise ValueError(f"occ: the free space has {n} connected components, expected 1")


def make_floorplan(rng: np.random.Generator, size: int = 64, n_furniture: tuple[int, int] = (3, 7),
                   door_m: float = 0.9, max_attempts: int = 100) -> np.ndarray:
    """A random home: outer walls, one vertical and one or two horizontal interior walls with doors,
    and furniture rectangles kept only if the free space stays connected. True = obstacle. The walls are
    drawn again when one meets a door (at most ``max_attempts`` times)."""
    if size < 16:
        raise ValueError(f"size must be >= 16 cells, got {size}")
    cell = ROOM_M / size
    door = max(2, int(round(door_m / cell)))
    for _ in range(max_attempts):
        occ = np.zeros((size, size), dtype=bool)
        occ[0, :] = occ[-1, :] = occ[:, 0] = occ[:, -1] = True
        # vertical wall at column xv, with one door
        xv = int(rng.integers(size // 3, 2 * size // 3))
        occ[:, xv] = True
        d0 = int(rng.integers(2, size - door - 2))
        occ[d0:d0 + door, xv] = False
        # one or two horizontal walls, each on one side of the vertical wall, each with a door
        for side in rng.permutation(2)[: int(rng.integers(1, 3))]:
            yh = int(rng.integers(size // 3, 2 * size // 3))
            lo, hi = (1, xv) if side == 0 else (xv + 1, size - 1)
            occ[yh, lo:hi] = True
            if hi - lo > door + 2:
                g = int(rng.integers(lo + 1, hi - door))
                occ[yh, g:g + door] = False
        occ[d0:d0 + door, xv] = False
        if ndimage.label(~occ)[1] == 1 and ndimage.label(~downsample(occ))[1] == 1:
            break                                    # otherwise a wall met a door: draw the walls again
    else:
        raise RuntimeError(f"no connected floor plan in {max_attempts} attempts (size {size}, door {door_m} m)")
    for _ in range(int(rng.integers(n_furniture[0], n_furniture[1] + 1))):
        h, w = rng.integers(3, 9, size=2)
        r, c = rng.integers(2, size - 2 - h), rng.integers(2, size - 2 - w)
        trial = occ.copy()
        trial[r:r + h, c:c + w] = True
        # keep a 0.5 m corridor: the dilated obstacles must not disconnect the free space, nor must
        # the coarse map the predictors see
        if (ndimage.label(~trial)[1] == 1
                and ndimage.label(~ndimage.binary_dilation(trial, iterations=2))[1] == 1
                and ndimage.label(~downsample(trial))[1] == 1):
            occ = trial
    check_connected(occ)
    return occ


def clearance_m(occ: np.ndarray) -> np.ndarray:
    """Distance in metres from each cell centre to the nearest obstacle cell."""
    occ = np.asarray(occ, dtype=bool)
    return ndimage.distance_transform_edt(~occ) * (ROOM_M / occ.shape[0])


def to_cell(p: np.ndarray, size: int) -> tuple[int, int]:
    """Metres (x, y) -> grid cell (row, col)."""
    x, y = np.asarray(p, dtype=float)
    return cell_of(float(x), float(y), size)


def cell_of(x: float, y: float, size: int) -> tuple[int, int]:
    """:func:`to_cell` of the point (x, y) given as two floats (no array is built: the simulator's loop)."""
    cell = ROOM_M / size
    # min/max on the floored scalars: the same cell as np.clip, without its per-call overhead
    return (int(min(max(y // cell, 0), size - 1)), int(min(max(x // cell, 0), size - 1)))


def to_metres(cells: np.ndarray, size: int) -> np.ndarray:
    """Grid cells (row, col) -> metres (x, y) of the cell centres."""
    cells = np.asarray(cells, dtype=float).reshape(-1, 2)
    return (cells[:, ::-1] + 0.5) * (ROOM_M / size)


def astar_route(occ: np.ndarray, start: np.ndarray, goal: np.ndarray, cost: np.ndarray | None = None,
                ) -> np.ndarray:
    r"""Minimum-cost 8-connected route from ``start`` to ``goal`` (metres) on the grid ``occ``.

    ``cost`` is a per-cell cost (default 1: the shortest path); obstacles are impassable. Uses
    scikit-image's ``route_through_array`` (a minimum-cost-path search with geometric diagonal
    weights). Returns the route as an array of cell centres in metres, start first."""
    occ = np.asarray(occ, dtype=bool)
    size = occ.shape[0]
    s, g = to_cell(start, size), to_cell(goal, size)
    if occ[s]:
        raise ValueError(f"start {tuple(np.round(start, 2))} lies inside an obstacle")
    if occ[g]:
        raise ValueError(f"goal {tuple(np.round(goal, 2))} lies inside an obstacle")
    c = np.ones(occ.shape) if cost is None else np.asarray(cost, dtype=float).copy()
    c[occ] = np.inf
    path, _ = route_through_array(c, s, g, fully_connected=True, geometric=True)
    return to_metres(np.array(path), size)


def sample_free_point(rng: np.random.Generator, occ: np.ndarray, min_clear_m: float = 0.35,
                      free: np.ndarray | None = None) -> np.ndarray:
    """A uniformly random point (metres) in a cell with at least ``min_clear_m`` clearance.

    ``free`` (optional): those cells, ``np.argwhere(clearance_m(occ) >= min_clear_m)``, precomputed by a
    caller that draws many points in one home; the draws are the same."""
    if free is None:
        free = np.argwhere(clearance_m(occ) >= min_clear_m)
    if len(free) == 0:
        raise ValueError("occ: no cell has the requested clearance")
    r, c = free[rng.integers(len(free))]
    cell = ROOM_M / occ.shape[0]
    return np.array([(c + rng.uniform(0.25, 0.75)) * cell, (r + rng.uniform(0.25, 0.75)) * cell])


def downsample(occ: np.ndarray, factor: int = 2) -> np.ndarray:
    """Coarser occupancy grid: a coarse cell is an obstacle if any of its fine cells is.

    (A majority rule would erase the one-cell walls of the 64-cell homes: a wall covers only half of
    each 2 x 2 block.) Doors and corridors stay open because the floor plans keep them at least five
    fine cells wide."""
    occ = np.asarray(occ, dtype=bool)
    n = occ.shape[0] // factor
    return occ[: n * factor, : n * factor].reshape(n, factor, n, factor).any(axis=(1, 3))
