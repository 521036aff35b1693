r"""SAE stitching: the change in MSE when a latent of a larger SAE is inserted into a smaller one, the groups
of latents to swap, and paths of stitched SAEs from the small SAE to the large one."""

from __future__ import annotations

import numpy as np

from .world import _unit
from .model import JumpReLUDictionary, _as_tensor

__all__ = ["insertion_deltas", "stitching_path", "stitching_path_gram", "swap_groups"]


def _union(A: JumpReLUDictionary, B: JumpReLUDictionary) -> JumpReLUDictionary:
    r"""All latents of A and B in one dictionary with A's $b_{dec}$; B's encoder biases absorb the change
    of centring, $b^B_{enc}+(b^A_{dec}-b^B_{dec})W^B_{enc}$, so every B latent fires exactly as in B."""
    if A.W_dec.shape[1] != B.W_dec.shape[1]:
        raise ValueError(f"cannot stitch SAEs of different input dimension ({A.W_dec.shape[1]} vs {B.W_dec.shape[1]})")
    b_enc_B = B.b_enc + (A.b_dec - B.b_dec) @ B.W_enc
    return JumpReLUDictionary(np.hstack([A.W_enc, B.W_enc]), np.concatenate([A.b_enc, b_enc_B]),
                              np.vstack([A.W_dec, B.W_dec]), A.b_dec, np.concatenate([A.thresholds, B.thresholds]))


def _dictionary(model) -> JumpReLUDictionary:
    return model if isinstance(model, JumpReLUDictionary) else model.as_dictionary()


def _mse(D: JumpReLUDictionary, X: np.ndarray) -> float:
    return float(((X - D.reconstruct(X)) ** 2).sum(1).mean())


def insertion_deltas(small, large, X) -> np.ndarray:
    r"""$\Delta\mathrm{MSE}_j=\mathrm{MSE}(A\cup\{j\})-\mathrm{MSE}(A)$ for every latent $j$ of the large SAE $B$,
    with MSE the mean over samples of $\|x-\hat x\|^2$. With $r=x-\hat x_A$ and $B$'s activation $f_j$,
    $\Delta_j=\overline{f_j^2-2f_j\langle r,d_j\rangle}$ (unit $d_j$), computed for all $j$ at once."""
    A, B = _dictionary(small), _dictionary(large)
    X = _as_tensor(X).numpy().astype(np.float64)
    U = _union(A, B)
    r = X - A.reconstruct(X)
    fB = U.encode(X)[:, A.width:]
    dB = B.W_dec.astype(np.float64)
    norms2 = (dB ** 2).sum(1)
    return (fB ** 2 * norms2 - 2 * fB * (r @ dB.T)).mean(0)


def swap_groups(small, large, candidates, tau: float = 0.5):
    r"""Groups for swapping: connected components of the bipartite graph that joins B latent $j$ (among
    ``candidates``) and A latent $i$ when $\cos(d^B_j, d^A_i)>\tau$ (every $j$ is joined at least to its
    argmax). Returns a list of ``(A_indices, B_indices)``."""
    A, B = _dictionary(small), _dictionary(large)
    candidates = np.asarray(candidates, dtype=int)
    cos = _unit(B.W_dec[candidates]) @ _unit(A.W_dec).T
    edges = cos > tau
    edges[np.arange(len(candidates)), cos.argmax(1)] = True
    parent = list(range(A.width + len(candidates)))

    def find(u):
        while parent[u] != u:
            parent[u] = parent[parent[u]]
            u = parent[u]
        return u

    for jj, i in zip(*np.nonzero(edges)):
        parent[find(A.width + jj)] = find(int(i))
    comps: dict[int, tuple[list, list]] = {}
    for jj, j in enumerate(candidates):
        comps.setdefault(find(A.width + jj), ([], []))[1].append(int(j))
    for i in range(A.width):
        if find(i) in comps:
            comps[find(i)][0].append(i)
    return [(sorted(a), sorted(b)) for a, b in comps.values()]


def _stitching_moves(small, large, X, tau: float):
    """What both stitching paths start from: A, the data (float64), the union SAE, the moves in the naive
    order (novel latents by insertion delta, then swap groups by size) and the union's codes of the data."""
    A, B = _dictionary(small), _dictionary(large)
    X = _as_tensor(X).numpy().astype(np.float64)
    U = _union(A, B)
    delta = insertion_deltas(A, B, X)
    novel = np.flatnonzero(delta < 0)
    groups = swap_groups(A, B, np.flatnonzero(delta >= 0), tau)
    moves = [("insert", [], [int(j)]) for j in novel[np.argsort(delta[novel])]]
    moves += [("swap", a, b) for a, b in sorted(groups, key=lambda g: len(g[1]))]
    Z = (X - U.b_dec) @ U.W_enc + U.b_enc
    return A, X, U, moves, Z * (Z > U.thresholds)


