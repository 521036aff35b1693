"""What every chapter shares: seeding, thread limits, the plotting style, claims tables, glued prose
numbers, input validation, a disk cache and a timer.

A notebook's first lines after the setup cell are typically::

    from companion_lib.common import limit_threads, seed_everything, use_book_style
    limit_threads()          # one BLAS/torch thread: small solves run 10-20x faster on 2 cores
    use_book_style()
"""

from .cache import cache_dir, disk_cache, library_fingerprint
from .fullscale import COLAB_GPUS, FullScaleEstimate, full_scale_estimate
from .device import describe_device, device, module_device, resolve_device, to_device
from .claims import CLAIMS_DATA_CLASS, OUTCOMES, VERDICTS, Claim, ClaimsFailed, ClaimTable, forest_plot
from .glue import glue_all, glue
from .paths import build_dir, claims_dir, project_root
from .seeding import seed_everything
from .style import BOOK_COLORS, use_book_style
from .threads import default_threads, limit_threads
from .timing import Timing, timer

__all__ = [
    "BOOK_COLORS", "CLAIMS_DATA_CLASS", "COLAB_GPUS", "FullScaleEstimate", "full_scale_estimate", "OUTCOMES", "VERDICTS", "Claim", "ClaimTable", "ClaimsFailed", "Timing",
    "forest_plot",
    "build_dir", "cache_dir", "claims_dir", "describe_device", "device", "module_device", "resolve_device",
    "to_device", "default_threads", "disk_cache", "glue_all", "glue",
    "library_fingerprint", "limit_threads", "project_root", "seed_everything", "timer", "use_book_style",
]
