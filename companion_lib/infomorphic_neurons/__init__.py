r"""Infomorphic neurons (Schneider, Neuhaus, Ehrlich et al., ICLR 2025): local learning goals built
from a partial information decomposition (PID) of each neuron's output with respect to its
feedforward (F), context (C) and lateral (L) inputs.

- :mod:`.pid`: the redundancy lattice, the shared-exclusion redundancy $I^{sx}_\cap$, and
  :func:`pid_from_joint` (differentiable, in torch);
- :mod:`.network`: soft histograms, infomorphic layers, local training and the baselines (the
  random projection and the binary-unit network trained by backprop with a surrogate gradient).
"""

from .pid import (SOURCE_NAMES, antichains, atom_labels, isx_redundancies, mobius_matrix,
                  pid_from_joint, precedes)
from .network import (GOALS, SENSITIVE_PERTURBATIONS, InfoNet, SurrogateBernoulli, TrainConfig, backprop_accuracy,
                      goal_vector, load_digits_split, paired_interval, perturb_goal, run_experiment, run_models,
                      soft_joint)

__all__ = ["GOALS", "InfoNet", "SENSITIVE_PERTURBATIONS", "SOURCE_NAMES", "TrainConfig", "antichains", "atom_labels",
           "backprop_accuracy", "goal_vector", "isx_redundancies", "load_digits_split", "mobius_matrix",
           "paired_interval", "perturb_goal", "pid_from_joint", "precedes", "run_experiment", "run_models", "soft_joint",
           "SurrogateBernoulli"]
