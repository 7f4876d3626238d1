"""Hugging Face transformers models for the ``hf:`` model specs of
:mod:`ftmodel.tools.user_models`: a configuration class or model type built with the spec's
options, random weights, and the inputs a transformers model takes (token ids, images, or a
shape the user gives).
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Mapping
from typing import Any

from torch import nn

from ftmodel.errors import InvalidArgumentError, closest_match
from ftmodel.extras import require
from ftmodel.tools.spec_parsing import (OptionValue, ShapeInputs, TokenInputs, check_no_weights,
                                         parse_options)
from ftmodel.tracing.inputs import DEFAULT_SEQ_LEN, InputSpec

__all__ = ["hf_inputs", "hf_model", "is_hf"]


def is_hf(model: nn.Module) -> bool:
    """Whether ``model`` is a Hugging Face transformers model (its config and main input)."""
    return (type(model).__module__.startswith("transformers.") and hasattr(model, "config")
            and hasattr(model, "main_input_name"))


def hf_inputs(model: nn.Module, spec: str, shape: tuple[int, ...] | None,
              seq_len: int | None) -> InputSpec:
    """The inputs of a transformers model: token ids, images, or ``shape`` under its main
    input's name."""
    config = model.config
    name = str(model.main_input_name)
    what = f"model spec {spec!r} ({type(model).__name__})"
    if name == "input_ids":
        if shape is not None:
            raise InvalidArgumentError(
                f"{what} takes token ids: give their length with --seq-len (default "
                f"{DEFAULT_SEQ_LEN}), not --input-shape {'x'.join(map(str, shape))}")
        seq = seq_len or DEFAULT_SEQ_LEN
        limit = getattr(config, "max_position_embeddings", None)
        if isinstance(limit, int) and not isinstance(limit, bool) and seq > limit:
            raise InvalidArgumentError(
                f"{what}: {seq} tokens exceed the model's max_position_embeddings ({limit}); "
                f"pass --seq-len {limit} or less (or, in an hf: spec, a larger "
                "max_position_embeddings)")
        vocab = getattr(config, "vocab_size", None)
        keys = ("input_ids", "decoder_input_ids") if getattr(config, "is_encoder_decoder",
                                                             False) else ("input_ids",)
        return TokenInputs(seq, vocab if isinstance(vocab, int) and vocab > 0 else 1000, keys)
    if seq_len is not None:
        raise InvalidArgumentError(
            f"{what} takes {name!r}, not token ids: give one sample's shape with --input-shape "
            f"instead of --seq-len")
    if shape is not None:
        return ShapeInputs(shape, name)
    size, channels = getattr(config, "image_size", None), getattr(config, "num_channels", None)
    if name == "pixel_values" and isinstance(channels, int):
        hw = (size, size) if isinstance(size, int) else tuple(size or ())
        if len(hw) == 2 and all(isinstance(s, int) for s in hw):
            return ShapeInputs((channels, *hw), name)
    raise InvalidArgumentError(
        f"{what} takes {name!r}, whose shape ftmodel cannot infer from its config; pass one "
        f"sample's shape with --input-shape, e.g. --input-shape 16000 for a second of 16 kHz "
        f"audio or 3x224x224 for an image")


_HF_MODEL_CLASS = re.compile(r"(.+?)(?:PreTrainedModel|LMHeadModel|Model|For[A-Z]\w*)")


def _hf_config_class(tf: Any, name: str, spec: str) -> Any:
    base = tf.PretrainedConfig
    found: Any = None
    if name.isidentifier():
        with contextlib.suppress(Exception):  # a lazy import of another backend may fail
            found = getattr(tf, name, None)
    if isinstance(found, type) and issubclass(found, base):
        return found
    mapping = tf.CONFIG_MAPPING
    if name.lower() in mapping:
        return mapping[name.lower()]
    m = _HF_MODEL_CLASS.fullmatch(name)
    suggestion = f"{m.group(1)}Config" if m and hasattr(tf, f"{m.group(1)}Config") else None
    if suggestion is None:
        suggestion = closest_match(name, [n for n in dir(tf) if n.endswith("Config")]
                                   + list(mapping.keys()))
    raise InvalidArgumentError(
        f"transformers has no configuration class or model type {name!r} (model spec "
        f"{spec!r})" + (f"; did you mean 'hf:{suggestion}'?" if suggestion else ";")
        + " expected hf:<ConfigClass>[:key=value,...], e.g. hf:BertConfig:num_hidden_layers=2"
        " or hf:bert (a model type); ftmodel builds the base model with AutoModel.from_config")


def _check_config_keys(cls: Any, options: Mapping[str, OptionValue], spec: str) -> None:
    try:
        default = cls()
    except Exception:  # a config that needs arguments: leave the names to transformers
        return
    params = set(inspect.signature(cls.__init__).parameters)
    for key in options:
        if key in params or hasattr(default, key) or hasattr(default, f"_{key}"):
            continue
        known = list(default.to_dict()) + list(getattr(default, "attribute_map", {}))
        match = closest_match(key, known)
        raise InvalidArgumentError(
            f"{cls.__name__} has no setting {key!r} (model spec {spec!r})"
            + (f"; did you mean {match!r}?" if match else ";")
            + f" its settings are the keyword arguments of transformers.{cls.__name__}")


def hf_model(spec: str, rest: str, shape: tuple[int, ...] | None, seq_len: int | None
             ) -> tuple[nn.Module, InputSpec]:
    """The model of an ``hf:<ConfigClass>[:key=value,...]`` spec (``rest``: what follows
    ``hf:``), random weights, and its inputs."""
    tf = require("transformers", "the hf: model specs")
    name, _, opts_text = rest.partition(":")
    cls = _hf_config_class(tf, name.strip(), spec)
    options = parse_options(opts_text, spec)
    check_no_weights(spec, options)
    _check_config_keys(cls, options, spec)
    try:
        config = cls(**options)
        model: nn.Module = tf.AutoModel.from_config(config).eval()
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise InvalidArgumentError(
            f"transformers could not build a model from {cls.__name__} with options {options} "
            f"(model spec {spec!r}): {err}; check the values (e.g. hidden_size a multiple of "
            "num_attention_heads)") from None
    return model, hf_inputs(model, spec, shape, seq_len)
