r"""AttriBoT: a bag of tricks for fast leave-one-out context attribution (Liu, Kandpal and Raffel, ICLR 2025).

* :mod:`.prompt`: :class:`ContextPrompt` (sources, paragraph groups, response positions; ablation, pruning).
* :mod:`.task`: the category-copy QA task and the GPT-2 family (target, proxy-mid, proxy-small), built on
  :mod:`companion_lib.tinylm`.
* :mod:`.methods`: :class:`Scorer` (a model with a cost meter), exact :func:`loo` with or without a KV
  cache, :func:`hierarchical_loo`, :func:`pruned_loo`, the baselines :func:`context_cite`,
  :func:`attention_attribution`, :func:`gradient_norm_attribution` and :func:`similarity_attribution`,
  :func:`generate_response`, the relevance rule :func:`outlier_sources` and the faithfulness metrics.
* :mod:`.fullscale`: the full-scale path (a real target and proxy on SQuAD 2.0 or HotpotQA JSON):
  :func:`load_qa`, :func:`encode_example`, :func:`greedy_response`, :func:`full_scale` (every check before any
  weights are read), :func:`full_scale_values` and the plan's :func:`full_scale_tokens`.
* :mod:`.experiment`: the target's greedy responses (:func:`generate_responses`), every method on the same
  prompts with measured wall time and FLOPs (:func:`run_methods`, :func:`summarize`, :func:`per_prompt_ratio`), and the
  paired comparison of two methods' mAP (:func:`map_difference`, :func:`paired_interval`).
"""

from .prompt import ContextPrompt
from .task import (FAMILY, FamilyMember, answer_accuracy, load_member, make_example, make_prompts,
                   non_embedding_params, task_tokenizer, task_vocabulary, train_family, train_member,
                   training_batch)
from .methods import (FLOOR, TARGETS, Attribution, Scorer, attention_attribution, average_precision,
                      check_same_tokenizer, context_cite, faithfulness, generate_response, gradient_norm_attribution,
                      hierarchical_loo, lasso_surrogate, loo, outlier_sources, pareto_front, pruned_loo,
                      similarity_attribution, timed, topk_recall)
from .experiment import (generate_responses, map_difference, method_specs, paired_interval, per_prompt_ap,
                         per_prompt_ratio, per_seed_table, run_methods, summarize)
from .fullscale import (BEST, FULL_SCALE_METHODS, INSTRUCTION, QA_FORMATS, EncodedExample, FullScaleRun, QAExample,
                        encode_example, full_scale, full_scale_specs, full_scale_tokens, full_scale_values,
                        greedy_response, load_qa, select_examples, split_sentences)

__all__ = [
    "Attribution", "ContextPrompt", "FAMILY", "FLOOR", "TARGETS", "generate_responses", "gradient_norm_attribution",
    "outlier_sources", "per_prompt_ratio", "similarity_attribution", "FamilyMember", "Scorer", "answer_accuracy",
    "attention_attribution", "average_precision", "check_same_tokenizer", "context_cite", "faithfulness",
    "generate_response", "hierarchical_loo", "lasso_surrogate", "load_member", "loo", "make_example",
    "make_prompts", "map_difference", "method_specs", "non_embedding_params", "paired_interval",
    "pareto_front", "per_prompt_ap", "per_seed_table", "pruned_loo", "run_methods", "summarize",
    "task_tokenizer", "task_vocabulary", "timed", "topk_recall", "train_family", "train_member",
    "training_batch", "BEST", "FULL_SCALE_METHODS", "INSTRUCTION", "QA_FORMATS", "EncodedExample", "FullScaleRun",
    "QAExample", "encode_example", "full_scale", "full_scale_specs", "full_scale_tokens", "full_scale_values",
    "greedy_response", "load_qa", "select_examples", "split_sentences",
]