def stitching_path(small, large, X, tau: float = 0.5, greedy: bool = True, stop: bool = False):
    r"""A path of stitched SAEs from A (small) to B (large); returns ``(mse_path, moves)``.

    Moves: *insert* one B latent with $\Delta\mathrm{MSE}<0$ (novel), or *swap* a group (remove its A
    latents, add its B latents; groups from :func:`swap_groups` over the other B latents). Each A
    latent in no group stays. With ``greedy`` the move that lowers the MSE most is taken at each step;
    with ``stop`` (the research note's fix) the path ends when no remaining move lowers the MSE, so it
    decreases at every step by construction and the question is how close to B it gets; without
    ``stop`` the least harmful move is taken when none helps, until every move is made. Without
    ``greedy``: the naive order, novel latents by $\Delta$, then groups by size, every move.
    """
    A, X, U, moves, F = _stitching_moves(small, large, X, tau)
    active = np.zeros(U.width, bool)
    active[:A.width] = True

    def mse_of(mask):
        return float(((X - U.b_dec - F[:, mask] @ U.W_dec[mask]) ** 2).sum(1).mean())

    path, taken = [mse_of(active)], []
    remaining = list(moves)
    while remaining:
        if greedy:
            trial = []
            for kind, a, b in remaining:
                m = active.copy(); m[a] = False; m[[A.width + j for j in b]] = True
                trial.append(mse_of(m))
            pick = int(np.argmin(trial))
            if stop and trial[pick] >= path[-1]:
                break
        else:
            pick = 0
        kind, a, b = remaining.pop(pick)
        active[a] = False
        active[[A.width + j for j in b]] = True
        path.append(mse_of(active))
        taken.append((kind, a, b))
    return np.array(path), taken


def stitching_path_gram(small, large, X, tau: float = 0.5, greedy: bool = True, stop: bool = False):
    r"""The stitching path of :func:`stitching_path` (same moves, same choices, same MSEs up to
    rounding), computed from the moves' Gram matrix instead of one reconstruction per candidate move.

    The moves touch disjoint latents, so move $m$ changes every reconstruction by a fixed
    $\Delta_m(x)=\sum_{l\in m}s_l f_l(x)d_l$ ($s_l=+1$ for an added B latent, $-1$ for a removed A latent)
    whatever was taken before. With the residual $R$ of the current stitched SAE,
    $\mathrm{MSE}(\text{taken}\cup m)=\mathrm{MSE}-2\,\overline{\langle R,\Delta_m\rangle}+G_{mm}$, where
    $G_{mm'}=\overline{\langle\Delta_m,\Delta_{m'}\rangle}=\sum_{l\in m,l'\in m'}s_ls_{l'}\,\overline{f_lf_{l'}}\,
    \langle d_l,d_{l'}\rangle$ and taking $m$ lowers every $\overline{\langle R,\Delta_{m'}\rangle}$ by
    $G_{mm'}$. The cost is one latents-by-latents product, then $O(\text{moves}^2)$."""
    A, X, U, moves, F = _stitching_moves(small, large, X, tau)
    R0 = X - U.b_dec - F[:, :A.width] @ U.W_dec[:A.width]
    touched = sorted({l for _, a, b in moves for l in (*a, *(A.width + j for j in b))})
    col = {l: i for i, l in enumerate(touched)}
    S = np.zeros((len(touched), len(moves)))
    for m, (_, a, b) in enumerate(moves):
        S[[col[l] for l in a], m] = -1.0
        S[[col[A.width + j] for j in b], m] = 1.0
    Ft, Wt = F[:, touched], U.W_dec[touched].astype(np.float64)
    n = X.shape[0]
    K = (Ft.T @ Ft / n) * (Wt @ Wt.T)                         # latents x latents
    G = S.T @ K @ S                                           # moves x moves
    cross = S.T @ ((Ft * (R0 @ Wt.T)).sum(0) / n)              # mean <R, Delta_m> for the current R
    mse = float((R0 ** 2).sum(1).mean())
    path, taken, remaining = [mse], [], list(range(len(moves)))
    while remaining:
        idx = np.array(remaining)
        trial = mse - 2 * cross[idx] + G[idx, idx]
        pick = int(np.argmin(trial)) if greedy else 0
        if greedy and stop and trial[pick] >= path[-1]:
            break
        m = remaining.pop(pick)
        mse = float(trial[pick])
        cross -= G[m]
        path.append(mse)
        taken.append(moves[m])
    return np.array(path), taken
