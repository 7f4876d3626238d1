"""Model inputs for a given batch size: the user's (resized along dim 0) or an unambiguous default.

``inputs`` may be a tensor, a tuple/list of positional arguments, a dict of keyword arguments,
or a callable ``batch -> inputs``. Dim 0 of every tensor is the batch and is resized to the
requested batch (rows are repeated cyclically, so real values such as token ids stay valid).
Defaults exist only where they are unambiguous: Hugging Face models get ``input_ids`` of length
128 and torchvision classifiers get 3×224×224 images. Anything else asks for ``inputs=``.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

import torch
from torch import nn

from ftmodel.errors import InvalidArgumentError
from ftmodel.tracing.decode import DecodeInputs

__all__ = ["ModelInputs", "InputSpec", "as_inputs", "resolve_inputs", "check_batch",
           "default_inputs"]

InputSpec = Union[torch.Tensor, tuple[Any, ...], list[Any], Mapping[str, Any],
                  Callable[[int], Any], DecodeInputs, None]

DEFAULT_SEQ_LEN = 128
DEFAULT_IMAGE = (3, 224, 224)


@dataclass
class ModelInputs:
    """Positional and keyword arguments of one forward call."""

    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def tensors(self) -> list[torch.Tensor]:
        flat = list(self.args) + list(self.kwargs.values())
        return [t for t in flat if isinstance(t, torch.Tensor)]

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> ModelInputs:
        def conv(v: Any) -> Any:
            return fn(v) if isinstance(v, torch.Tensor) else v
        return ModelInputs(tuple(conv(a) for a in self.args),
                           {k: conv(v) for k, v in self.kwargs.items()})


def check_batch(batch: object) -> int:
    """Return ``batch`` as an int ≥ 1, or raise naming the bad value."""
    if isinstance(batch, bool) or not isinstance(batch, numbers.Integral) or batch < 1:
        raise InvalidArgumentError(
            f"batch must be an integer >= 1 (or a list of them), got {batch!r}; "
            "pass e.g. batch=1 or batch=[1, 2, 4, 8]."
        )
    return int(batch)


def _is_hf_model(model: nn.Module) -> bool:
    return hasattr(model, "config") and hasattr(model, "main_input_name") and \
        type(model).__module__.startswith("transformers.")


def _is_torchvision_classifier(model: nn.Module) -> bool:
    mod = type(model).__module__
    return mod.startswith("torchvision.models") and not any(
        part in mod for part in ("detection", "segmentation", "video", "optical_flow", "quantization")
    )


def default_inputs(model: nn.Module, batch: int) -> ModelInputs:
    """The unambiguous default inputs of ``model`` at ``batch``, or a clear error."""
    if _is_hf_model(model):
        name = str(getattr(model, "main_input_name", "input_ids"))
        if name != "input_ids":
            raise InvalidArgumentError(
                f"cannot infer inputs for {type(model).__name__} (main input {name!r}); "
                "pass inputs=, e.g. inputs={'pixel_values': torch.randn(1, 3, 224, 224)}."
            )
        ids = torch.zeros(batch, DEFAULT_SEQ_LEN, dtype=torch.long)  # (B, S)
        return ModelInputs(kwargs={"input_ids": ids})
    if _is_torchvision_classifier(model):
        return ModelInputs(args=(torch.zeros(batch, *DEFAULT_IMAGE),))  # (B, 3, 224, 224)
    raise InvalidArgumentError(
        f"cannot infer inputs for model {type(model).__name__}: defaults exist only for "
        "Hugging Face models (token ids of length 128) and torchvision classifiers "
        "(3x224x224 images). Pass inputs=, e.g. inputs=torch.randn(1, 64) or "
        "inputs=lambda batch: torch.randn(batch, 64)."
    )


def resize_batch(t: torch.Tensor, batch: int) -> torch.Tensor:
    """``t`` with dim 0 resized to ``batch`` by cyclic repetition of its rows."""
    if t.dim() == 0:
        return t
    if t.shape[0] == batch:
        return t
    if t.device.type == "meta" or t.shape[0] == 0:
        return torch.empty((batch, *t.shape[1:]), dtype=t.dtype, device=t.device)
    idx = torch.arange(batch, device=t.device) % t.shape[0]
    return t.index_select(0, idx).contiguous()


def as_inputs(value: Any) -> ModelInputs:
    if isinstance(value, ModelInputs):
        return value
    if isinstance(value, torch.Tensor):
        return ModelInputs(args=(value,))
    if isinstance(value, (tuple, list)):
        return ModelInputs(args=tuple(value))
    if isinstance(value, Mapping):
        return ModelInputs(kwargs=dict(value))
    raise InvalidArgumentError(
        f"inputs must be a tensor, a tuple/list, a dict or a callable batch -> inputs; "
        f"got {type(value).__name__}."
    )


def resolve_inputs(model: nn.Module, inputs: InputSpec, batch: int | None,
                   dtype: torch.dtype | None = None) -> ModelInputs:
    """The forward arguments for ``batch`` (None keeps the batch the inputs already have).
    ``dtype``: the floating dtype the model runs in, for inputs made to match it (a decode
    step's KV cache, :mod:`ftmodel.tracing.decode`)."""
    if batch is not None:
        check_batch(batch)
    if inputs is None:
        return default_inputs(model, batch or 1)
    if isinstance(inputs, DecodeInputs):
        return as_inputs(inputs.for_model(model, batch or 1, dtype))
    if callable(inputs) and not isinstance(inputs, (torch.Tensor, nn.Module)):
        return as_inputs(inputs(batch or 1))
    resolved = as_inputs(inputs)
    if not resolved.tensors():
        raise InvalidArgumentError("inputs contain no tensor; dim 0 of a tensor must be the batch.")
    if batch is None:
        return resolved
    return resolved.map(lambda t: resize_batch(t, batch))


def batch_of(inputs: ModelInputs) -> int:
    """Dim 0 of the first tensor argument."""
    ts = inputs.tensors()
    return int(ts[0].shape[0]) if ts and ts[0].dim() > 0 else 1
