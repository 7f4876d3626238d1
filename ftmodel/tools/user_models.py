"""The models the command line predicts, named by a spec string; random weights, nothing downloaded.

A spec is one of:

``<zoo name>``
    a built-in model (:mod:`ftmodel.tools.zoo`), e.g. ``resnet18@112``, ``bert-mini@64``.
``torchvision:<arch>[:key=value,...]``
    ``torchvision.models.get_model(arch, weights=None, **options)`` (and no backbone weights);
    inputs 3x224x224 images (video models: 3x16x112x112 clips, larger where the model needs it).
``timm:<name>[:key=value,...]``
    ``timm.create_model(name, pretrained=False, **options)``; inputs of the model's configured
    ``input_size`` (``img_size=`` among the options sets it), else 3x224x224.
``hf:<ConfigClass>[:key=value,...]``
    a transformers configuration class (``hf:BertConfig``) or model type (``hf:bert``) built
    with those values, then ``transformers.AutoModel.from_config``: token ids of ``seq_len``
    (default 128) for text models (and the same ids as decoder inputs for encoder-decoders),
    images of the config's ``num_channels`` x ``image_size`` for vision models; any other
    input (audio) needs ``input_shape``.
``path/to/file.py:factory``, ``package.module:factory``
    ``factory()`` is called without arguments and returns an ``nn.Module`` or a
    ``(module, inputs)`` tuple, ``inputs`` any form ``inputs=`` accepts
    (:mod:`ftmodel.tracing.inputs`). A module is imported from the current directory or
    ``PYTHONPATH``.

Options are ``key=value`` pairs separated by commas; values are read as ints, floats, booleans
(``true``/``false``), ``none``, or else strings. ``input_shape`` (``--input-shape 3x224x224``:
one sample, ftmodel adds the batch) replaces the default inputs with random floats of that shape;
``seq_len`` (``--seq-len``) the length of token ids. Every model is returned in eval mode.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from torch import nn

from ftmodel.errors import InvalidArgumentError, MissingExtraError, closest_match
from ftmodel.extras import EXTRA_OF, require
from ftmodel.tools.hf_models import hf_inputs, hf_model, is_hf
from ftmodel.tools.spec_parsing import (OptionValue, ShapeInputs, TokenInputs, check_no_weights,
                                         check_seq_len, check_shape, parse_input_shape,
                                         parse_options)
from ftmodel.tools.zoo import ZOO, lookup
from ftmodel.tracing.inputs import DEFAULT_IMAGE, InputSpec, default_inputs

__all__ = ["SPEC_FORMS", "ShapeInputs", "TokenInputs", "load_model", "parse_input_shape",
           "parse_options"]

SPEC_FORMS = ("a zoo name (e.g. resnet18@112), torchvision:<arch>, timm:<name>, "
              "hf:<ConfigClass> (these three with optional :key=value,... options, e.g. "
              "hf:BertConfig:num_hidden_layers=2), path/to/file.py:factory or "
              "package.module:factory")
_PREFIXES = ("torchvision", "timm", "hf")
_FILE_SPEC = re.compile(r"(?P<path>.+\.py)(?::(?P<factory>[^:]*))?", re.IGNORECASE)
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_VIDEO_CLIP = (3, 16, 112, 112)  # (C, T, H, W)

# ---------------------------------------------------------------- inputs of a built model
def _given_inputs(model: nn.Module, spec: str, shape: tuple[int, ...] | None,
                  seq_len: int | None) -> InputSpec:
    """The inputs ``shape`` / ``seq_len`` ask for (None when neither is given)."""
    if is_hf(model) and (shape is not None or seq_len is not None):
        return hf_inputs(model, spec, shape, seq_len)
    if shape is not None and seq_len is not None:
        raise InvalidArgumentError(
            f"model spec {spec!r}: pass --input-shape (random floats of that shape) or "
            f"--seq-len (token ids), not both")
    if shape is not None:
        return ShapeInputs(shape)
    if seq_len is None:
        return None
    embedding = next((m for m in model.modules() if isinstance(m, nn.Embedding)), None)
    if embedding is None:
        raise InvalidArgumentError(
            f"model spec {spec!r}: --seq-len makes token ids, for a model with an nn.Embedding, "
            f"and {type(model).__name__} has none; pass one sample's shape with --input-shape")
    return TokenInputs(seq_len, embedding.num_embeddings, keys=())


# ---------------------------------------------------------------- the spec forms
def _from_zoo(spec: str, shape: tuple[int, ...] | None, seq_len: int | None
              ) -> tuple[nn.Module, InputSpec]:
    zm = lookup(ZOO, "model", spec, f"A model spec is {SPEC_FORMS}.")
    try:
        model = zm.build()
    except ModuleNotFoundError as err:
        top = (err.name or "").split(".")[0]
        if top not in EXTRA_OF:
            raise
        raise MissingExtraError(top, EXTRA_OF[top], f"the zoo model {zm.name!r}") from None
    given = _given_inputs(model, spec, shape, seq_len)
    return model, zm.make_inputs if given is None else given


def _torchvision(spec: str, rest: str, shape: tuple[int, ...] | None, seq_len: int | None
                 ) -> tuple[nn.Module, InputSpec]:
    tv = require("torchvision", "the torchvision: model specs")
    arch, _, opts_text = rest.partition(":")
    arch = arch.strip()
    names = list(tv.models.list_models())
    key = {n.lower(): n for n in names}.get(arch.lower())
    if key is None:
        match = closest_match(arch, names)
        raise InvalidArgumentError(
            f"torchvision has no model {arch!r} (model spec {spec!r})"
            + (f"; did you mean 'torchvision:{match}'?" if match else ";")
            + " the names are torchvision.models.list_models(), e.g. torchvision:resnet18")
    options = parse_options(opts_text, spec)
    check_no_weights(spec, options)
    builder = tv.models.get_model_builder(key)
    kw: dict[str, Any] = {"weights": None}
    if "weights_backbone" in inspect.signature(builder).parameters:
        kw["weights_backbone"] = None  # detection/segmentation: no pretrained backbone either
    try:
        model: nn.Module = builder(**kw, **options).eval()
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(
            f"torchvision could not build {key!r} with options {options} (model spec "
            f"{spec!r}): {err}; pass only keyword arguments torchvision.models.{key} accepts"
        ) from None
    given = _given_inputs(model, spec, shape, seq_len)
    if given is not None:
        return model, given
    return model, ShapeInputs(_torchvision_shape(tv, key, options))


def _torchvision_shape(tv: Any, arch: str, options: Mapping[str, OptionValue]
                       ) -> tuple[int, ...]:
    if arch in tv.models.list_models(module=tv.models.video):
        c, t, h, w = _VIDEO_CLIP
        with contextlib.suppress(Exception):  # the weights' metadata: no download
            meta = next(iter(tv.models.get_model_weights(arch))).meta
            t = max(t, int(meta.get("min_temporal_size", t)))
            h, w = (max(a, int(b)) for a, b in zip((h, w), meta.get("min_size", (h, w))))
        return (c, t, h, w)
    side = options.get("image_size")
    if isinstance(side, int) and not isinstance(side, bool):
        return (DEFAULT_IMAGE[0], side, side)
    return DEFAULT_IMAGE


def _timm(spec: str, rest: str, shape: tuple[int, ...] | None, seq_len: int | None
          ) -> tuple[nn.Module, InputSpec]:
    timm = require("timm", "the timm: model specs")
    name, _, opts_text = rest.partition(":")
    name = name.strip()
    if not name or not timm.is_model(name):
        match = closest_match(name, timm.list_models())
        raise InvalidArgumentError(
            f"timm has no model {name!r} (model spec {spec!r})"
            + (f"; did you mean 'timm:{match}'?" if match else ";")
            + " the names are timm.list_models(), e.g. timm:resnet18")
    options = parse_options(opts_text, spec)
    check_no_weights(spec, options)
    try:
        model: nn.Module = timm.create_model(name, pretrained=False, **options).eval()
    except (TypeError, ValueError, AssertionError) as err:
        raise InvalidArgumentError(
            f"timm could not build {name!r} with options {options} (model spec {spec!r}): "
            f"{err}; pass only keyword arguments timm.create_model({name!r}) accepts") from None
    given = _given_inputs(model, spec, shape, seq_len)
    if given is not None:
        return model, given
    cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
    size = tuple(cfg.get("input_size") or DEFAULT_IMAGE)
    img = options.get("img_size")
    if isinstance(img, int) and not isinstance(img, bool):
        chans = options.get("in_chans")
        size = (chans if isinstance(chans, int) else size[0], img, img)
    return model, ShapeInputs(tuple(int(s) for s in size))


@contextlib.contextmanager
def _on_path(folder: str) -> Iterator[None]:
    """``folder`` first on ``sys.path`` for the duration (imports of the user's own modules)."""
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        yield
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)


