r"""The synthetic ground truth: unit *atoms*, *entities* that combine a few atoms with a specific direction,
rare independent features, and samples that are sparse, noisy sums of entities and rare features."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SyntheticWorld", "make_world", "sample_activations"]


@dataclass
class SyntheticWorld:
    r"""A known compositional ground truth in $\mathbb R^d$.

    ``atoms`` (n_atoms x d): shared properties ("scientist", "German"). ``entities`` (n_entities x d):
    $e=\mathrm{normalize}(\sum_{a\in S_e}u_a+w\,v_e)$ with $|S_e|$ atoms and a specific direction
    $v_e$ of weight $w$ (``specific_weight``). ``entity_atoms`` (n_entities x atoms_per_entity): the
    index sets $S_e$. ``rare`` (n_rare x d): independent features, each active with ``p_rare``.
    """

    atoms: np.ndarray
    entities: np.ndarray
    entity_atoms: np.ndarray
    rare: np.ndarray
    rate: float = 1.2
    p_rare: float = 0.01
    noise: float = 0.01
    specific_weight: float = 0.5

    @property
    def d(self) -> int:
        return self.atoms.shape[1]


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def make_world(rng: np.random.Generator, d: int = 32, n_atoms: int = 20, n_entities: int = 64,
               atoms_per_entity: int = 3, specific_weight: float = 0.5, n_rare: int = 12,
               p_rare: float = 0.01, rate: float = 1.2, noise: float = 0.01) -> SyntheticWorld:
    r"""Draw random unit atoms, entities $\mathrm{normalize}(\sum_{a\in S_e}u_a+w\,v_e)$ and rare features."""
    for name, value in dict(d=d, n_atoms=n_atoms, n_entities=n_entities, atoms_per_entity=atoms_per_entity).items():
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if atoms_per_entity > n_atoms:
        raise ValueError(f"atoms_per_entity must be <= n_atoms ({n_atoms}), got {atoms_per_entity}")
    if n_rare < 0 or not 0 <= p_rare <= 1 or rate < 0 or noise < 0 or specific_weight < 0:
        raise ValueError("n_rare, rate, noise, specific_weight must be >= 0 and p_rare in [0, 1]")
    atoms = _unit(rng.standard_normal((n_atoms, d)))
    entity_atoms = np.stack([np.sort(rng.choice(n_atoms, atoms_per_entity, replace=False))
                             for _ in range(n_entities)])
    specific = _unit(rng.standard_normal((n_entities, d)))
    entities = _unit(atoms[entity_atoms].sum(axis=1) + specific_weight * specific)
    rare = _unit(rng.standard_normal((n_rare, d))) if n_rare else np.zeros((0, d))
    return SyntheticWorld(atoms, entities, entity_atoms, rare, rate, p_rare, noise, specific_weight)


def sample_activations(world: SyntheticWorld, n: int, rng: np.random.Generator) -> np.ndarray:
    r"""``n`` samples: Poisson(rate) entities and the rare features (prob. ``p_rare`` each), with
    magnitudes $U(0.5, 1.5)$, plus $N(0,\text{noise}^2)$ noise. Returns float32 (n x d)."""
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    n_ent, n_rare = len(world.entities), len(world.rare)
    counts = rng.poisson(world.rate, n)
    coef = np.zeros((n, n_ent))
    rows = np.repeat(np.arange(n), counts)
    coef[rows, rng.integers(0, n_ent, rows.size)] = rng.uniform(0.5, 1.5, rows.size)
    x = coef @ world.entities
    if n_rare:
        on = rng.random((n, n_rare)) < world.p_rare
        x += (on * rng.uniform(0.5, 1.5, (n, n_rare))) @ world.rare
    x += world.noise * rng.standard_normal(x.shape)
    return x.astype(np.float32)
