r"""The partial information decomposition with the shared-exclusion redundancy $I^{sx}_\cap$.

A joint distribution is an array ``P[s_1, ..., s_n, t]`` (n = 2 or 3 sources, the target last),
optionally with leading batch dimensions (one distribution per neuron).
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import numpy as np
import torch

SOURCE_NAMES = {2: ("F", "C"), 3: ("F", "C", "L")}


def _check_n(n_sources: object) -> int:
    if isinstance(n_sources, bool) or not isinstance(n_sources, (int, np.integer)) or n_sources not in (2, 3):
        raise ValueError(f"n_sources must be 2 or 3, got {n_sources!r}")
    return int(n_sources)


def precedes(alpha, beta) -> bool:
    r"""Williams-Beer order: $\alpha\preceq\beta$ iff every $b\in\beta$ contains some $a\in\alpha$."""
    return all(any(a <= b for a in alpha) for b in beta)


@lru_cache(maxsize=None)
def antichains(n_sources: int) -> tuple:
    """The nodes of the redundancy lattice: antichains of non-empty source sets (4 for n=2, 18 for n=3).

    Each antichain is a tuple of frozensets of source indices, sorted bottom-up (by a linear extension
    of the lattice order), so the first is the all-singletons redundancy and the last the full set.
    """
    n = _check_n(n_sources)
    subsets = [frozenset(c) for k in range(1, n + 1) for c in itertools.combinations(range(n), k)]
    nodes = []
    for k in range(1, len(subsets) + 1):
        for coll in itertools.combinations(subsets, k):
            if all(not (a < b or b < a) for a, b in itertools.combinations(coll, 2)):
                nodes.append(tuple(sorted(coll, key=lambda s: (len(s), sorted(s)))))
    # linear extension: count of nodes below each node
    below = [sum(precedes(a, b) for a in nodes) for b in nodes]
    order = sorted(range(len(nodes)), key=lambda i: (below[i], [sorted(s) for s in nodes[i]]))
    return tuple(nodes[i] for i in order)


def _label(node, names) -> str:
    return "".join("{" + "".join(names[i] for i in sorted(a)) + "}" for a in node)


@lru_cache(maxsize=None)
def atom_labels(n_sources: int) -> tuple:
    """Names of the atoms, e.g. ``'{F}{C}'`` (redundancy), ``'{F}'`` (unique F), ``'{FC}'`` (synergy)."""
    n = _check_n(n_sources)
    return tuple(_label(node, SOURCE_NAMES[n]) for node in antichains(n))


@lru_cache(maxsize=None)
def mobius_matrix(n_sources: int) -> np.ndarray:
    r"""$Z^{-1}$, the inverse of the zeta matrix $Z_{\beta\alpha}=[\alpha\preceq\beta]$: atoms $=Z^{-1}I_\cap$."""
    nodes = antichains(n_sources)
    zeta = np.array([[float(precedes(a, b)) for a in nodes] for b in nodes])
    return np.rint(np.linalg.inv(zeta))


def _validate_joint(P: torch.Tensor, n_sources: int) -> None:
    if P.ndim < n_sources + 1:
        raise ValueError(f"P must have at least n_sources + 1 = {n_sources + 1} dimensions, got shape {tuple(P.shape)}")
    if not torch.isfinite(P).all():
        raise ValueError("P must be finite")
    if (P < 0).any():
        raise ValueError("P must have non-negative entries")
    sums = P.sum(dim=tuple(range(P.ndim - n_sources - 1, P.ndim)))
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-6):
        raise ValueError(f"P must sum to one over its last {n_sources + 1} axes, got sums {sums.flatten()[:3].tolist()}")


@lru_cache(maxsize=None)
def _inclusion_exclusion(n_sources: int) -> tuple:
    r"""The non-empty source sets $A$ and the integer matrix $C$ with $P(\mathfrak a)=\sum_A C_{\alpha A}P(S_A=s_A)$.

    Row $\alpha$ holds the inclusion-exclusion signs $(-1)^{|\beta|-1}$ of the sub-collections
    $\beta\subseteq\alpha$, summed by the union $A=\cup\beta$ they select.
    """
    n = _check_n(n_sources)
    subsets = [frozenset(c) for k in range(1, n + 1) for c in itertools.combinations(range(n), k)]
    C = np.zeros((len(antichains(n)), len(subsets)))
    for i, node in enumerate(antichains(n)):
        for k in range(1, len(node) + 1):
            for sub in itertools.combinations(node, k):
                C[i, subsets.index(frozenset().union(*sub))] += (-1.0) ** (k - 1)
    return tuple(subsets), C


@lru_cache(maxsize=None)
def _support_groups(n_sources: int) -> tuple:
    r"""The lattice nodes grouped by their support $S=\cup_{a\in\alpha}a$: ``(S, node indices, subsets of S,
    the signs of those nodes on those subsets)``. A node's union event only involves the sources in
    its support, so its terms can be summed on the smaller grid of $(s_S, t)$."""
    n = _check_n(n_sources)
    subsets, C = _inclusion_exclusion(n)
    groups = {}
    for i, node in enumerate(antichains(n)):
        groups.setdefault(tuple(sorted(frozenset().union(*node))), []).append(i)
    out = []
    for S, idx in groups.items():
        cols = [j for j, A in enumerate(subsets) if A <= frozenset(S)]
        out.append((S, tuple(idx), tuple(subsets[j] for j in cols), C[np.ix_(idx, cols)]))
    return tuple(out)


@lru_cache(maxsize=None)
def _as_tensors(n_sources: int, dtype: torch.dtype, device: torch.device) -> tuple:
    """:func:`_support_groups`' sign matrices (one per group) and :func:`mobius_matrix`, as tensors of
    ``dtype`` on ``device``, built once rather than at every call."""
    signs = tuple(torch.as_tensor(C, dtype=dtype, device=device) for *_, C in _support_groups(n_sources))
    return signs, torch.as_tensor(mobius_matrix(n_sources), dtype=dtype, device=device)


def isx_redundancies(P, n_sources: int = 3, validate: bool = True, source_grad: bool = True) -> torch.Tensor:
    r"""$I^{sx}_\cap(T:\alpha)$ for every lattice node $\alpha$ (last axis), in bits.

    Union probabilities come from inclusion-exclusion over marginals (one matrix product with
    :func:`_inclusion_exclusion`'s signs per group of nodes with the same support, on the grid of the
    sources in that support only); cells with $p(s,t)=0$ contribute 0. ``source_grad=False`` treats
    the source marginal $p(s)$ as a constant in autograd, which is exact when it does not depend on the
    parameters (as in :func:`~.network.soft_joint`) and saves time.
    """
    n = _check_n(n_sources)
    P = torch.as_tensor(P)
    if not P.is_floating_point():
        P = P.double()
    if validate:
        _validate_joint(P, n)
    lead = P.ndim - n - 1
    src_axes = list(range(lead, lead + n))
    t_axis = P.ndim - 1
    # I_sx(alpha) = sum_{s,t} p(s,t) log p(a(s), t) - sum_s p(s) log p(a(s)) - sum_t p(t) log p(t):
    # union probabilities are >= the cell's own probability, so they are positive wherever p > 0
    # (the floor only guards cells of zero probability, whose weight is zero)
    tiny = torch.finfo(P.dtype).tiny
    p_t = P.sum(dim=src_axes)
    h_t = -(p_t * torch.log2(p_t.clamp_min(tiny))).sum(dim=-1)
    out = [None] * len(antichains(n))
    signs, _ = _as_tensors(n, P.dtype, P.device)
    for (S, idx, subsets, C), Ct in zip(_support_groups(n), signs):
        # the joint of the support's sources and the target, P(S_S = s_S, T = t)
        drop = [lead + i for i in range(n) if i not in S]
        PS = P.sum(dim=drop) if drop else P
        k = len(S)
        # the marginal P(S_A = s_A, T = t) of every source set A within S, broadcast to the grid of S
        m_st = torch.stack([(PS.sum(dim=[lead + S.index(i) for i in S if i not in A], keepdim=True)
                             if len(A) < k else PS).expand_as(PS) for A in subsets])
        pu_t = (Ct @ m_st.reshape(len(subsets), -1)).reshape(len(C), *m_st.shape[1:])
        grid = list(range(lead + 1, lead + k + 2))
        term_st = (PS * torch.log2(pu_t.clamp_min(tiny))).sum(dim=grid)
        p_s, m_s = PS.sum(dim=-1), m_st.sum(dim=-1)
        if not source_grad:
            p_s, m_s = p_s.detach(), m_s.detach()
        pu = (Ct @ m_s.reshape(len(subsets), -1)).reshape(len(C), *m_s.shape[1:])
        term_s = (p_s * torch.log2(pu.clamp_min(tiny))).sum(dim=grid[:-1])
        for row, i in enumerate(idx):
            out[i] = term_st[row] - term_s[row] + h_t
    return torch.stack(out, dim=-1)


def pid_from_joint(P, n_sources: int | None = None, validate: bool = True,
                   source_grad: bool = True) -> dict | torch.Tensor:
    r"""The $I^{sx}$ PID atoms of the target (last axis) with respect to 2 or 3 sources.

    For a single distribution (numpy array or tensor with exactly ``n_sources + 1`` axes) returns a
    dict ``{label: bits}`` including ``'H_res'`` $=H(T)-I(T;S)$. With leading batch axes, returns a
    tensor ``[..., n_atoms + 1]`` (atoms in :func:`atom_labels` order, then H_res), differentiable
    (``source_grad`` as in :func:`isx_redundancies`).
    """
    as_dict = n_sources is None
    P_t = torch.as_tensor(np.asarray(P, dtype=float) if not isinstance(P, torch.Tensor) else P)
    if not P_t.is_floating_point():
        P_t = P_t.double()
    if n_sources is None:
        n_sources = P_t.ndim - 1
    n = _check_n(n_sources)
    red = isx_redundancies(P_t, n, validate=validate, source_grad=source_grad)
    _, M = _as_tensors(n, red.dtype, red.device)
    atoms = red @ M.T
    lead = P_t.ndim - n - 1
    p_t = P_t.sum(dim=tuple(range(lead, lead + n)))
    h_t = -(torch.where(p_t > 0, p_t * torch.log2(torch.where(p_t > 0, p_t, torch.ones_like(p_t))),
                        torch.zeros_like(p_t))).sum(-1)
    h_res = h_t - red[..., -1]
    result = torch.cat([atoms, h_res.unsqueeze(-1)], dim=-1)
    if as_dict and lead == 0:
        labels = atom_labels(n) + ("H_res",)
        return {k: float(v) for k, v in zip(labels, result.tolist())}
    return result
