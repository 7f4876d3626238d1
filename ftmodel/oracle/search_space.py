"""A MobileNet-V2-style search space for hardware-aware NAS examples and benchmarks.

The space follows MobileNet-V2 (Sandler et al., 2018, Table 2) and the ProxylessNAS / Once-for-All
convention of searching its inverted-residual ("MBConv") blocks:

* a fixed stem (3×3 conv, stride 2, 32 channels, BN, ReLU6) and a fixed first block (expansion
  1, 16 channels);
* six searchable **stages** with MobileNet-V2's base channels and strides
  ``(24, s2) (32, s2) (64, s2) (96, s1) (160, s2) (320, s1)``; per stage a **depth** (number of
  blocks, :data:`DEPTHS`; the last stage always has one) and a **width** multiplier
  (:data:`WIDTHS`, channels rounded to a multiple of 8);
* per block an **expansion ratio** (:data:`EXPANSIONS`) and a depthwise **kernel size**
  (:data:`KERNELS`);
* a fixed head: 1×1 conv to 1280 channels, BN, ReLU6, global average pool, flatten, linear.

A candidate is an ``nn.Sequential`` whose children are the stem, every block and the head
pieces (:meth:`MobileNetV2Space.blocks` names them without building anything), so
:class:`ftmodel.oracle.CostOracle` prices it block by block, from its configuration alone with
``latencies(configs, batches, space=space)``. Building on the meta device
(``build(cfg, device="meta")``) allocates no weight memory.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from ftmodel.errors import InvalidArgumentError
from ftmodel.plain_objects import maker

__all__ = [
    "BASE_STAGES",
    "DEPTHS",
    "EXPANSIONS",
    "KERNELS",
    "WIDTHS",
    "BlockConfig",
    "CandidateConfig",
    "MBConv",
    "MobileNetV2Space",
    "StageConfig",
    "make_divisible",
]

EXPANSIONS = (3, 4, 6)
KERNELS = (3, 5, 7)
DEPTHS = (1, 2, 3, 4)
WIDTHS = (0.75, 1.0, 1.25)
BASE_STAGES = ((24, 2), (32, 2), (64, 2), (96, 1), (160, 2), (320, 1))  # (channels, stride)
STEM_CHANNELS, FIRST_CHANNELS, HEAD_CHANNELS = 32, 16, 1280


def make_divisible(value: float, divisor: int = 8) -> int:
    """MobileNet's channel rounding: nearest multiple of ``divisor``, never below 90%."""
    out = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return out + divisor if out < 0.9 * value else out


@dataclass(frozen=True)
class BlockConfig:
    expansion: int
    kernel: int


@dataclass(frozen=True)
class StageConfig:
    width: float  # multiplier of the stage's base channels
    blocks: tuple[BlockConfig, ...]  # len(blocks) is the stage depth

    @property
    def depth(self) -> int:
        return len(self.blocks)


@dataclass(frozen=True)
class CandidateConfig:
    """One architecture of the space (hashable; ``as_dict`` for reports)."""

    stages: tuple[StageConfig, ...]

    def as_dict(self) -> dict[str, Any]:
        return {f"stage{i}": {"width": s.width, "depth": s.depth,
                              "expansion": [b.expansion for b in s.blocks],
                              "kernel": [b.kernel for b in s.blocks]}
                for i, s in enumerate(self.stages)}

    def short(self) -> str:
        """A compact string: ``w<width>:<e><k>,...`` per stage, stages separated by ``|``."""
        return "|".join(f"w{s.width:g}:" + ",".join(f"e{b.expansion}k{b.kernel}"
                                                     for b in s.blocks)
                        for s in self.stages)


class MBConv(nn.Module):
    """Inverted residual: 1×1 expand (skipped at expansion 1), k×k depthwise, 1×1 project.

    The residual connection is used when stride is 1 and the channel count is unchanged.
    """

    def __init__(self, c_in: int, c_out: int, stride: int, expansion: int, kernel: int) -> None:
        super().__init__()
        hidden = c_in * expansion
        self.use_residual = stride == 1 and c_in == c_out
        layers: list[nn.Module] = []
        if expansion != 1:
            layers += [nn.Conv2d(c_in, hidden, 1, bias=False), nn.BatchNorm2d(hidden),
                       nn.ReLU6(inplace=True)]
        layers += [nn.Conv2d(hidden, hidden, kernel, stride, kernel // 2, groups=hidden,
                             bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True),
                   nn.Conv2d(hidden, c_out, 1, bias=False), nn.BatchNorm2d(c_out)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C_in, H, W) -> (B, C_out, H/s, W/s)
        out: torch.Tensor = self.conv(x)
        return x + out if self.use_residual else out


