"""A ViT-style search space: an embedding width, a depth, and per block the attention heads and
the MLP ratio (the AutoFormer / HAT convention of searching a transformer's blocks).

A candidate is a patch embedding (a ``patch × patch`` convolution of stride ``patch`` and a
learned position embedding), ``depth`` pre-norm transformer blocks (layer norm, multi-head
self-attention through ``scaled_dot_product_attention``, residual; layer norm, ``Linear``-GELU-
``Linear`` MLP, residual), a final layer norm, the mean over tokens and a linear classifier.
Like :class:`~ftmodel.oracle.search_space.MobileNetV2Space` it names a candidate's blocks
(:meth:`ViTSpace.blocks`) and builds one block from its key (:meth:`ViTSpace.block`), so
:class:`ftmodel.oracle.CostOracle` prices its candidates from their configurations.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ftmodel.errors import InvalidArgumentError

__all__ = ["VIT_DEPTHS", "VIT_DIMS", "VIT_HEADS", "VIT_MLP_RATIOS", "ViTBlock", "ViTBlockConfig",
           "ViTConfig", "ViTSpace"]

VIT_DIMS = (192, 256, 384)
VIT_DEPTHS = (6, 8, 10, 12)
VIT_HEADS = (2, 4, 8)
VIT_MLP_RATIOS = (2, 3, 4)


@dataclass(frozen=True)
class ViTBlockConfig:
    heads: int
    mlp_ratio: int


@dataclass(frozen=True)
class ViTConfig:
    """One architecture of :class:`ViTSpace` (hashable)."""

    dim: int
    blocks: tuple[ViTBlockConfig, ...]  # len(blocks) is the depth

    def short(self) -> str:
        return f"d{self.dim}:" + ",".join(f"h{b.heads}r{b.mlp_ratio}" for b in self.blocks)


class ViTBlock(nn.Module):
    """Pre-norm transformer block on ``(B, N, dim)`` tokens."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(),
                                 nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, N, D)
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(
            2, 0, 3, 1, 4)  # 3 x (B, H, N, D/H)
        y = nn.functional.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, d))
        out: torch.Tensor = x + self.mlp(self.norm2(x))
        return out


class _PatchEmbed(nn.Module):
    def __init__(self, dim: int, patch: int, tokens: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, dim, patch, patch)
        self.pos = nn.Parameter(torch.zeros(1, tokens, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, 3, H, W) -> (B, N, D)
        out: torch.Tensor = self.conv(x).flatten(2).transpose(1, 2) + self.pos
        return out


class _TokenMean(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, D) -> (B, D)
        return x.mean(dim=1)


class ViTSpace:
    """The space: sample, suggest (Optuna), check, name blocks, build (see the module doc).

    ``resolution`` is the input image side, ``patch`` the patch side (``resolution / patch``
    patches per side), ``n_classes`` the classifier's outputs."""

    def __init__(self, resolution: int = 128, patch: int = 16, n_classes: int = 1000) -> None:
        if patch < 1 or resolution < patch or resolution % patch:
            raise InvalidArgumentError(
                f"resolution must be a multiple of patch, got resolution {resolution!r} and "
                f"patch {patch!r}; e.g. 128 and 16")
        self.resolution, self.patch, self.n_classes = resolution, patch, n_classes
        self.tokens = (resolution // patch) ** 2

    def sample(self, rng: random.Random) -> ViTConfig:
        """A uniformly random candidate (every choice independent)."""
        return ViTConfig(rng.choice(VIT_DIMS), tuple(
            ViTBlockConfig(rng.choice(VIT_HEADS), rng.choice(VIT_MLP_RATIOS))
            for _ in range(rng.choice(VIT_DEPTHS))))

    def suggest(self, trial: Any) -> ViTConfig:
        """The candidate an Optuna trial proposes (``dim``, ``depth``, ``b<j>_heads``,
        ``b<j>_mlp_ratio``)."""
        depth = int(trial.suggest_categorical("depth", VIT_DEPTHS))
        return ViTConfig(int(trial.suggest_categorical("dim", VIT_DIMS)), tuple(
            ViTBlockConfig(int(trial.suggest_categorical(f"b{j}_heads", VIT_HEADS)),
                           int(trial.suggest_categorical(f"b{j}_mlp_ratio", VIT_MLP_RATIOS)))
            for j in range(depth)))

    def check(self, cfg: ViTConfig) -> None:
        """Raise InvalidArgumentError naming the first choice outside the space."""
        if cfg.dim not in VIT_DIMS or len(cfg.blocks) not in VIT_DEPTHS:
            raise InvalidArgumentError(
                f"dim {cfg.dim!r} / depth {len(cfg.blocks)} outside the space (dims "
                f"{VIT_DIMS}, depths {VIT_DEPTHS})")
        for j, b in enumerate(cfg.blocks):
            if b.heads not in VIT_HEADS or b.mlp_ratio not in VIT_MLP_RATIOS:
                raise InvalidArgumentError(
                    f"block {j}: heads {b.heads!r} / MLP ratio {b.mlp_ratio!r} outside the "
                    f"space (heads {VIT_HEADS}, MLP ratios {VIT_MLP_RATIOS})")

    def covering(self) -> list[ViTConfig]:
        """Configurations that together hold every block the space can make (one per width,
        every heads x MLP ratio pair among its blocks)."""
        pairs = [ViTBlockConfig(h, r) for h in VIT_HEADS for r in VIT_MLP_RATIOS]
        depth = min(d for d in VIT_DEPTHS if d >= len(pairs))
        return [ViTConfig(dim, tuple(pairs + pairs[:depth - len(pairs)])) for dim in VIT_DIMS]

    def blocks(self, cfg: ViTConfig) -> tuple[Hashable, ...]:
        """The candidate's blocks in order, as keys :meth:`block` builds. Nothing is built."""
        self.check(cfg)
        d = cfg.dim
        return (("patch", d), *(("block", d, b.heads, b.mlp_ratio) for b in cfg.blocks),
                ("norm", d), ("pool",), ("classifier", d, self.n_classes))

    def block(self, key: Hashable, device: str | torch.device = "meta") -> nn.Module:
        """One block of :meth:`blocks` (``device="meta"``: no weight memory)."""
        kind, args = (key[0], key[1:]) if isinstance(key, tuple) and key else (None, ())
        with torch.device(device):
            if kind == "patch" and len(args) == 1:
                return _PatchEmbed(args[0], self.patch, self.tokens)
            if kind == "block" and len(args) == 3:
                return ViTBlock(*args)
            if kind == "norm" and len(args) == 1:
                return nn.LayerNorm(args[0])
            if kind == "pool":
                return _TokenMean()
            if kind == "classifier" and len(args) == 2:
                return nn.Linear(*args)
        raise InvalidArgumentError(
            f"not a block key of this space: {key!r} (kinds: patch, block, norm, pool, "
            "classifier; see ViTSpace.blocks)")

    def build(self, cfg: ViTConfig, device: str | torch.device = "cpu") -> nn.Sequential:
        """The candidate as an ``nn.Sequential`` of its :meth:`blocks`."""
        return nn.Sequential(*(self.block(k, device) for k in self.blocks(cfg))).eval()

    def inputs(self, batch: int) -> torch.Tensor:
        """Random images ``(batch, 3, resolution, resolution)``."""
        return torch.randn(batch, 3, self.resolution, self.resolution)  # (B, 3, H, W)

    def input_spec(self) -> torch.Tensor:
        """A meta tensor of the input shape at batch 1 (resized to each batch by ftmodel)."""
        return torch.empty(1, 3, self.resolution, self.resolution, device="meta")
