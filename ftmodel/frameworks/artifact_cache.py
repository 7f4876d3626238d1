"""A small LRU of the artifacts a framework builds from a model (an ONNX Runtime session, a
frozen TorchScript module, inductor's compiled graphs or generated code), keyed by the model's
identity and, for what does not depend on weights, by its structure (:func:`structure_key`).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch
from torch import nn

__all__ = ["ArtifactCache", "structure_key"]

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    ref: weakref.ref[nn.Module]
    value: T


# buffers up to this many elements enter a model's structure key by value (masks, position
# ids, index tables: constants an exporter may fold); larger ones, and weights, by shape only
_KEYED_BUFFER_NUMEL = 65536
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


def _token(value: Any, depth: int = 0) -> str:
    """A stable text for a module attribute that may steer its forward, or a per-object one
    (``id``) where none is known (or reading it fails), so that such a module never shares a
    key."""
    try:
        return _stable_token(value, depth)
    except Exception:
        return f"id:{id(value)}"


def _stable_token(value: Any, depth: int) -> str:
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, torch.Tensor):
        # a subclass (a fake tensor a trace left in a module's cache) by shape alone
        plain = type(value) in (torch.Tensor, nn.Parameter)
        small = (plain and value.device.type != "meta"
                 and value.numel() <= _KEYED_BUFFER_NUMEL)
        digest = hashlib.sha256(value.detach().cpu().contiguous().view(-1).view(torch.uint8)
                                .numpy().tobytes()).hexdigest() if small else ""
        return f"{type(value).__name__}{tuple(value.shape)}{value.dtype}{digest}"
    if depth < 3 and isinstance(value, (tuple, list, frozenset, set)):
        items = sorted(_token(v, depth + 1) for v in value) if isinstance(
            value, (set, frozenset)) else [_token(v, depth + 1) for v in value]
        return f"{type(value).__name__}({','.join(items)})"
    if depth < 3 and isinstance(value, dict):
        return "{" + ",".join(f"{k!r}:{_token(v, depth + 1)}" for k, v in value.items()) + "}"
    to_json = getattr(value, "to_json_string", None)  # a Hugging Face config
    if callable(to_json):
        return str(to_json())
    if isinstance(value, functools.partial):
        return f"partial({_token(value.func, depth + 1)},{_token(value.args, depth + 1)}," \
               f"{_token(value.keywords, depth + 1)})"
    code = getattr(value, "__code__", None)
    if code is not None:  # a Python function or lambda: its code and what it closed over
        cells = tuple(c.cell_contents for c in (getattr(value, "__closure__", None) or ()))
        defaults = getattr(value, "__defaults__", None) or ()
        consts = tuple(c for c in code.co_consts if isinstance(c, _PLAIN))
        return f"fn:{code.co_filename}:{code.co_firstlineno}:{code.co_code.hex()}:" \
               f"{consts!r}:{code.co_names}:{_token(cells, depth + 1)}:" \
               f"{_token(defaults, depth + 1)}"
    qualname = getattr(value, "__qualname__", None)
    if qualname is not None and callable(value):  # a builtin or a class
        return f"{getattr(value, '__module__', '')}.{qualname}"
    return f"id:{id(value)}"


def structure_key(model: nn.Module) -> str:
    """A digest of what a framework's lowering of ``model`` depends on besides its inputs: every
    submodule's name, class, mode and public attributes (numbers, strings, functions by their
    code, a Hugging Face config by its JSON; an object of unknown kind by its identity, so that
    module shares nothing), every parameter's and buffer's name, shape, dtype and device type,
    and small buffers' values. Weights' values do not enter: two instances of one architecture
    share a key (a model whose Python control flow branches on its weights' values would be
    lowered once for both)."""
    h = hashlib.sha256()
    for name, m in model.named_modules():
        cls = type(m)
        attrs = ",".join(f"{k}={_token(v)}" for k, v in sorted(vars(m).items())
                         if not k.startswith("_"))
        h.update(f"m|{name}|{cls.__module__}.{cls.__qualname__}|{m.extra_repr()}|{attrs}\n"
                 .encode())
    tensors = itertools.chain((("p", n, t) for n, t in model.named_parameters()),
                              (("b", n, t) for n, t in model.named_buffers()))
    for kind, name, tensor in tensors:
        h.update(f"{kind}|{name}|{tuple(tensor.shape)}|{tensor.dtype}|{tensor.device.type}\n"
                 .encode())
        if kind == "b":
            h.update(_token(tensor).encode())
    return h.hexdigest()


class ArtifactCache(Generic[T]):
    """A small LRU of built artifacts keyed by (model identity, batch, dtype, device, ...).

    Identity is ``id(model)`` checked against a weak reference, so a new model that reuses a
    freed id misses. Weights changed in place after a build are not detected. With
    ``by_structure``, a miss on identity may be served by an artifact built for another model
    of the same :func:`structure_key` (a second instance of one architecture, a NAS candidate
    seen before): only for what does not depend on weights (a lowered Program), never for an
    artifact that will run.
    """

    def __init__(self, maxsize: int = 4) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[tuple[Any, ...], _Entry[T]] = OrderedDict()
        self._shared: OrderedDict[tuple[Any, ...], T] = OrderedDict()

    def get(self, model: nn.Module, key: tuple[Any, ...], by_structure: bool = False
            ) -> T | None:
        """The artifact built for ``model`` (or, with ``by_structure``, for a model of its
        structure) under ``key``; None if there is none."""
        full = (id(model), *key)
        hit = self._data.get(full)
        if hit is not None and hit.ref() is model:
            self._data.move_to_end(full)
            return hit.value
        shared = (structure_key(model), *key)
        if by_structure and shared in self._shared:
            self._shared.move_to_end(shared)
            return self._shared[shared]
        return None

    def get_or_build(self, model: nn.Module, key: tuple[Any, ...], build: Callable[[], T],
                     by_structure: bool = False) -> T:
        hit = self.get(model, key, by_structure)
        if hit is not None:
            return hit
        full, shared = (id(model), *key), (structure_key(model), *key)
        value = build()
        self._data[full] = _Entry(weakref.ref(model), value)
        self._data.move_to_end(full)
        self._shared[shared] = value
        for lru in (self._data, self._shared):
            while len(lru) > self.maxsize:
                lru.popitem(last=False)
        return value

    def clear(self) -> None:
        self._data.clear()
        self._shared.clear()

    def __len__(self) -> int:
        return len(self._data)
