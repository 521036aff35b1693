r"""Tiny causal language models trained from scratch, shared by the book's language-model chapters.

Everything here takes any Hugging Face causal LM (``GPT2LMHeadModel``, ``LlamaForCausalLM``, ...), so a
reader with hub access can pass a real checkpoint instead of the tiny models the chapters train.

* Building: :func:`word_tokenizer` (a word-level ``PreTrainedTokenizerFast``), :func:`gpt2_config`,
  :func:`llama_config`, :func:`tiny_causal_lm` (seeded through a private stream),
  :func:`non_embedding_params` (the :math:`N` of the :math:`2N` FLOPs-per-token estimate).
* Training: :func:`train_lm` (AdamW, checkpoints, a progress bar, a ``torch.Generator``), :func:`lm_loss`,
  and the plain :func:`train_loop` with :func:`minibatches`.
* Scoring: :func:`response_logprobs` (:math:`\log\pi(y\mid x)=\sum_t\log\pi(y_t\mid x, y_{<t})`, padded
  prompts, a response vocabulary), :func:`sequence_logprobs` (labels with -100), :func:`encode_pairs`,
  :func:`prefix_cache` and :func:`cached_response_logprobs` (a shared context's key/value cache),
  :func:`crop_cache` (a copy of a cache's first positions, for a shared prefix), :func:`cache_kwarg`,
  :func:`all_responses`, :func:`exact_response_logprobs` (every response of a small space), and
  :class:`LastTokenScorer` (a scalar head on the last real token: a reward model on an LM trunk).
* Inside the model: :func:`layer_adapter` (blocks, final norm, unembedding), :func:`capture_activations`,
  :func:`patch_activations`, :func:`run_from_layer`, :func:`decode_hidden`, :func:`hidden_jacobian`.
* For sparse autoencoders: :class:`ActivationStore`, :func:`spliced_loss`.
* Real checkpoints: :func:`load_causal_lm` (a hub id or a saved folder, with its tokenizer, on the GPU when
  present), refusing before any weights are read an architecture outside :data:`SUPPORTED_CAUSAL_LMS`, a
  checkpoint that does not load, or one too large for the device (:func:`parameter_bytes`).
"""

from .model import (GPT2_ACTIVATIONS, LastTokenScorer, gpt2_config, last_positions, llama_config, non_embedding_params,
                    position_ids_from_mask, tiny_causal_lm)
from .likelihood import (PrefixCache, all_responses, cache_kwarg, cached_response_logprobs, crop_cache,
                         encode_pairs, exact_response_logprobs, prefix_cache, response_logprobs, sequence_logprobs)
from .training import TrainResult, lm_loss, minibatches, train_lm, train_loop
from .tokenizer import SPECIAL_TOKENS, word_tokenizer
from .hooks import (LayerAdapter, capture_activations, decode_hidden, hidden_jacobian, layer_adapter,
                    patch_activations, run_from_layer)
from .activations import ActivationStore, spliced_loss
from .hub import (DTYPES, SUPPORTED_CAUSAL_LMS, LoadedLM, causal_lm_config, check_fits, free_memory_bytes, load_causal_lm,
                  load_tokenizer, parameter_bytes, resolve_dtype)

__all__ = [
    "ActivationStore", "LastTokenScorer", "LayerAdapter", "LoadedLM", "PrefixCache", "SPECIAL_TOKENS",
    "SUPPORTED_CAUSAL_LMS", "TrainResult", "causal_lm_config", "free_memory_bytes", "load_causal_lm", "load_tokenizer",
    "parameter_bytes", "DTYPES", "check_fits", "resolve_dtype",
    "all_responses", "cache_kwarg", "cached_response_logprobs", "capture_activations", "crop_cache",
    "GPT2_ACTIVATIONS", "decode_hidden", "encode_pairs", "exact_response_logprobs", "gpt2_config", "hidden_jacobian",
    "last_positions", "layer_adapter", "llama_config", "lm_loss", "minibatches", "non_embedding_params",
    "patch_activations", "position_ids_from_mask", "prefix_cache", "response_logprobs", "run_from_layer",
    "sequence_logprobs", "spliced_loss", "tiny_causal_lm", "train_lm", "train_loop", "word_tokenizer",
]
