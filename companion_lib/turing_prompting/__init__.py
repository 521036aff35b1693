r"""Prompting is Turing-complete (Qiu, Xu, Bao and Tong, ICLR 2025).

*Ask, and it shall be given: On the Turing completeness of prompting*,
https://openreview.net/forum?id=AS8SPTyBgw (arXiv 2411.01992). Official code (MIT):
https://github.com/q-rz/ICLR25-prompting-theory (``main.ipynb``, a Decimal implementation).

The paper's objects, in the order this module builds them:

* **2-PTM** (two-tape Post--Turing machine): binary tapes :math:`A, B`, a program
  :math:`P=(\iota_0,\dots,\iota_{m-1})` over the 13 instructions ``TL TR T0 T1 T!k T?k #``
  (:math:`T\in\{A,B\}`; ``T!k`` jumps by :math:`k` if the cell under the head of :math:`T` is 0,
  ``T?k`` if it is 1).  :func:`run_ptm` is the interpreter.
* **Prompt** :math:`\pi_P = \texttt{\^{}}\,\mathrm{enc}(\iota_0)\cdots\mathrm{enc}(\iota_{m-1})\,\texttt{\$}`
  with unary jump offsets, ``enc(T!k) = T! (+^k | -^{|k|}) @`` (:func:`format_prompt`), and the input
  tokenizer :func:`tokenize` that writes :math:`x` on tape :math:`A` as (marker, bit) pairs.
* **Chain of thought** (CoT): the machine's execution trace, one record per step (``TL``.. for
  moves/writes, ``/`` for a jump not taken, ``= offset @`` for a jump taken, ``: bits $`` at the halt);
  :func:`cot_tokens` emits it and :func:`readout` reads the answer back (Theorem 3.1).
* **The fixed Transformer** :math:`\Gamma` (:class:`FixedTransformer`): hardmax attention heads with
  causal masking, ReLU features and layer normalisation without centring, listed as named operations in
  :data:`NETWORK`.  The same operations run in float64 with scores rounded to ``bits`` binary places
  (:class:`FloatBackend`) or in exact ``decimal`` arithmetic (:class:`ExactBackend`).
* **Lemma 4.2**: :func:`compile_tm` turns a two-tape Turing machine into a 2-PTM program with 27
  instructions per state (a reconstruction of the paper's layout), :func:`run_tm` runs the machine.
* :func:`random_program` samples random 2-PTM programs for the "any prompt" check.

The package, one file per part: :mod:`.programs` (alphabet, programs, prompts, the interpreter and its
chain of thought, the demo and random programs), :mod:`.arithmetic` (angle codes, positional gaps, the two
backends), :mod:`.transformer` (the fixed Transformer and its check against the interpreter) and
:mod:`.compiler` (Turing machines and Lemma 4.2's compiler).

Parity and Dyck programs (:data:`PARITY_PROGRAM`, :data:`DYCK_PROGRAM`) are the official notebook's
demo programs, Copyright (c) 2024 Ruizhong Qiu, MIT License. The rest is this book's own code; the
Transformer computes the same features as the official notebook, rewritten as a declarative list.
"""

from .arithmetic import ExactBackend, FloatBackend, angle_code, position_gap
from .compiler import TwoTapeTM, compile_tm, run_tm, tm_increment, tm_not, tm_parity
from .programs import (AUXILIARY_TOKENS, DYCK_PROGRAM, INSTRUCTION_TOKENS, OUTPUT_TOKENS, PARITY_PROGRAM, TOKENS,
                       Instruction, PTMRun, cot_tokens, decide_dyck, decide_parity, format_prompt, input_tape,
                       parse_program, prompt_tokens, random_program, readout, run_ptm, tokenize)
from .transformer import (NETWORK, Feature, FixedTransformer, Head, Norm, first_mismatch, network_size,
                          precision_bound_bits)

__all__ = [
    "TOKENS", "INSTRUCTION_TOKENS", "Instruction", "parse_program", "format_prompt", "tokenize",
    "prompt_tokens", "PTMRun", "run_ptm", "cot_tokens", "readout", "input_tape",
    "PARITY_PROGRAM", "DYCK_PROGRAM", "decide_parity", "decide_dyck",
    "angle_code", "position_gap", "FloatBackend", "ExactBackend", "Head", "Norm", "Feature", "NETWORK",
    "network_size", "FixedTransformer", "first_mismatch",
    "TwoTapeTM", "run_tm", "compile_tm", "tm_not", "tm_increment", "tm_parity",
    "random_program", "precision_bound_bits",
]