def _conv_bn_relu(c_in: int, c_out: int, kernel: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU6(inplace=True))


# what check and blocks look up (a NAS search asks for thousands of candidates a second)
_WIDTH_SET, _EXPANSION_SET, _KERNEL_SET = frozenset(WIDTHS), frozenset(EXPANSIONS), frozenset(
    KERNELS)
_MAX_DEPTH = max(DEPTHS)
_CHANNELS = {(base, w): make_divisible(base * w) for base, _ in BASE_STAGES for w in WIDTHS}
_MAKE_CANDIDATE, _MAKE_STAGE, _MAKE_BLOCK = (maker(CandidateConfig), maker(StageConfig),
                                             maker(BlockConfig))


class _Trial(Protocol):  # the part of optuna.Trial this module uses
    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...


class MobileNetV2Space:
    """The space: sample, suggest (Optuna), build, and describe candidates.

    ``resolution`` is the input image side (inputs are ``(B, 3, resolution, resolution)``);
    ``n_classes`` the classifier's outputs.
    """

    def __init__(self, resolution: int = 160, n_classes: int = 1000) -> None:
        if resolution < 32 or resolution % 32:
            raise InvalidArgumentError(
                f"resolution must be a multiple of 32 and >= 32 (five stride-2 stages), got "
                f"{resolution!r}; e.g. 128, 160 or 224")
        self.resolution = resolution
        self.n_classes = n_classes

    # -- choosing a candidate ----------------------------------------------------------------
    def sample(self, rng: random.Random) -> CandidateConfig:
        """A uniformly random candidate (every choice independent)."""
        stages = []
        for i in range(len(BASE_STAGES)):
            depth = 1 if i == len(BASE_STAGES) - 1 else rng.choice(DEPTHS)
            stages.append(StageConfig(rng.choice(WIDTHS), tuple(
                BlockConfig(rng.choice(EXPANSIONS), rng.choice(KERNELS)) for _ in range(depth))))
        return CandidateConfig(tuple(stages))

    def suggest(self, trial: _Trial) -> CandidateConfig:
        """The candidate an Optuna trial proposes (parameters ``s<i>_width``, ``s<i>_depth``,
        ``s<i>_b<j>_expansion``, ``s<i>_b<j>_kernel``; unused blocks' parameters are not asked)."""
        stages = []
        for i in range(len(BASE_STAGES)):
            depth = 1 if i == len(BASE_STAGES) - 1 else int(
                trial.suggest_categorical(f"s{i}_depth", DEPTHS))
            width = float(trial.suggest_categorical(f"s{i}_width", WIDTHS))
            blocks = tuple(BlockConfig(int(trial.suggest_categorical(f"s{i}_b{j}_expansion",
                                                                     EXPANSIONS)),
                                       int(trial.suggest_categorical(f"s{i}_b{j}_kernel",
                                                                     KERNELS)))
                           for j in range(depth))
            stages.append(StageConfig(width, blocks))
        return CandidateConfig(tuple(stages))

    def covering(self) -> list[CandidateConfig]:
        """Configurations that together hold every block the space can make at every input it
        can reach (per stage, each width after each width of the stage before, each expansion
        and kernel, first in the stage and after another block): priced once, they warm an
        oracle's block cache for the whole space (the cold start of a search)."""
        out = []
        for i in range(len(BASE_STAGES)):
            depth = 1 if i == len(BASE_STAGES) - 1 else 2
            for w_prev in (WIDTHS if i else WIDTHS[:1]):
                for w in WIDTHS:
                    for e in EXPANSIONS:
                        for k in KERNELS:
                            stages = [StageConfig(WIDTHS[0], (BlockConfig(e, k),))
                                      for _ in BASE_STAGES]
                            if i:
                                stages[i - 1] = StageConfig(w_prev, (BlockConfig(e, k),))
                            stages[i] = StageConfig(w, (BlockConfig(e, k),) * depth)
                            out.append(CandidateConfig(tuple(stages)))
        return out

    @staticmethod
    def encode(cfg: CandidateConfig) -> tuple[tuple[float, tuple[tuple[int, int], ...]], ...]:
        """``cfg`` as nested tuples of numbers (per stage: width, then each block's expansion
        and kernel): what to send to another process, which pickles it 20x faster than the
        dataclasses (Ray's object store: 2,000 configurations in 19 ms against 366 ms)."""
        return tuple((s.width, tuple((b.expansion, b.kernel) for b in s.blocks))
                     for s in cfg.stages)

    @staticmethod
    def decode(plain: Sequence[tuple[float, Sequence[tuple[int, int]]]]) -> CandidateConfig:
        """The configuration :meth:`encode` gave ``plain`` for (made without the dataclasses'
        ``__init__``, several times cheaper: :mod:`ftmodel.plain_objects`)."""
        return _MAKE_CANDIDATE({"stages": tuple(_MAKE_STAGE({"width": float(w), "blocks": tuple(
            _MAKE_BLOCK({"expansion": int(e), "kernel": int(k)}) for e, k in blocks)})
            for w, blocks in plain)})

    # -- building ----------------------------------------------------------------------------
    def check(self, cfg: CandidateConfig) -> None:
        """Raise InvalidArgumentError naming the first choice outside the space."""
        stages = cfg.stages
        if len(stages) != len(BASE_STAGES):
            raise InvalidArgumentError(f"a candidate has {len(BASE_STAGES)} stages, got "
                                       f"{len(stages)}")
        for i, s in enumerate(stages):
            blocks = s.blocks
            if s.width not in _WIDTH_SET or not 0 < len(blocks) <= _MAX_DEPTH:
                raise InvalidArgumentError(
                    f"stage {i}: width {s.width!r} / depth {s.depth} outside the space (widths "
                    f"{WIDTHS}, depths {DEPTHS})")
            for j, b in enumerate(blocks):
                if b.expansion not in _EXPANSION_SET or b.kernel not in _KERNEL_SET:
                    raise InvalidArgumentError(
                        f"stage {i} block {j}: expansion {b.expansion!r} / kernel {b.kernel!r} "
                        f"outside the space (expansions {EXPANSIONS}, kernels {KERNELS})")

    def blocks(self, cfg: CandidateConfig) -> tuple[Hashable, ...]:
        """The candidate's blocks in order, as keys :meth:`block` builds: the stem, every
        inverted residual ``("mbconv", c_in, c_out, stride, expansion, kernel)``, the head's
        1×1 convolution, pool, flatten and classifier. Nothing is built."""
        self.check(cfg)
        keys: list[Hashable] = [("stem",), ("mbconv", STEM_CHANNELS, FIRST_CHANNELS, 1, 1, 3)]
        append = keys.append
        c = FIRST_CHANNELS
        for (base, stride), stage in zip(BASE_STAGES, cfg.stages):
            c_out = _CHANNELS[(base, stage.width)]
            s = stride
            for b in stage.blocks:
                append(("mbconv", c, c_out, s, b.expansion, b.kernel))
                c, s = c_out, 1
        return (*keys, ("head", c), ("pool",), ("flatten",), ("classifier", self.n_classes))

    def block(self, key: Hashable, device: str | torch.device = "meta") -> nn.Module:
        """One block of :meth:`blocks` (``device="meta"``: no weight memory)."""
        if not isinstance(key, tuple) or not key:
            raise InvalidArgumentError(f"not a block key of this space: {key!r}")
        kind, args = key[0], key[1:]
        with torch.device(device):
            if kind == "stem":
                return _conv_bn_relu(3, STEM_CHANNELS, 3, 2)
            if kind == "mbconv" and len(args) == 5:
                return MBConv(*args)
            if kind == "head" and len(args) == 1:
                return _conv_bn_relu(args[0], HEAD_CHANNELS, 1, 1)
            if kind == "pool":
                return nn.AdaptiveAvgPool2d(1)
            if kind == "flatten":
                return nn.Flatten(1)
            if kind == "classifier" and len(args) == 1:
                return nn.Linear(HEAD_CHANNELS, args[0])
        raise InvalidArgumentError(
            f"not a block key of this space: {key!r} (kinds: stem, mbconv, head, pool, "
            "flatten, classifier; see MobileNetV2Space.blocks)")

    def build(self, cfg: CandidateConfig, device: str | torch.device = "cpu") -> nn.Sequential:
        """The candidate as an ``nn.Sequential`` of its :meth:`blocks` (``device="meta"``: no
        weight memory)."""
        return nn.Sequential(*(self.block(k, device) for k in self.blocks(cfg))).eval()

    def inputs(self, batch: int) -> torch.Tensor:
        """Random images ``(batch, 3, resolution, resolution)``."""
        return torch.randn(batch, 3, self.resolution, self.resolution)  # (B, 3, H, W)

    def input_spec(self) -> torch.Tensor:
        """A meta tensor of the input shape at batch 1 (resized to each batch by ftmodel)."""
        return torch.empty(1, 3, self.resolution, self.resolution, device="meta")
