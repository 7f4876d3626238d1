"""Parsing the command line's model options, and the inputs a spec's model is given.

``parse_input_shape("3x224x224")`` and ``parse_options("key=value,...")`` read the text of
``--input-shape`` and of a spec's options; :class:`ShapeInputs` and :class:`TokenInputs` are the
``batch -> inputs`` callables :mod:`ftmodel.tools.user_models` hands to the predictor.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ftmodel.errors import InvalidArgumentError
from ftmodel.tools.zoo import token_inputs

__all__ = ["NO_WEIGHTS", "OptionValue", "ShapeInputs", "TokenInputs", "check_no_weights",
           "check_seq_len", "check_shape", "parse_input_shape", "parse_options"]

OptionValue = int | float | bool | str | None


# ---------------------------------------------------------------- inputs
@dataclass(frozen=True)
class ShapeInputs:
    """``batch -> `` random floats of shape ``(batch, *shape)``, or ``{key: them}``."""

    shape: tuple[int, ...]
    key: str | None = None

    def __call__(self, batch: int) -> torch.Tensor | dict[str, torch.Tensor]:
        x = torch.randn(batch, *self.shape)  # (B, *shape)
        return x if self.key is None else {self.key: x}


@dataclass(frozen=True)
class TokenInputs:
    """``batch -> `` token ids of shape ``(batch, seq_len)`` below ``vocab`` (fixed seed): the
    same ids under each of ``keys`` (keyword arguments), or a bare tensor when ``keys`` is
    empty (one positional argument)."""

    seq_len: int
    vocab: int
    keys: tuple[str, ...] = ("input_ids",)

    def __call__(self, batch: int) -> torch.Tensor | dict[str, torch.Tensor]:
        ids = token_inputs(self.seq_len, self.vocab)(batch)["input_ids"]  # (B, S)
        return {k: ids for k in self.keys} if self.keys else ids


# ---------------------------------------------------------------- parsing
def parse_input_shape(text: str) -> tuple[int, ...]:
    """``"3x224x224"`` -> ``(3, 224, 224)``: one sample's shape, without the batch dimension
    (``x``, ``×`` or ``,`` between the sizes)."""
    parts = [p.strip() for p in re.split(r"[x×,]", str(text).strip().lower())]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not shape or any(s < 1 for s in shape):
        raise InvalidArgumentError(
            f"--input-shape must be one sample's shape as positive integers joined by 'x', "
            f"e.g. 3x224x224 for an image or 16000 for audio (ftmodel adds the batch "
            f"dimension), got {text!r}")
    return shape


def _option_value(text: str) -> OptionValue:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    with contextlib.suppress(ValueError):
        return int(text)
    with contextlib.suppress(ValueError):
        return float(text)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def parse_options(text: str, spec: str = "") -> dict[str, OptionValue]:
    """``"num_hidden_layers=2,hidden_act=gelu"`` -> ``{"num_hidden_layers": 2, "hidden_act":
    "gelu"}``: ints, floats, booleans (true/false), none, else strings."""
    out: dict[str, OptionValue] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise InvalidArgumentError(
                f"model spec {spec or text!r}: {item!r} is not a key=value option; options are "
                "key=value pairs separated by commas after the name, e.g. "
                "hf:BertConfig:num_hidden_layers=2,hidden_size=128")
        out[key] = _option_value(value.strip())
    return out


def check_shape(shape: Any) -> tuple[int, ...] | None:
    if shape is None:
        return None
    if (not isinstance(shape, (tuple, list)) or not shape
            or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape)):
        raise InvalidArgumentError(
            f"input_shape must be one sample's shape as a tuple of positive integers, e.g. "
            f"(3, 224, 224) (ftmodel adds the batch dimension), got {shape!r}")
    return tuple(shape)


def check_seq_len(seq_len: Any) -> int | None:
    if seq_len is None:
        return None
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise InvalidArgumentError(f"--seq-len must be an integer >= 1 (the number of tokens "
                                   f"per sample), got {seq_len!r}")
    return seq_len


# options that would load or download pretrained weights
NO_WEIGHTS = ("weights", "weights_backbone", "pretrained", "pretrained_cfg",
              "pretrained_cfg_overlay", "checkpoint_path")


def check_no_weights(spec: str, options: Mapping[str, OptionValue]) -> None:
    """Refuses options that would load pretrained weights (:data:`NO_WEIGHTS`)."""
    bad = [k for k in options if k in NO_WEIGHTS]
    if bad:
        raise InvalidArgumentError(
            f"model spec {spec!r}: option(s) {', '.join(bad)} not allowed: ftmodel builds "
            "models with random weights (latency does not depend on them) and downloads "
            "nothing; drop them")
