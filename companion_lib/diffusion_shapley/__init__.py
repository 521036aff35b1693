"""Crediting data contributors of diffusion models with Shapley values and sparsified fine-tuning.

Lin, Lu, Kim and Lee, "An Efficient Framework for Crediting Data Contributors of Diffusion Models",
ICLR 2025 (arXiv 2407.03153). Official code: github.com/suinleelab/Group-Attribution-for-Diffusion-Models.

The paper's objects, in its symbols, and where they live here:

* Contributors :math:`\\mathcal D=\\bigcup_{i=1}^n\\mathcal D_i`; a coalition :math:`S\\subseteq[n]` is a boolean
  mask (or its bit code :math:`\\sum_{i\\in S}2^i`): :func:`make_contributors`, :func:`all_subsets`.
* A diffusion model :math:`\\theta` (DDPM, epsilon-prediction, ancestral sampling): many small MLP denoisers
  trained in parallel as one batched network: :func:`init_denoisers`, :func:`train_denoisers`,
  :func:`sample_denoisers`, :func:`linear_beta_schedule`.
* A global property :math:`\\mathcal F(\\theta)` of the generated distribution (Definition 1):
  :func:`inception_score_analogue`, :func:`diversity_entropy`, :func:`precision`, :func:`global_properties`.
* The game :math:`v(S)=\\mathcal F(\\theta^*_S)` and its cheap stand-ins (Eq. 6): retraining, fine-tuning and
  sparsified fine-tuning (prune with :func:`magnitude_prune`, recover on all data, fine-tune per subset):
  :func:`subset_game`, :func:`sparsify`.
* Attributions: exact Shapley (its definition), KernelSHAP as constrained weighted least squares with the
  closed form of Covert and Lee (2021, eq. 7; Eq. 5 of the paper), leave-one-out and Banzhaf:
  :func:`exact_shapley`, :func:`kernel_shap`, :func:`sample_shapley_subsets`, :func:`leave_one_out`,
  :func:`banzhaf`.
* The linear datamodeling score (Definition 2): :func:`lds`; the evaluations of Fig. 2 (LDS at a compute
  budget, :func:`lds_at_budget`, with costs from :func:`coalition_cost`) and Fig. 3 (remove the top or bottom
  contributors and retrain, :func:`counterfactual_change`); :func:`run_games` computes one seed's games.

The package, one file per part: :mod:`.attribution` (coalitions and attributions, LDS), :mod:`.ddpm` (the
batched DDPM and its pruning), :mod:`.game` (the contributors, the global properties and the game) and
:mod:`.experiment` (the chapter's runs and evaluations).
"""

from .attribution import (all_subsets, banzhaf, exact_shapley, kernel_shap, lds, leave_one_out, sample_shapley_subsets,
                          shapley_kernel_weights, subset_codes)
from .ddpm import (TIME_FEATURES, Schedule, coalition_cost, init_denoisers, linear_beta_schedule, magnitude_prune,
                   n_params, sample_denoisers, train_denoisers)
from .experiment import counterfactual_change, gradient_attribution, lds_at_budget, run_games
from .game import (MODE_RADIUS, MODE_SIGMA, N_MODES, PROPERTIES, diversity_entropy, global_properties,
                   inception_score_analogue, make_contributors, mode_centers, precision, sparsify, subset_game)

__all__ = [
    "MODE_RADIUS", "MODE_SIGMA", "N_MODES", "Schedule", "all_subsets", "banzhaf", "diversity_entropy",
    "exact_shapley", "global_properties", "inception_score_analogue", "init_denoisers", "kernel_shap",
    "lds", "leave_one_out", "linear_beta_schedule", "magnitude_prune", "make_contributors", "mode_centers",
    "n_params", "precision", "sample_denoisers", "sample_shapley_subsets", "shapley_kernel_weights",
    "sparsify", "subset_codes", "subset_game", "train_denoisers", "run_games", "lds_at_budget",
    "coalition_cost",
    "counterfactual_change", "gradient_attribution", "PROPERTIES",
]