def _factory(module: Any, dotted: str, spec: str) -> Callable[[], Any]:
    obj = module
    for part in dotted.split("."):
        if not hasattr(obj, part):
            names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
            match = closest_match(dotted, names)
            raise InvalidArgumentError(
                f"{module.__name__!r} has no {dotted!r} (model spec {spec!r})"
                + (f"; did you mean {match!r}?" if match else ";")
                + " the part after ':' names a function (or nn.Module class) that takes no "
                "arguments and returns the model")
        obj = getattr(obj, part)
    if not callable(obj):
        raise InvalidArgumentError(
            f"{dotted!r} in {module.__name__!r} is a {type(obj).__name__}, not a callable "
            f"(model spec {spec!r}); name a function that takes no arguments and returns the "
            "model")
    return obj  # type: ignore[no-any-return]


def _from_factory(result: Any, spec: str, shape: tuple[int, ...] | None, seq_len: int | None
                  ) -> tuple[nn.Module, InputSpec]:
    inputs: InputSpec = None
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], nn.Module):
        model, inputs = result
    elif isinstance(result, nn.Module):
        model = result
    else:
        raise InvalidArgumentError(
            f"the factory of model spec {spec!r} returned {type(result).__name__}; expected an "
            "nn.Module or a (module, inputs) tuple, inputs being a tensor, a tuple/list of "
            "positional arguments, a dict of keyword arguments or a callable batch -> inputs")
    model.eval()
    given = _given_inputs(model, spec, shape, seq_len)
    if given is not None:
        return model, given
    if inputs is not None:
        return model, inputs
    if is_hf(model):
        return model, hf_inputs(model, spec, None, None)
    try:
        default_inputs(model, 1)
    except InvalidArgumentError:
        raise InvalidArgumentError(
            f"the factory of model spec {spec!r} returned a {type(model).__name__} without "
            "inputs, and ftmodel cannot infer them; pass one sample's shape with --input-shape "
            "(e.g. 3x224x224 or 64), or --seq-len for token ids, or return (model, inputs) from "
            "the factory") from None
    return model, None


