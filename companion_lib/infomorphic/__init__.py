r"""Infomorphic neurons (Schneider, Neuhaus, Ehrlich et al., ICLR 2025): local learning goals built
from a partial information decomposition (PID) of each neuron's output with respect to its
feedforward (F), context (C) and lateral (L) inputs.

- :mod:`.pid`: the redundancy lattice, the shared-exclusion redundancy $I^{sx}_\cap$, and
  :func:`pid_from_joint` (differentiable, in torch);
- :mod:`.network`: soft histograms, infomorphic layers, local training and the baselines.
"""

from .pid import (SOURCE_NAMES, antichains, atom_labels, isx_redundancies, mobius_matrix,
                  pid_from_joint, precedes)
from .network import (GOALS, InfoNet, TrainConfig, backprop_accuracy, goal_vector, load_digits_split,
                      run_experiment, soft_joint)

__all__ = ["GOALS", "InfoNet", "SOURCE_NAMES", "TrainConfig", "antichains", "atom_labels",
           "backprop_accuracy", "goal_vector", "isx_redundancies", "load_digits_split", "mobius_matrix",
           "pid_from_joint", "precedes", "run_experiment", "soft_joint"]
