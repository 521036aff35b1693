r"""Linear relational embeddings (Hernandez et al., 2024), as used by Merullo et al. (2025, Sec. 3.1).

For a relation :math:`r`, let :math:`\mathbf s` be the layer-:math:`\ell` state at the subject's last token
and :math:`\mathbf o=F(\mathbf s)` the last block's output at the last prompt token (before the final
norm). The first-order expansion of :math:`F` around fitting subjects :math:`\mathbf s_i` gives (Eq. 1)

.. math::

    F(\mathbf s)\approx \beta W\mathbf s+\mathbf b,\qquad
    W=\tfrac1n\sum_i \partial F/\partial\mathbf s\,\big|_{\mathbf s_i},\qquad
    \mathbf b=\tfrac1n\sum_i\big(F(\mathbf s_i)-\partial F/\partial\mathbf s\,\big|_{\mathbf s_i}\mathbf s_i\big),

decoded as :math:`\mathrm{softmax}(W_U\,\mathrm{LN}_f(\hat{\mathbf o}))`. **Faithfulness**: the LRE's top token
equals the LM's. **Causality**: the edit :math:`\mathbf s\leftarrow\mathbf s+W^{+}_{\rho}(\mathbf o'-\mathbf o)`,
with the rank-:math:`\rho` pseudo-inverse and the LM's own object states :math:`\mathbf o,\mathbf o'` of a
source and a target subject, makes the LM predict the target's object: *hard* if it becomes the top-1
token, *soft* (our reading, the paper defers to Hernandez et al.) if :math:`p(o')>p(o)` after the edit.

Every function that receives a model runs where the model is (:func:`companion_lib.common.module_device`):
prompts and indices may come from the CPU, they are moved there, and the results are tensors on that device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..common.device import module_device
from ..tinylm import capture_activations, decode_hidden, hidden_jacobian, layer_adapter, patch_activations

__all__ = ["LRE", "fit_lre", "lm_states", "lre_logits", "low_rank_pinv", "edit_delta", "edited_logits",
           "faithfulness", "causality", "select_beta", "select_rank", "subject_ids"]


def _check_prompts(model: nn.Module, prompts: torch.Tensor, name: str = "prompts") -> torch.Tensor:
    if not isinstance(prompts, torch.Tensor) or prompts.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name} must be a tensor of token ids")
    if prompts.ndim != 2:
        raise ValueError(f"{name} must have shape (n, length), got {tuple(prompts.shape)}")
    if prompts.shape[0] == 0:
        raise ValueError(f"{name} is empty: a relation needs at least one subject")
    vocab = model.get_output_embeddings().weight.shape[0]
    if int(prompts.min()) < 0 or int(prompts.max()) >= vocab:
        raise ValueError(f"{name} contains a token id outside the vocabulary [0, {vocab})")
    return prompts.long().to(module_device(model))   # where the model is (on the CPU: the same tensor)


def _check_beta(beta: float) -> float:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not beta > 0:
        raise ValueError(f"beta must be a number > 0, got {beta!r}")
    return float(beta)


def subject_ids(tokenizer, subjects: list[str]) -> list[int]:
    """Token ids of single-token subjects; a word the tokenizer does not know raises ``ValueError``."""
    if isinstance(subjects, str):
        raise TypeError("subjects must be a list of strings")
    ids = tokenizer.convert_tokens_to_ids(list(subjects))
    for word, i in zip(subjects, ids):
        if i is None or i == tokenizer.unk_token_id:
            raise ValueError(f"subject {word!r} is not in the vocabulary")
    return ids


@dataclass
class LRE:
    r"""The affine map :math:`\hat{\mathbf o} = \beta W\mathbf s + \mathbf b` of one relation."""

    weight: torch.Tensor   # W, (d, d)
    bias: torch.Tensor     # b, (d,)
    layer: int             # the layer of s
    beta: float = 1.0
    _svd_cache: tuple | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_beta(self.beta)
        d = self.bias.shape[-1]
        if self.weight.shape != (d, d):
            raise ValueError(f"weight must be ({d}, {d}), got {tuple(self.weight.shape)}")

    def __call__(self, s: torch.Tensor) -> torch.Tensor:
        return self.beta * s @ self.weight.T + self.bias

    def with_beta(self, beta: float) -> "LRE":
        out = LRE(self.weight, self.bias, self.layer, _check_beta(beta))
        out._svd_cache = self._svd_cache   # the same W: its SVD carries over
        return out

    def pinv(self, rank: int) -> torch.Tensor:
        r""":func:`low_rank_pinv` of ``weight``; the SVD is computed once per LRE and reused for every rank.

        A rank sweep (:func:`select_rank`) and the test edits then share one decomposition; the numbers are
        those of :func:`low_rank_pinv` (the same decomposition, sliced the same way).
        """
        cache = self._svd_cache
        if cache is None or cache[0] is not self.weight or cache[1] != self.weight._version:
            cache = self._svd_cache = (self.weight, self.weight._version, _svd(self.weight))
        return _pinv_from_svd(cache[2], rank).to(self.weight.dtype)


def fit_lre(model: nn.Module, prompts: torch.Tensor, layer: int, subject_position: int = -1,
            beta: float = 1.0) -> LRE:
    r"""Mean Jacobian and bias over the fitting prompts (Eq. 1): one batched Jacobian call for all of them.

    The fitting subjects need not be answered correctly by the LM (Merullo et al. use the same
    examples at every checkpoint).
    """
    prompts = _check_prompts(model, prompts)
    n_layers = layer_adapter(model).n_layers
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= n_layers:
        raise ValueError(f"layer must be an int in [0, {n_layers}] for a model with {n_layers} blocks, got {layer!r}")
    J, s, o = hidden_jacobian(model, prompts, layer, n_layers, src_position=subject_position, dst_position=-1)
    bias = (o - torch.einsum("nij,nj->ni", J, s)).mean(0)
    return LRE(J.mean(0).detach(), bias.detach(), layer, _check_beta(beta))


def lm_states(model: nn.Module, prompts: torch.Tensor, layer: int, subject_position: int = -1
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The LM's own ``(s, o, logits)``: subject state at ``layer``, last-block output and next-token logits."""
    prompts = _check_prompts(model, prompts)
    n_layers = layer_adapter(model).n_layers
    with torch.no_grad(), capture_activations(model, [layer, n_layers]) as acts:
        logits = model(input_ids=prompts).logits[:, -1]
    rows = torch.arange(prompts.shape[0], device=prompts.device)
    return acts[layer][rows, subject_position], acts[n_layers][:, -1], logits


