r"""What an SAE learned: normalised MSE, L0, alive latents, cosine matches with the ground truth and latent
labels; and the meta-SAE analysis (meta-activations of decoder rows, the share of an entity's atoms recovered)."""

from __future__ import annotations

import numpy as np
import torch

from .world import SyntheticWorld, _unit
from .model import JumpReLUDictionary, SparseAutoencoder, _as_tensor

__all__ = [
    "nmse", "mean_l0", "alive_latents", "max_cosine", "recovered_fraction", "classify_latents", "meta_decomposition",
    "atom_hit_fraction",
]


def _reconstruct(model, X: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        if isinstance(model, JumpReLUDictionary):
            return torch.as_tensor(model.reconstruct(X.numpy()))
        return model(X, batch=(model.kind == "batchtopk" and not torch.isfinite(model.threshold)))


def nmse(model, X) -> float:
    r"""Normalised MSE $\sum\|x-\hat x\|^2/\sum\|x-\bar x\|^2$ with the inference activation."""
    X = _as_tensor(X, "X")
    err = (X - _reconstruct(model, X)).pow(2).sum()
    return float(err / (X - X.mean(0)).pow(2).sum())


def _codes(model, X: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        if isinstance(model, JumpReLUDictionary):
            return model.encode(X.numpy())
        return model.encode(X, batch=(model.kind == "batchtopk" and not torch.isfinite(model.threshold))).numpy()


def mean_l0(model, X) -> float:
    """Average number of active latents per sample (inference activation)."""
    return float((_codes(model, _as_tensor(X)) > 0).sum(1).mean())


def alive_latents(model, X) -> np.ndarray:
    """Boolean mask of latents that fire on at least one row of ``X`` (inference activation)."""
    return (_codes(model, _as_tensor(X)) > 0).any(0)


def _rows(model_or_rows) -> np.ndarray:
    if isinstance(model_or_rows, SparseAutoencoder):
        return model_or_rows.W_dec.detach().numpy()
    if isinstance(model_or_rows, JumpReLUDictionary):
        return model_or_rows.W_dec
    return np.asarray(model_or_rows, dtype=float)


def max_cosine(rows, others) -> np.ndarray:
    r"""$c_j=\max_i\cos(r_j, o_i)$ for each row $r_j$ of ``rows`` against the rows of ``others``."""
    a, b = _unit(_rows(rows)), _unit(_rows(others))
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"rows have dimension {a.shape[1]} but others {b.shape[1]}")
    return (a @ b.T).max(1)


def recovered_fraction(true_dirs, learned_rows, threshold: float = 0.9) -> float:
    """Share of ground-truth directions matched by some learned row with cosine > ``threshold``."""
    if len(true_dirs) == 0:
        return float("nan")
    return float((max_cosine(true_dirs, learned_rows) > threshold).mean())


def classify_latents(rows, world: SyntheticWorld, threshold: float = 0.9) -> np.ndarray:
    """Label each decoder row ``"atom"``, ``"entity"``, ``"rare"`` (cos > threshold to one) or ``"other"``."""
    labels = np.full(len(_rows(rows)), "other", dtype=object)
    best = np.full(len(labels), threshold)
    for name, dirs in (("atom", world.atoms), ("entity", world.entities), ("rare", world.rare)):
        if len(dirs):
            c = max_cosine(rows, dirs)
            labels[c > best], best = name, np.maximum(best, c)
    return labels


# ----------------------------------------------------------------------------- meta-SAE analysis
def meta_decomposition(meta_sae: SparseAutoencoder, rows) -> np.ndarray:
    r"""Meta-activations $g(d_j)$ (rows x meta width) of decoder rows under a meta-SAE (inference form)."""
    with torch.no_grad():
        return meta_sae.encode(_as_tensor(rows, "rows"), batch=False).numpy()


def atom_hit_fraction(meta_sae: SparseAutoencoder, rows, true_atom_sets, atoms, threshold: float = 0.8) -> np.ndarray:
    r"""For each row $j$ with true atom set $S_j$: the share of $S_j$ matched (cos > ``threshold``) by
    one of the meta-latents active on $d_j$."""
    g = meta_decomposition(meta_sae, rows)
    cos = _unit(np.asarray(atoms)) @ _unit(meta_sae.W_dec.detach().numpy()).T   # atoms x meta
    out = []
    for gj, S in zip(g, true_atom_sets):
        act = np.flatnonzero(gj > 0)
        out.append(float(np.mean([(cos[a, act] > threshold).any() if act.size else False for a in S])))
    return np.array(out)
