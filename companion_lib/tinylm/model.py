"""Small Hugging Face causal-LM configurations and a scalar head for reward models."""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PretrainedConfig

from ..common.validation import check_positive_int

__all__ = ["GPT2_ACTIVATIONS", "gpt2_config", "llama_config", "tiny_causal_lm", "LastTokenScorer", "last_positions",
           "position_ids_from_mask", "non_embedding_params"]


_positive_int = check_positive_int  # shared with the other chapters (companion_lib.common.validation)


#: GPT-2's activation (the tanh approximation of GELU) in two implementations of the same formula:
#: ``gelu_new`` (GPT-2's, six elementwise operations) and ``gelu_pytorch_tanh`` (one fused kernel; on the
#: book's CPU a tiny GPT-2 trains about 13% faster with it; the outputs differ only in rounding)
GPT2_ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh")


def gpt2_config(vocab_size: int, n_positions: int = 32, n_embd: int = 32, n_layer: int = 2,
                n_head: int = 2, dropout: float = 0.0, activation: str = "gelu_new") -> GPT2Config:
    """A small :class:`~transformers.GPT2Config` (pre-LN, learned positions), no dropout by default.

    ``n_embd`` must be divisible by ``n_head``. Special-token ids are unset, so any vocabulary size works.
    ``activation``: one of :data:`GPT2_ACTIVATIONS` (the same function; the fused one is faster).
    """
    if activation not in GPT2_ACTIVATIONS:
        raise ValueError(f"activation must be one of {GPT2_ACTIVATIONS}, got {activation!r}")
    for name, value in (("vocab_size", vocab_size), ("n_positions", n_positions), ("n_embd", n_embd),
                        ("n_layer", n_layer), ("n_head", n_head)):
        _positive_int(value, name)
    if n_embd % n_head:
        raise ValueError(f"n_embd ({n_embd}) must be divisible by n_head ({n_head})")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    return GPT2Config(vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd, n_layer=n_layer,
                      n_head=n_head, resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                      bos_token_id=None, eos_token_id=None, activation_function=activation)


def llama_config(vocab_size: int, hidden_size: int = 32, n_layer: int = 2, n_head: int = 2,
                 intermediate_size: int | None = None, max_position_embeddings: int = 32) -> LlamaConfig:
    """A small :class:`~transformers.LlamaConfig` (RMSNorm, rotary positions, SwiGLU MLP)."""
    for name, value in (("vocab_size", vocab_size), ("hidden_size", hidden_size), ("n_layer", n_layer),
                        ("n_head", n_head), ("max_position_embeddings", max_position_embeddings)):
        _positive_int(value, name)
    if hidden_size % n_head:
        raise ValueError(f"hidden_size ({hidden_size}) must be divisible by n_head ({n_head})")
    inter = 2 * hidden_size if intermediate_size is None else _positive_int(intermediate_size, "intermediate_size")
    return LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=inter,
                       num_hidden_layers=n_layer, num_attention_heads=n_head, num_key_value_heads=n_head,
                       max_position_embeddings=max_position_embeddings, bos_token_id=None,
                       eos_token_id=None, pad_token_id=None)


_MODEL_FOR_CONFIG = {GPT2Config: GPT2LMHeadModel, LlamaConfig: LlamaForCausalLM}


def tiny_causal_lm(config: PretrainedConfig, seed: int | None = None,
                   generator: torch.Generator | None = None) -> nn.Module:
    """A freshly initialised causal LM for ``config`` (GPT-2 or Llama), in eval mode.

    The weights are drawn from a private random stream: ``seed`` (an int), or a seed drawn from
    ``generator``. The caller's global torch RNG is left exactly as it was, so several models can be
    built and trained reproducibly in one notebook. With neither, the global RNG is used (and advanced).
    """
    cls = _MODEL_FOR_CONFIG.get(type(config))
    if cls is None:
        raise TypeError(f"config must be a GPT2Config or LlamaConfig, got {type(config).__name__}")
    if seed is not None and generator is not None:
        raise ValueError("give seed or generator, not both")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    if seed is None:
        model = cls(config)
    else:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = cls(config)
    model.eval()  # no dropout in the tiny configs; eval() also makes the forward deterministic
    return model


def non_embedding_params(model: nn.Module) -> int:
    r"""Parameters outside every embedding table (token and learned position embeddings).

    This is the :math:`N` of the usual forward-cost estimate of :math:`2N` FLOPs per token; a tied output
    head counts as the token embedding it shares.
    """
    emb = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    return int(sum(p.numel() for p in model.parameters() if id(p) not in emb))


def last_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the last real (mask 1) token of each row, for left or right padding alike."""
    if attention_mask.ndim != 2:
        raise ValueError(f"attention_mask must have shape (batch, length), got {tuple(attention_mask.shape)}")
    if not bool((attention_mask.sum(-1) > 0).all()):
        raise ValueError("attention_mask has a row without any real token")
    idx = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return (attention_mask.long() * (idx + 1)).argmax(-1)


def position_ids_from_mask(attention_mask: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """Position ids that count real tokens only (0 at the first real token), so padding never shifts them."""
    pos = attention_mask.long().cumsum(-1) - 1 + offset
    return pos.clamp(min=0)


class LastTokenScorer(nn.Module):
    """A scalar score :math:`r(x, y) = w^\\top h_L + b` from the last hidden state of a causal LM.

    The usual reward-model architecture: a transformer trunk (here a copy of ``lm``, so the trunk can be
    initialised from an SFT model without touching it) and a linear head on the final position.
    ``forward(input_ids, attention_mask=None)`` returns a tensor of shape ``(batch,)``; with a mask
    (left or right padding) it reads the last real token of each row and counts positions from the
    first real one, so a padded row scores exactly as the same row unpadded.
    """

    def __init__(self, lm: nn.Module, copy_trunk: bool = True) -> None:
        super().__init__()
        if not hasattr(lm, "config") or not callable(lm):
            raise TypeError("lm must be a Hugging Face causal LM (a module with a .config)")
        self.lm = copy.deepcopy(lm) if copy_trunk else lm
        hidden = getattr(self.lm.config, "hidden_size", None) or self.lm.config.n_embd
        self.head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must have shape (batch, length), got {tuple(input_ids.shape)}")
        if attention_mask is None:
            out = self.lm(input_ids=input_ids, output_hidden_states=True)
            return self.head(out.hidden_states[-1][:, -1]).squeeze(-1)
        if attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask must have shape {tuple(input_ids.shape)}, "
                             f"got {tuple(attention_mask.shape)}")
        out = self.lm(input_ids=input_ids, attention_mask=attention_mask,
                      position_ids=position_ids_from_mask(attention_mask), output_hidden_states=True)
        last = last_positions(attention_mask)
        h = out.hidden_states[-1][torch.arange(input_ids.shape[0], device=input_ids.device), last]
        return self.head(h).squeeze(-1)