def _from_file(spec: str, path_text: str, factory: str | None, shape: tuple[int, ...] | None,
               seq_len: int | None) -> tuple[nn.Module, InputSpec]:
    if not factory or not _DOTTED.fullmatch(factory.strip()):
        raise InvalidArgumentError(
            f"model spec {spec!r} names a Python file but no factory; expected "
            f"{path_text}:<factory>, the name of a function in the file that takes no "
            "arguments and returns the model (or (model, inputs))")
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise InvalidArgumentError(
            f"model spec {spec!r}: no file {str(path)!r} (looked in {os.getcwd()!r} for a "
            "relative path); expected path/to/file.py:factory")
    name = "ftmodel_user_" + re.sub(r"\W", "_", path.stem)
    found = importlib.util.spec_from_file_location(name, path)
    if found is None or found.loader is None:
        raise InvalidArgumentError(f"model spec {spec!r}: cannot import {str(path)!r} as "
                                   "Python; expected path/to/file.py:factory")
    module = importlib.util.module_from_spec(found)
    with _on_path(str(path.resolve().parent)):
        sys.modules[name] = module  # dataclasses and pickling look the module up
        try:
            found.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        result = _factory(module, factory.strip(), spec)()
    return _from_factory(result, spec, shape, seq_len)


def _from_module(spec: str, shape: tuple[int, ...] | None, seq_len: int | None
                 ) -> tuple[nn.Module, InputSpec]:
    module_name, _, factory = spec.partition(":")
    if not _DOTTED.fullmatch(module_name) or not _DOTTED.fullmatch(factory):
        raise InvalidArgumentError(f"model spec {spec!r} is not understood; expected "
                                   f"{SPEC_FORMS}")
    with _on_path(os.getcwd()):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            missing = err.name or ""
            if not (module_name == missing or module_name.startswith(missing + ".")):
                raise  # the module is there but one of its own imports failed: show that
            prefix = closest_match(module_name, _PREFIXES) if "." not in module_name else None
            raise InvalidArgumentError(
                f"model spec {spec!r}: no Python module {module_name!r} (looked in the current "
                "directory and PYTHONPATH)"
                + (f"; did you mean '{prefix}:{factory}'?" if prefix else ";")
                + f" expected {SPEC_FORMS}") from None
        result = _factory(module, factory, spec)()
    return _from_factory(result, spec, shape, seq_len)


def load_model(spec: str, *, input_shape: tuple[int, ...] | None = None,
               seq_len: int | None = None) -> tuple[nn.Module, InputSpec]:
    """The model ``spec`` names (see the module docstring), in eval mode, and its inputs.

    ``input_shape``: one sample's shape (the batch is added), replacing the default inputs with
    random floats (under the main input's name for a transformers model); ``seq_len``: the
    number of token ids per sample, for text models. Bad specs raise
    :class:`~ftmodel.errors.InvalidArgumentError` (or :class:`~ftmodel.errors.UnknownNameError`
    for a zoo name), a missing library :class:`~ftmodel.errors.MissingExtraError`.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidArgumentError(f"model spec must be {SPEC_FORMS}; got {spec!r}")
    spec = spec.strip()
    shape, seq = check_shape(input_shape), check_seq_len(seq_len)
    prefix, sep, rest = spec.partition(":")
    kind = prefix.strip().lower()
    if sep and kind == "torchvision":
        return _torchvision(spec, rest, shape, seq)
    if sep and kind == "timm":
        return _timm(spec, rest, shape, seq)
    if sep and kind == "hf":
        return hf_model(spec, rest, shape, seq)
    file_spec = _FILE_SPEC.fullmatch(spec)
    if file_spec:
        return _from_file(spec, file_spec["path"], file_spec["factory"], shape, seq)
    if sep:
        return _from_module(spec, shape, seq)
    return _from_zoo(spec, shape, seq)
