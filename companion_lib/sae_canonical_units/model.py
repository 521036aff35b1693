r"""The SAE: TopK and BatchTopK activations, :class:`SparseAutoencoder`, and its inference form as a
per-latent JumpReLU dictionary (:class:`JumpReLUDictionary`), the form in which latents of two SAEs mix."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["SparseAutoencoder", "JumpReLUDictionary", "batch_topk", "topk_per_sample"]


def _check_k(k, width: int) -> int:
    if isinstance(k, bool) or int(k) != k or k <= 0:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if k > width:
        raise ValueError(f"k must be <= the width ({width}), got {k}")
    return int(k)


def topk_per_sample(z: torch.Tensor, k: int) -> torch.Tensor:
    r"""TopK: keep the $k$ largest entries of each row of $\mathrm{ReLU}(z)$, zero the rest."""
    k = _check_k(k, z.shape[-1])
    z = torch.relu(z)
    top = torch.topk(z, k, dim=-1)
    return torch.zeros_like(z).scatter(-1, top.indices, top.values)


def batch_topk(z: torch.Tensor, k: int) -> torch.Tensor:
    r"""BatchTopK: keep the $kB$ largest entries of the whole batch $\mathrm{ReLU}(z)$ ($B$ rows), so
    that rows have $k$ active latents *on average*."""
    k = _check_k(k, z.shape[-1])
    z = torch.relu(z)
    flat = z.reshape(-1)
    top = torch.topk(flat, k * z.shape[0])
    return torch.zeros_like(flat).scatter(0, top.indices, top.values).reshape(z.shape)


def _as_tensor(x, name: str = "x") -> torch.Tensor:
    x = torch.as_tensor(np.asarray(x, dtype=np.float32)) if not isinstance(x, torch.Tensor) else x.float()
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (samples x features), got shape {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return x


class SparseAutoencoder(torch.nn.Module):
    r"""A TopK or BatchTopK SAE: $z=(x-b_{dec})W_{enc}+b_{enc}$, $\hat x=b_{dec}+f(z)W_{dec}$.

    ``kind`` is ``"topk"`` or ``"batchtopk"``; ``threshold`` ($\theta$) is BatchTopK's global inference
    threshold (NaN until estimated). ``encode(x, batch=True)`` uses the training activation (batch
    top-k for BatchTopK); ``batch=False`` the inference one (per-sample top-k for TopK, the JumpReLU
    threshold for BatchTopK), so that a sample's code does not depend on the rest of its batch.
    """

    def __init__(self, d_in: int, width: int, k: int, kind: str = "batchtopk",
                 W_enc=None, b_enc=None, W_dec=None, b_dec=None) -> None:
        super().__init__()
        if kind not in ("topk", "batchtopk"):
            raise ValueError(f"kind must be 'topk' or 'batchtopk', got {kind!r}")
        if int(d_in) != d_in or d_in < 1 or int(width) != width or width < 1:
            raise ValueError(f"d_in and width must be positive integers, got {d_in!r}, {width!r}")
        self.k, self.kind, self.d_in, self.width = _check_k(k, width), kind, int(d_in), int(width)
        W_dec = torch.nn.functional.normalize(torch.randn(width, d_in), dim=1) if W_dec is None else torch.as_tensor(W_dec).float()
        W_enc = W_dec.T.clone() if W_enc is None else torch.as_tensor(W_enc).float()
        if tuple(W_enc.shape) != (d_in, width):
            raise ValueError(f"W_enc must have shape (d_in, width) = {(d_in, width)}, got {tuple(W_enc.shape)}")
        if tuple(W_dec.shape) != (width, d_in):
            raise ValueError(f"W_dec must have shape (width, d_in) = {(width, d_in)} to match the encoder, got {tuple(W_dec.shape)}")
        self.W_enc = torch.nn.Parameter(W_enc.clone())
        self.W_dec = torch.nn.Parameter(W_dec.clone())
        self.b_enc = torch.nn.Parameter(torch.zeros(width) if b_enc is None else torch.as_tensor(b_enc).float().clone())
        self.b_dec = torch.nn.Parameter(torch.zeros(d_in) if b_dec is None else torch.as_tensor(b_dec).float().clone())
        self.register_buffer("threshold", torch.tensor(float("nan")))

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.b_dec) @ self.W_enc + self.b_enc

    def encode(self, x, batch: bool = True) -> torch.Tensor:
        z = self.pre_activations(_as_tensor(x) if not isinstance(x, torch.Tensor) else x)
        if self.kind == "topk":
            return topk_per_sample(z, self.k)
        if batch:
            return batch_topk(z, self.k)
        if not torch.isfinite(self.threshold):
            raise ValueError("the inference threshold is not estimated yet: train the SAE or set .threshold")
        return z * (z > self.threshold)

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        return f @ self.W_dec + self.b_dec

    def forward(self, x, batch: bool = True) -> torch.Tensor:
        return self.decode(self.encode(x, batch))

    def as_dictionary(self) -> "JumpReLUDictionary":
        """The inference form of a BatchTopK SAE as a per-latent JumpReLU dictionary (for stitching)."""
        if self.kind != "batchtopk" or not torch.isfinite(self.threshold):
            raise ValueError("only a trained BatchTopK SAE (with an inference threshold) has a JumpReLU form")
        with torch.no_grad():
            return JumpReLUDictionary(self.W_enc.numpy().copy(), self.b_enc.numpy().copy(),
                                      self.W_dec.numpy().copy(), self.b_dec.numpy().copy(),
                                      np.full(self.width, float(self.threshold)))


@dataclass
class JumpReLUDictionary:
    r"""A JumpReLU SAE with per-latent thresholds: $f_i=z_i\mathbb 1[z_i>\theta_i]$,
    $z=(x-b_{dec})W_{enc}+b_{enc}$, $\hat x=b_{dec}+fW_{dec}$: the inference form of a BatchTopK SAE,
    and the form in which latents of two SAEs can be mixed (each keeps its own threshold)."""

    W_enc: np.ndarray
    b_enc: np.ndarray
    W_dec: np.ndarray
    b_dec: np.ndarray
    thresholds: np.ndarray

    def __post_init__(self):
        if self.W_enc.shape[1] != self.W_dec.shape[0]:
            raise ValueError(f"decoder width {self.W_dec.shape[0]} does not match encoder width {self.W_enc.shape[1]}")

    @property
    def width(self) -> int:
        return self.W_dec.shape[0]

    def encode(self, X: np.ndarray) -> np.ndarray:
        z = (X - self.b_dec) @ self.W_enc + self.b_enc
        return z * (z > self.thresholds)

    def reconstruct(self, X: np.ndarray) -> np.ndarray:
        return self.encode(X) @ self.W_dec + self.b_dec

    def subset(self, keep) -> "JumpReLUDictionary":
        keep = np.asarray(keep)
        return JumpReLUDictionary(self.W_enc[:, keep], self.b_enc[keep], self.W_dec[keep], self.b_dec, self.thresholds[keep])
