r"""Interpreting and editing the image tokens of a vision-language model (Jiang et al., ICLR 2025), on the
tiny LLaVA of :mod:`companion_lib.tinyvlm`.

* :mod:`.lens` -- the logit lens of image tokens, internal confidence, hallucination detection with a
  calibrated threshold, localisation maps;
* :mod:`.project_away` -- the ProjectAway edit as a residual hook, targeted removal, and
  hallucination reduction with self-selected (confidence below the threshold) or oracle objects;
* :mod:`.experiment` -- the reproduce page's experiment on one trained world;
* :mod:`.llava_coco` -- the same measurements on a real LLaVA (``llava-hf/llava-1.5-7b-hf``) and COCO
  val2014 in its released format: :func:`full_scale`, which checks everything before it reads any weights.
"""

from .experiment import Experiment, cached_experiment, eval_split, run_experiment
from .llava_coco import (COCO_LAYOUT, PAPER_MODEL, PAPER_PROMPT, CocoSplit, FullScaleRun, LensResult,
                         class_token_ids, fold_statistics, full_scale, llava_captions, llava_lens, llava_prompt,
                         llava_text_embedding, load_coco_split, model_image_tokens, patch_centres, pointing)
from .lens import (auroc, calibrate_threshold, detection_rates, image_hidden_states, internal_confidence,
                   lens_confidence, lens_probs, localisation_accuracy, localisation_maps, object_scores,
                   object_token, output_probability, record_residual)
from .project_away import (project_away, project_away_edit, reduction_run, remove_objects, select_low_confidence,
                           select_oracle, targeted_removal, text_embedding)

__all__ = [
    "Experiment", "cached_experiment", "eval_split", "run_experiment",
    "auroc", "calibrate_threshold", "detection_rates", "image_hidden_states", "internal_confidence",
    "lens_confidence", "lens_probs", "localisation_accuracy", "localisation_maps", "object_scores",
    "object_token", "output_probability", "record_residual", "project_away", "project_away_edit", "reduction_run", "remove_objects",
    "select_low_confidence", "select_oracle", "targeted_removal", "text_embedding",
    "COCO_LAYOUT", "PAPER_MODEL", "PAPER_PROMPT", "CocoSplit", "FullScaleRun", "LensResult", "class_token_ids",
    "fold_statistics", "full_scale", "llava_captions", "llava_lens", "llava_prompt", "llava_text_embedding",
    "load_coco_split", "model_image_tokens", "patch_centres", "pointing",
]
