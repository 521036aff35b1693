r"""On Linear Representations and Pretraining Data Frequency in Language Models (Merullo, Smith, Wiegreffe
and Elazar, ICLR 2025; arXiv 2504.12459), in miniature.

* :mod:`.world` -- a synthetic fact world whose per-fact frequencies are set by hand, and its corpus.
* :mod:`.lre` -- linear relational embeddings :math:`\hat{\mathbf o}=\beta W\mathbf s+\mathbf b` (Eq. 1),
  faithfulness and the low-rank pseudo-inverse causality edit (hard and soft).
* :mod:`.frequency` -- exact co-occurrence counts over the training batches (Batch Search), the
  causality threshold of Fig. 2, and the leave-one-relation-out frequency regression of Sec. 5.
* :mod:`.experiment` -- the chapter's runs: train with checkpoints, measure every relation at every one.
* :mod:`.fullscale` -- the same measurement on a real checkpoint (OLMo, Pythia, Llama, GPT-2) and the paper's
  relation files, with optional co-occurrence counts (the page's "At full scale").
"""

from .world import FactWorld, fact_prompts, make_world, token_stream
from .lre import (LRE, causality, edit_delta, edited_logits, faithfulness, fit_lre, lm_states, low_rank_pinv,
                  lre_logits, select_beta, select_rank, subject_ids)
from .frequency import (causality_threshold, thresholds_by_checkpoint, cooccurrence_counts, loro_predictions, mean_baseline_predictions,
                        regression_scores)
from .experiment import (FEATURES_LM, FEATURES_LRE, edit_pairs, evaluate_checkpoint, fact_lm, lre_experiment,
                         relation_table, train_fact_lm)
from .fullscale import (COUNTS_FORMAT, RELATION_FORMAT, FullScalePlan, Relation, check_full_scale, full_scale, full_scale_statistics, icl_prompt,
                        load_counts, load_relations, measure_relation, object_token, subject_jacobian)

__all__ = [
    "COUNTS_FORMAT", "RELATION_FORMAT", "FullScalePlan", "Relation", "check_full_scale", "full_scale", "full_scale_statistics", "icl_prompt",
    "load_counts", "load_relations", "measure_relation", "object_token", "subject_jacobian",
    "FEATURES_LM", "FEATURES_LRE", "FactWorld", "LRE", "causality", "causality_threshold", "thresholds_by_checkpoint", "cooccurrence_counts",
    "edit_delta", "edit_pairs", "edited_logits", "evaluate_checkpoint", "fact_lm", "faithfulness", "fact_prompts",
    "fit_lre", "lm_states", "loro_predictions", "low_rank_pinv", "lre_experiment", "lre_logits", "make_world",
    "mean_baseline_predictions", "regression_scores", "relation_table", "select_beta", "select_rank",
    "subject_ids", "token_stream", "train_fact_lm",
]
