"""Real weights and inputs for a candidate built on the meta device, for the frameworks that
run the model to count it (ONNX Runtime's export, TorchScript's freezing, inductor's compile):
:class:`ftmodel.oracle.CostOracle` prices such candidates from a materialised copy."""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from ftmodel.tracing.inputs import InputSpec

__all__ = ["materialized", "real_inputs"]


def materialized(model: nn.Module) -> nn.Module:
    """``model`` itself, or a copy with real, initialised weights if any are on meta."""
    tensors = list(model.parameters()) + list(model.buffers())
    if not any(t.device.type == "meta" for t in tensors):
        return model
    real = copy.deepcopy(model).to_empty(device="cpu")
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(0)
        for t in list(real.parameters()) + list(real.buffers()):
            if t.is_floating_point():
                t.normal_(0.0, 0.02)
            else:
                t.zero_()
        for m in real.modules():
            reset = getattr(m, "reset_parameters", None)
            if callable(reset):
                reset()
    return real.eval()


def real_inputs(inputs: InputSpec) -> InputSpec:
    """``inputs`` with meta tensors replaced by zeros (frameworks that run the model)."""
    def conv(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.device.type == "meta":
            return torch.zeros(v.shape, dtype=v.dtype)
        if isinstance(v, (tuple, list)):
            return type(v)(conv(x) for x in v)
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        return v
    if inputs is None or callable(inputs) and not isinstance(inputs, torch.Tensor):
        return inputs
    return conv(inputs)  # type: ignore[no-any-return]
