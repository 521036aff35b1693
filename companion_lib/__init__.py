"""Companion library of the executable book *ICLR 2025, Reproduced*.

One module per chapter (e.g. :mod:`companion_lib.self_distillation`) and the machinery every
chapter shares in :mod:`companion_lib.common`. The notebooks explain; this package computes.
"""

__version__ = "0.1.0"
