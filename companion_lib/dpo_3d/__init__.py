"""The 3D-properties of DPO (Yan et al., "3D-Properties: Identifying Challenges in DPO and Charting a Path
Forward", ICLR 2025; arXiv 2406.07327).

* :mod:`.losses` -- the DPO loss with separate temperatures :math:`\\beta^+,\\beta^-` (Flex-DPO) and an
  optional NLL-on-chosen term, its probability-space gradients (Section 3.1, Corollaries 1-2) and the
  Bradley-Terry reward-model loss (Section 3.4).
* :mod:`.toy` -- the paper's toy model (Section 3.2, Figs. 1-3): an MLP policy over prompts and ten responses.
* :mod:`.lm` -- a tiny causal transformer on an enumerable response space: SFT reference, on-/off-policy
  pairs (Table 1), DPO variants (Fig. 4), reward model (Fig. 5), exact KL-regularised RL (Table 2).
* :mod:`.fullscale` -- the same measurement at full scale: DPO and Flex-DPO on a real checkpoint (a supported
  Hugging Face class) and real preference pairs (JSON lines), with every input checked before the weights load.
"""

from .losses import DPOOutput, dpo_loss, prob_space_gradients, rm_loss
from .toy import (TOY_SCENARIOS, ToyPolicy, fit_toy_reference, reference_target, run_toy_dpo, toy_pairs,
                  toy_prompts)

_LM_NAMES = {"PreferenceWorld", "exact_kl_policy_optimization", "exact_logprobs", "fit_reference", "lm_experiment",
             "make_policy", "make_world", "peaked_distribution", "policy_metrics", "preference_pairs",
             "train_dpo_lm", "train_reward_model"}
_FULL_SCALE_NAMES = {"PAIR_FIELDS", "PreferencePair", "full_scale", "load_preference_pairs",
                     "step_activation_bytes", "training_memory_bytes"}


def __getattr__(name: str):
    # The tiny-LM and full-scale parts need `transformers`, which takes seconds to import: load them on first use.
    if name in _LM_NAMES:
        from . import lm
        return getattr(lm, name)
    if name in _FULL_SCALE_NAMES:
        from . import fullscale
        return getattr(fullscale, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "DPOOutput", "PAIR_FIELDS", "PreferencePair", "PreferenceWorld", "TOY_SCENARIOS", "ToyPolicy", "dpo_loss",
    "exact_kl_policy_optimization", "exact_logprobs", "fit_reference", "fit_toy_reference", "full_scale",
    "lm_experiment", "load_preference_pairs", "make_policy", "make_world", "peaked_distribution", "policy_metrics",
    "preference_pairs", "prob_space_gradients", "reference_target", "rm_loss", "run_toy_dpo",
    "step_activation_bytes", "toy_pairs", "toy_prompts", "train_dpo_lm", "train_reward_model",
    "training_memory_bytes",
]
