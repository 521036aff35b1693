"""Tiny causal language models trained from scratch, shared by the book's language-model chapters.

Everything here takes any Hugging Face causal LM (``GPT2LMHeadModel``, ``LlamaForCausalLM``, ...), so a
reader with hub access can pass a real checkpoint instead of the tiny models the chapters train.

* :func:`gpt2_config`, :func:`llama_config`, :func:`tiny_causal_lm` -- small configurations and models.
* :func:`response_logprobs` -- :math:`\\log\\pi(y\\mid x)=\\sum_t\\log\\pi(y_t\\mid x, y_{<t})` for a batch of
  (prompt, response) pairs, optionally restricted to a response vocabulary.
* :func:`all_responses`, :func:`exact_response_logprobs` -- every response of a small response space
  and its exact log-probability, so that :math:`\\pi(\\cdot\\mid x)` is known exactly.
* :func:`train_loop`, :func:`minibatches` -- a plain PyTorch training loop.
* :class:`LastTokenScorer` -- a scalar head on the last hidden state (a reward model on an LM trunk).
"""

from .model import LastTokenScorer, gpt2_config, llama_config, tiny_causal_lm
from .likelihood import all_responses, exact_response_logprobs, response_logprobs
from .training import minibatches, train_loop

__all__ = [
    "LastTokenScorer", "all_responses", "exact_response_logprobs", "gpt2_config", "llama_config",
    "minibatches", "response_logprobs", "tiny_causal_lm", "train_loop",
]
