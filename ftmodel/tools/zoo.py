"""Named models for validation, demos and the CLI: random weights, nothing downloaded.

Each entry builds an ``nn.Module`` and says how to make its inputs for a batch. Image models use
reduced resolutions and language models short sequences where noted, to keep live CPU
measurements short; the name says so (e.g. ``resnet50@112``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ftmodel.errors import UnknownNameError

__all__ = ["ZooModel", "ZOO", "get_model", "image_inputs", "lookup", "mlp", "token_inputs",
           "torchvision_model"]


@dataclass(frozen=True)
class ZooModel:
    name: str
    family: str  # "cnn" | "mobile-cnn" | "transformer" | "mlp"
    build: Callable[[], nn.Module]
    make_inputs: Callable[[int], Any]  # batch -> inputs


def torchvision_model(arch: str, **kw: Any) -> Callable[[], nn.Module]:
    """A builder of torchvision's ``arch`` with random weights, in eval mode."""
    def build() -> nn.Module:
        import torchvision
        model: nn.Module = getattr(torchvision.models, arch)(weights=None, **kw)
        return model.eval()
    return build


def image_inputs(side: int) -> Callable[[int], torch.Tensor]:
    """``batch -> `` random images of ``side`` × ``side`` pixels."""
    return lambda b: torch.randn(b, 3, side, side)  # (B, 3, H, W)


def token_inputs(seq: int, vocab: int = 1000) -> Callable[[int], dict[str, torch.Tensor]]:
    """``batch -> {"input_ids": ...}`` of ``seq`` token ids below ``vocab`` (fixed seed)."""
    def make(b: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        return {"input_ids": torch.randint(0, vocab, (b, seq), generator=g)}  # (B, S)
    return make


def _hf(kind: str, **cfg: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers
        config = getattr(transformers, f"{kind}Config")(**cfg)
        model: nn.Module = getattr(transformers, f"{kind}Model")(config)
        return model.eval()
    return build


def mlp(depth: int, width: int, d_in: int = 256, d_out: int = 10) -> nn.Sequential:
    """Linear+ReLU × depth, then a classifier."""
    layers: list[nn.Module] = []
    d = d_in
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.ReLU()]
        d = width
    layers.append(nn.Linear(d, d_out))
    return nn.Sequential(*layers).eval()


def _vit_small() -> nn.Module:
    from torchvision.models.vision_transformer import VisionTransformer
    model: nn.Module = VisionTransformer(image_size=64, patch_size=8, num_layers=4, num_heads=4,
                                         hidden_dim=256, mlp_dim=512)
    return model.eval()


ZOO: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("resnet18@112", "cnn", torchvision_model("resnet18"), image_inputs(112)),
    ZooModel("resnet50@112", "cnn", torchvision_model("resnet50"), image_inputs(112)),
    ZooModel("mobilenet_v2@112", "mobile-cnn", torchvision_model("mobilenet_v2"),
             image_inputs(112)),
    ZooModel("mobilenet_v3_small@112", "mobile-cnn", torchvision_model("mobilenet_v3_small"),
             image_inputs(112)),
    ZooModel("efficientnet_b0@112", "mobile-cnn", torchvision_model("efficientnet_b0"),
             image_inputs(112)),
    ZooModel("squeezenet1_1@112", "mobile-cnn", torchvision_model("squeezenet1_1"),
             image_inputs(112)),
    ZooModel("regnet_y_400mf@112", "cnn", torchvision_model("regnet_y_400mf"), image_inputs(112)),
    ZooModel("densenet121@64", "cnn", torchvision_model("densenet121"), image_inputs(64)),
    ZooModel("vit-small@64", "transformer", _vit_small, image_inputs(64)),
    ZooModel("bert-mini@64", "transformer",
             _hf("Bert", hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                 intermediate_size=1024, vocab_size=1000), token_inputs(64)),
    ZooModel("gpt2-small4@64", "transformer",
             _hf("GPT2", n_embd=384, n_layer=4, n_head=6, vocab_size=1000, n_positions=128,
                 bos_token_id=0, eos_token_id=0),
             token_inputs(64)),
    ZooModel("mlp-deep-narrow", "mlp", lambda: mlp(32, 128), lambda b: torch.randn(b, 256)),
    ZooModel("mlp-wide-shallow", "mlp", lambda: mlp(2, 4096), lambda b: torch.randn(b, 256)),
    # full-size references (not in the CPU validation: too slow to measure live at batch 32)
    ZooModel("resnet50", "cnn", torchvision_model("resnet50"), image_inputs(224)),
    ZooModel("bert-base", "transformer", _hf("Bert"), token_inputs(128, 30522)),
]}
VALIDATION_SET = tuple(n for n in ZOO if n not in ("resnet50", "bert-base"))


def lookup(models: dict[str, ZooModel], kind: str, name: str, hint: str) -> ZooModel:
    """The entry of ``models`` called ``name`` (case-insensitive), or an error naming ``kind``,
    the valid names and ``hint``."""
    key = name.strip().lower()
    for n, m in models.items():
        if n.lower() == key:
            return m
    raise UnknownNameError(kind, name, list(models), hint)


def get_model(name: str) -> ZooModel:
    return lookup(ZOO, "model", name, "Pass an nn.Module from Python for models outside the zoo.")