def _states(model: nn.Module, prompts: torch.Tensor, layer: int, subject_position: int, states):
    """``states`` when given (checked against the prompts), else :func:`lm_states` of the prompts."""
    if states is None:
        return lm_states(model, prompts, layer, subject_position)
    s, o, logits = states
    n = _check_prompts(model, prompts).shape[0]
    if not (s.shape[0] == o.shape[0] == logits.shape[0] == n):
        raise ValueError(f"states must hold one row per prompt ({n}), got {s.shape[0]}, {o.shape[0]}, {logits.shape[0]}")
    return states


def lre_logits(model: nn.Module, lre: LRE, s: torch.Tensor) -> torch.Tensor:
    """Next-token logits of the LRE's prediction, decoded by the LM's final norm and unembedding."""
    with torch.no_grad():
        return decode_hidden(model, lre(s))


def low_rank_pinv(weight: torch.Tensor, rank: int) -> torch.Tensor:
    r""":math:`W^+_\rho = V_\rho \Sigma_\rho^{-1} U_\rho^\top` from the top-``rank`` singular triplets of ``weight``."""
    return _pinv_from_svd(_svd(weight), rank).to(weight.dtype)


def _svd(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The thin SVD of a matrix, in float64."""
    if weight.ndim != 2:
        raise ValueError(f"weight must be a matrix, got shape {tuple(weight.shape)}")
    return torch.linalg.svd(weight.double(), full_matrices=False)


def _pinv_from_svd(svd: tuple[torch.Tensor, torch.Tensor, torch.Tensor], rank: int) -> torch.Tensor:
    r""":math:`V_\rho \Sigma_\rho^{-1} U_\rho^\top` from a thin SVD ``(U, S, Vh)`` (float64)."""
    u, sv, vh = svd
    width = sv.shape[0]
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= width:
        raise ValueError(f"rank must be an int in [1, {width}] (the width), got {rank!r}")
    return vh[:rank].T @ torch.diag(1.0 / sv[:rank]) @ u[:, :rank].T


def edit_delta(lre: LRE, o_source: torch.Tensor, o_target: torch.Tensor, rank: int) -> torch.Tensor:
    r"""The causality edit :math:`\Delta\mathbf s=W^+_\rho(\mathbf o'-\mathbf o)` (rows: one edit each)."""
    return (o_target - o_source) @ lre.pinv(rank).T


def edited_logits(model: nn.Module, prompts: torch.Tensor, layer: int, s_new: torch.Tensor,
                  subject_position: int = -1) -> torch.Tensor:
    """Next-token logits after writing ``s_new`` (n, d) at the subject position of ``layer``."""
    prompts = _check_prompts(model, prompts)
    with torch.no_grad(), patch_activations(model, layer, s_new, position=subject_position):
        return model(input_ids=prompts).logits[:, -1]


def faithfulness(model: nn.Module, lre: LRE, prompts: torch.Tensor, subject_position: int = -1,
                 states: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """Per prompt: does the LRE's top token equal the LM's top token? (bool tensor)

    ``states``: the :func:`lm_states` of these prompts at ``lre.layer`` when the caller has them already
    (the same numbers; one forward pass saved).
    """
    s, _, logits = _states(model, prompts, lre.layer, subject_position, states)
    return lre_logits(model, lre, s).argmax(-1) == logits.argmax(-1)


def causality(model: nn.Module, lre: LRE, prompts: torch.Tensor, source: torch.Tensor, target: torch.Tensor,
              source_objects: torch.Tensor, target_objects: torch.Tensor, rank: int,
              subject_position: int = -1,
              states: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Hard and soft causality of the edits ``source[k] -> target[k]`` (indices into ``prompts``).

    Returns two bool tensors (one entry per edit): the edited LM's top-1 token is the target's object
    (hard); the edited LM gives the target's object more probability than the source's (soft).
    ``states``: the :func:`lm_states` of ``prompts`` at ``lre.layer``, when the caller has them already.
    """
    hard, soft = _causality_at_ranks(model, lre, prompts, source, target, source_objects, target_objects,
                                     [rank], subject_position, states)
    return hard[0], soft[0]


def _causality_at_ranks(model, lre, prompts, source, target, source_objects, target_objects, ranks,
                        subject_position, states) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`causality` at every rank of ``ranks``: (len(ranks), n_edits) bool tensors, one forward pass.

    The edited prompts of all ranks are stacked into one batch (rows of a batch do not interact, so each
    rank's rows are those of its own pass; a rank sweep costs one model call instead of one per rank).
    """
    source, target = torch.as_tensor(source), torch.as_tensor(target)
    if source.shape != target.shape or source.ndim != 1 or source.numel() == 0:
        raise ValueError("source and target must be equal-length, non-empty 1-d index tensors")
    s, o, _ = _states(model, prompts, lre.layer, subject_position, states)
    src, tgt = source.to(s.device), target.to(s.device)
    s_new = torch.cat([s[src] + edit_delta(lre, o[src], o[tgt], rank) for rank in ranks])
    edited = prompts[source.to(prompts.device)]
    logits = edited_logits(model, edited.repeat(len(ranks), 1), lre.layer, s_new, subject_position)
    logits = logits.view(len(ranks), source.numel(), -1)
    rows = torch.arange(source.numel(), device=logits.device)
    source_objects = torch.as_tensor(source_objects, device=logits.device)
    target_objects = torch.as_tensor(target_objects, device=logits.device)
    hard = logits.argmax(-1) == target_objects
    soft = logits[:, rows, target_objects] > logits[:, rows, source_objects]
    return hard, soft


def select_beta(model: nn.Module, lre: LRE, prompts: torch.Tensor, betas, subject_position: int = -1,
                states: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> float:
    """The β of the grid with the highest faithfulness on ``prompts`` (ties: the smallest β)."""
    betas = [_check_beta(b) for b in betas]
    if not betas:
        raise ValueError("betas must not be empty")
    s, _, logits = _states(model, prompts, lre.layer, subject_position, states)
    top = logits.argmax(-1)
    scores = [float((lre_logits(model, lre.with_beta(b), s).argmax(-1) == top).float().mean()) for b in betas]
    return betas[max(range(len(betas)), key=lambda i: (scores[i], -betas[i]))]


def select_rank(model: nn.Module, lre: LRE, prompts: torch.Tensor, source, target, source_objects,
                target_objects, ranks, subject_position: int = -1,
                states: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> int:
    """The rank of the grid with the highest hard causality on the given edits (ties: the smallest rank).

    The LM's states of ``prompts`` do not depend on the rank: they are computed once for the whole grid, and
    the edited prompts of every rank go through the model in one batch.
    """
    ranks = list(ranks)
    if not ranks:
        raise ValueError("ranks must not be empty")
    hard, _ = _causality_at_ranks(model, lre, prompts, source, target, source_objects, target_objects, ranks,
                                  subject_position, states)
    scores = [float(h.float().mean()) for h in hard]
    return ranks[max(range(len(ranks)), key=lambda i: (scores[i], -ranks[i]))]
