"""Second-order pooling for training (second-order-metrics.txt, section 3): a text's masked token matrix A becomes
P_cov(A) = A^T A, or P_svd(A, k), the rank-k reconstruction of it through `torch.svd_lowrank`, flattened and
scaled to unit Frobenius norm. The cosine of two such vectors is then exactly S_F(P(A), P(B)), so every loss of
`trainer.losses` (angular, cosine, triplet, contrastive, sentence-transformers' cosine and triplet losses) trains
on S_F unchanged. `mean` returns sentence-transformers' own pooled embedding, as before.

P_svd reconstructs U_k S_k V_k^T (then its covariance V_k S_k^2 V_k^T), as the paper does: the factors alone are
defined only up to the signs of singular vectors, the reconstruction is not. The decomposition runs in float64 on
A plus a tiny fixed jitter (JITTER x the matrix's RMS): without it, the backward pass of an SVD divides by the
gaps between singular values, which are zero for short or repetitive texts (a 3-token title has rank 3 < k = 5)
and gave NaN gradients; with it every gap is non-zero and the jitter changes A^T A by about JITTER^2 relative.

Costs d^2 floats a text (147k for d = 384): fine for training batches; the service never forms them
(`service.second_order` compares the k x d factors instead).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

Pooling = Literal["mean", "cov", "svd"]
POOLINGS: tuple[str, ...] = Pooling.__args__
JITTER = 1e-4
OVERSAMPLING = 2  # extra directions svd_lowrank's randomised range finder keeps, for a sharper top k
NITER = 2  # its power iterations (torch's default)


def masked_tokens(token_embeddings: Tensor, attention_mask: Tensor) -> Tensor:
    """(batch, n, d) token matrices with padding rows zeroed, in float32 or wider (A^T A overflows bfloat16's
    precision long before its range)."""
    tokens = token_embeddings.float() if token_embeddings.dtype in (torch.float16, torch.bfloat16) else token_embeddings
    return tokens * attention_mask.unsqueeze(-1).to(tokens.dtype)


def covariance(tokens: Tensor) -> Tensor:
    """P_cov: (batch, d, d) = A^T A of masked (batch, n, d) token matrices."""
    return tokens.transpose(-1, -2) @ tokens


def low_rank_covariance(tokens: Tensor, k: int) -> Tensor:
    """P_svd(A, k) reconstructed: (batch, d, d) = A_k^T A_k with A_k = U_k S_k V_k^T from torch.svd_lowrank."""
    a = tokens.double()
    n, d = a.shape[-2:]
    generator = torch.Generator(device=a.device).manual_seed(0)
    noise = torch.randn(n, d, generator=generator, dtype=a.dtype, device=a.device)
    rms = a.detach().pow(2).mean(dim=(-2, -1), keepdim=True).sqrt().clamp_min(1e-12)
    q = min(k + OVERSAMPLING, n, d)
    u, s, v = torch.svd_lowrank(a + JITTER * rms * noise, q=q, niter=NITER)
    u, s, v = u[..., :k], s[..., :k], v[..., :k]
    reconstructed = (u * s.unsqueeze(-2)) @ v.transpose(-1, -2)
    return (reconstructed.transpose(-1, -2) @ reconstructed).to(tokens.dtype)


def second_order(token_embeddings: Tensor, attention_mask: Tensor, pooling: Pooling, rank_k: int | None) -> Tensor:
    """(batch, d * d) unit vectors vec(P(A)) / ||P(A)||_F: their dot product is S_F."""
    with torch.autocast(token_embeddings.device.type, enabled=False):
        tokens = masked_tokens(token_embeddings, attention_mask)
        if pooling == "cov":
            matrices = covariance(tokens)
        elif pooling == "svd":
            if rank_k is None:
                raise ValueError("pooling 'svd' needs rank_k")
            matrices = low_rank_covariance(tokens, rank_k)
        else:
            raise ValueError(f"second_order pooling is 'cov' or 'svd', not {pooling!r}")
        return F.normalize(matrices.flatten(start_dim=1), dim=-1)


def pool(features: dict[str, Tensor], pooling: Pooling, rank_k: int | None = None) -> Tensor:
    """The text representation the losses compare, from a SentenceTransformer forward's output: its
    `sentence_embedding` for mean pooling, the unit second-order vector for cov and svd."""
    if pooling == "mean":
        return features["sentence_embedding"]
    return second_order(features["token_embeddings"], features["attention_mask"], pooling, rank_k)
