r"""Sparse autoencoders do not find canonical units of analysis (Leask et al., ICLR 2025), in miniature.

The paper asks whether a sparse autoencoder (SAE) finds *canonical* units: a dictionary that is
**complete** (nothing a larger SAE knows is missing) and **atomic** (no latent is a combination of
others). It answers no, with two tools, both implemented here on synthetic data whose ground truth is
known:

* **SAE stitching**: insert a latent $j$ of a larger SAE $B$ into a smaller SAE $A$. *Novel* latents
  lower the reconstruction error ($\Delta\mathrm{MSE}_j<0$: $A$ was incomplete); *reconstruction*
  latents raise it (they re-encode what $A$ already has) and must instead *replace* a group of $A$'s
  latents.
* **Meta-SAEs**: an SAE trained on the unit-norm decoder rows $d^B_j$ of another SAE,
  $d^B_j\approx\sum_a g_a(d^B_j)\,u_a$ with few active meta-latents $u_a$: latents are not atomic.

The SAEs are TopK and BatchTopK SAEs,

$$
z = W_{enc}^\top(x-b_{dec})+b_{enc},\qquad f=\sigma(z),\qquad \hat x = b_{dec}+\sum_i f_i\,d_i,\quad \|d_i\|=1,
$$

where TopK's $\sigma$ keeps the $k$ largest entries of each row of $\mathrm{ReLU}(z)$, BatchTopK's keeps
the $kB$ largest entries of the whole batch, and at inference BatchTopK uses a global threshold
$f_i=z_i\,\mathbb 1[z_i>\theta]$ (a JumpReLU) estimated during training. Training minimises
$\|x-\hat x\|^2+\alpha\,\|e-\hat e_{\text{dead}}\|^2$ (the AuxK term: the top-$k_{aux}$ dead latents
reconstruct the detached residual $e$), with decoder rows kept at unit norm.

The package, in the order the chapter uses it:

* :mod:`.world` -- the synthetic ground truth (atoms, entities, rare features) and its samples.
* :mod:`.model` -- TopK and BatchTopK activations, :class:`SparseAutoencoder` and its JumpReLU form.
* :mod:`.training` -- the batched training loop of SAEs and meta-SAEs.
* :mod:`.evaluation` -- reconstruction, sparsity, matches with the ground truth, the meta-SAE analysis.
* :mod:`.stitching` -- insertion deltas, swap groups and stitching paths.
* :mod:`.experiment` -- the book's runs over worlds and seeds, and their per-world summary.
* :mod:`.fullscale` -- the same measurements on a real checkpoint's residual stream (:func:`full_scale`).

Only numpy and torch are used at run time; :func:`companion_lib.common.device` chooses where the SAEs train
(the GPU when present, else the CPU; the trained models come back on the CPU).
"""

from .evaluation import (alive_latents, atom_hit_fraction, classify_latents, max_cosine, mean_l0, meta_decomposition,
                         nmse, recovered_fraction)
from .experiment import run_experiment, run_experiments, summarize
from .fullscale import TEXT_FORMATS, full_scale, load_texts, residual_activations, sae_memory_bytes
from .model import JumpReLUDictionary, SparseAutoencoder, batch_topk, topk_per_sample
from .stitching import insertion_deltas, stitching_path, stitching_path_gram, swap_groups
from .training import TrainHistory, train_meta_sae, train_meta_saes, train_sae, train_sae_reference, train_saes
from .world import SyntheticWorld, make_world, sample_activations

__all__ = [
    "SyntheticWorld", "make_world", "sample_activations", "SparseAutoencoder", "JumpReLUDictionary",
    "batch_topk", "topk_per_sample", "TrainHistory", "train_sae", "train_sae_reference", "train_saes", "train_meta_sae", "train_meta_saes",
    "nmse", "mean_l0", "alive_latents", "max_cosine", "recovered_fraction", "classify_latents", "insertion_deltas",
    "stitching_path", "swap_groups", "meta_decomposition", "atom_hit_fraction", "run_experiments", "run_experiment",
    "summarize", "TEXT_FORMATS", "load_texts", "residual_activations", "stitching_path_gram", "sae_memory_bytes",
    "full_scale",
]
