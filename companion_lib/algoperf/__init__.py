"""AlgoPerf in miniature (Kasimbeg et al., ICLR 2025): scoring, a tiny harness, submissions.

* :mod:`.scoring` -- time-to-target, performance ratios and profiles, the benchmark score with the
  held-out and 4x rules, speed-ups; the real v0.5 competition data ship in ``data/``.
* :mod:`.harness` -- workloads, target setting, budgets, trials and studies.
* :mod:`.submissions` -- NAdamW, Schedule-Free AdamW, Shampoo (:class:`SimpleShampoo`), SGD-Nesterov.
"""

from .harness import *  # noqa: F401,F403
from .harness import __all__ as _harness_all
from .scoring import *  # noqa: F401,F403
from .scoring import __all__ as _scoring_all
from .submissions import *  # noqa: F401,F403
from .submissions import __all__ as _submissions_all

__all__ = [*_scoring_all, *_harness_all, *_submissions_all]
