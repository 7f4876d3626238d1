"""Structural identity of modules, and the plan a cached trace is assembled from.

Used by :class:`ftmodel.oracle.CostOracle`; see its module docstring for what invalidates the
cache.

Structure key
-------------
:func:`structure_key` is a hashable summary of everything a module's fake-tensor trace can
depend on: its class (the class object, so a redefined class is a different key), its own
attributes other than ``nn.Module``'s bookkeeping (hyper-parameters such as ``kernel_size``,
``groups``, ``use_residual``, ``eps``, ``inplace``), the names, shapes and dtypes of its
parameters and buffers (not their values or devices: fake tracing never reads values), and its
children's keys in order. Attribute values must be plain data (numbers, strings, None, tuples,
lists, dicts, sets, dtypes, devices, enums), functions or classes (by identity), or tensors
(by shape and dtype); any other object, a per-instance ``forward``, or forward hooks on the
module make it :class:`Uncacheable` (it is then traced every time).

The plan of a model (:func:`plan_of`: its segments, in call order, and their keys) is what
:class:`ftmodel.oracle.trace_cache.TraceCache` assembles a trace from.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from ftmodel.errors import FtmodelError
from ftmodel.tracing.dispatch import to_meta
from ftmodel.tracing.inputs import InputSpec, ModelInputs, as_inputs, resolve_inputs
from ftmodel.oracle.segment_trace import TensorMeta

__all__ = [
    "Plan",
    "TensorMeta",
    "KeyNumbers",
    "Uncacheable",
    "input_meta",
    "plan_of",
    "structure_key",
]

_BASE_ATTRS = frozenset(nn.Module().__dict__)
_EXACT = frozenset({int, float, bool, str, bytes, type(None), torch.dtype, torch.device,
                    torch.Size, torch.memory_format, torch.layout})
_BY_IDENTITY = (enum.Enum, type, types.FunctionType, types.BuiltinFunctionType,
                types.MethodType)
_LIST, _SET, _DICT, _TENSOR = object(), object(), object(), object()  # markers: no collisions
_all_exact = _EXACT.issuperset  # _all_exact(map(type, values)): every value's type is exact


class Uncacheable(FtmodelError):
    """A module whose trace cannot be keyed by structure (the message says why)."""


def _value_key(value: Any, attr: str) -> Hashable:
    t = type(value)
    if t in _EXACT:
        return value  # type: ignore[no-any-return]
    if t is tuple:
        if _all_exact(map(type, value)):
            return value  # type: ignore[no-any-return]
        return tuple(_value_key(v, attr) for v in value)
    if isinstance(value, _BY_IDENTITY):
        return value
    if isinstance(value, torch.Tensor):
        return (_TENSOR, tuple(value.shape), value.dtype)
    if isinstance(value, (tuple, list)):
        return (_LIST, t, tuple(_value_key(v, attr) for v in value))
    if isinstance(value, (set, frozenset)):
        return (_SET, frozenset(_value_key(v, attr) for v in value))
    if isinstance(value, dict):
        return (_DICT, tuple((_value_key(k, attr), _value_key(v, attr))
                             for k, v in value.items()))
    raise Uncacheable(f"attribute {attr!r} holds a {t.__name__}, which has no structural key")


class _Walk:
    """What a key walk collects besides the key: ids of modules and tensors (to detect sharing
    between segments) and the device of the first parameter not on the meta device."""

    __slots__ = ("base", "device", "ids", "intern")

    def __init__(self, intern: dict[Hashable, int] | None = None) -> None:
        self.ids: set[int] = set()
        self.device: torch.device | None = None
        # with ``intern``, equal keys become one small int (their number in ``intern``), so a
        # parent's key holds its children's numbers: hashing and comparing it never walks
        # into the children again
        self.intern = intern
        self.base = getattr(intern, "base", 0)  # numbers handed out before a clear

    def canon(self, key: Hashable) -> Hashable:
        intern = self.intern
        return key if intern is None else intern.setdefault(key, self.base + len(intern))


_OWN_ATTRS: dict[type, tuple[int, tuple[str, ...]]] = {}  # class -> (len(__dict__), names)


def _own_key(module: nn.Module, walk: _Walk) -> Hashable:
    """The module's class, own attributes, parameter and buffer shapes (children excluded).

    Own attributes are those not in a bare ``nn.Module``'s ``__dict__``; their names are cached
    per class and reused while an instance's ``__dict__`` has the cached size and names.
    """
    d = module.__dict__
    if "forward" in d:
        raise Uncacheable("has a per-instance forward")
    if d["_forward_hooks"] or d["_forward_pre_hooks"]:
        raise Uncacheable("has forward hooks")
    cls = type(module)
    hit = _OWN_ATTRS.get(cls)
    try:
        if hit is None or hit[0] != len(d):
            raise KeyError
        names = hit[1]
        values = tuple(map(d.__getitem__, names))
    except KeyError:
        names = tuple(k for k in d if k not in _BASE_ATTRS)
        _OWN_ATTRS[cls] = (len(d), names)
        values = tuple(map(d.__getitem__, names))
    if not _all_exact(map(type, values)):  # tuples are exact only if their items are
        values = tuple([v if type(v) in _EXACT or type(v) is tuple and _all_exact(map(type, v))
                        else _value_key(v, k) for k, v in zip(names, values)])
    ids = walk.ids
    ids.add(id(module))
    params, buffers = d["_parameters"], d["_buffers"]
    if not params and not buffers:  # e.g. activations: the key the loops below would make
        return walk.canon((cls, names, values, None, None))
    key: list[Any] = [cls, names, values, None]  # None separates attributes, params, buffers
    for is_param, group in ((True, params), (False, buffers)):
        for k, t in group.items():
            if t is None:
                key += (k, None)
                continue
            key += (k, t.shape, t.dtype)
            ids.add(id(t))
            if is_param and walk.device is None and not t.is_meta:
                walk.device = t.device
        if is_param:
            key.append(None)
    return walk.canon(tuple(key))


def _key(module: nn.Module, walk: _Walk, root: bool = False) -> Hashable:
    try:
        own = _own_key(module, walk)
    except Uncacheable as err:
        raise _NoKey(str(err), []) from None
    if not module._modules and not root:
        return own  # a leaf: its own key (never equal to a node's, a pair)
    children: list[Any] = []
    for k, c in module._modules.items():
        children.append(k)
        if c is None:
            children.append(None)
            continue
        try:
            children.append(_key(c, walk))
        except _NoKey as err:
            err.path.insert(0, k)
            raise
    node = (own, tuple(children))
    return node if root else walk.canon(node)  # roots (whole candidates) are not interned


class _NoKey(Exception):
    def __init__(self, reason: str, path: list[str]) -> None:
        super().__init__(reason)
        self.reason, self.path = reason, path


def structure_key(module: nn.Module) -> Hashable:
    """The hashable structural identity of ``module`` (see the module docstring); raises
    :class:`Uncacheable` naming the submodule and attribute that has none."""
    return _checked_key(module, _Walk(), "")


def _checked_key(module: nn.Module, walk: _Walk, path: str, root: bool = False) -> Hashable:
    try:
        return _key(module, walk, root)
    except _NoKey as err:
        where = ".".join(([path] if path else []) + err.path) or type(module).__name__
        raise Uncacheable(f"module {where!r} {err.reason}") from None


def input_meta(model: nn.Module, inputs: InputSpec, batch: int, dtype: torch.dtype,
               param_device: torch.device | None) -> tuple[ModelInputs, tuple[TensorMeta, ...]]:
    """The forward arguments the tracer would build for ``model`` at ``batch`` (as meta or fake
    tensors, no data) and their metadata as the tracer makes them: floating-point dtypes cast to
    ``dtype``, every tensor on the tracer's target device (the first input not on the meta
    device, else ``param_device``, the model's first such parameter, else the CPU)."""
    if inputs is None or (callable(inputs) and not isinstance(inputs, torch.Tensor)):
        with FakeTensorMode(allow_non_fake_inputs=True):
            resolved = resolve_inputs(model, inputs, batch)
            given = resolved.tensors()
    else:
        resolved = resolve_inputs(model, to_meta(inputs, {}), batch)
        given = as_inputs(inputs).tensors()
    device = next((t.device for t in given if t.device.type != "meta"),
                  param_device or torch.device("cpu"))
    return resolved, tuple(TensorMeta(tuple(t.shape), tuple(t.stride()),
                                      dtype if t.is_floating_point() else t.dtype, device)
                           for t in resolved.tensors())


@dataclass(frozen=True)
class Plan:
    """A model opened into Sequential containers and segments, in call order.

    ``steps``: ``(path, None)`` for a container call, ``(path, module)`` for a segment;
    ``keys``: the segments' structure keys (None where uncacheable); ``key``: the whole model's
    structure key (None where uncacheable, with ``why``); ``chain``: whether the trace can be
    assembled; ``device``: the device of the model's first parameter not on the meta device.
    """

    steps: tuple[tuple[str, nn.Module | None], ...]
    keys: tuple[Hashable | None, ...]
    key: Hashable | None
    chain: bool
    device: torch.device | None
    why: str = ""


def _is_chain(m: nn.Module) -> bool:
    d = m.__dict__
    return (type(m).forward is nn.Sequential.forward and type(m).__call__ is nn.Module.__call__
            and "forward" not in d and not d["_forward_hooks"] and not d["_forward_pre_hooks"])


def plan_of(model: nn.Module, intern: dict[Hashable, int] | None = None) -> Plan:
    """Open ``model`` into segments and compute the structure keys (see the module doc).

    ``intern`` (e.g. :attr:`ftmodel.oracle.trace_cache.TraceCache.intern`) numbers the distinct keys, so the plan's keys
    are small ints, equal for equal structures and comparable only with keys made with the same
    ``intern``; it grows with the number of distinct module structures seen."""
    steps: list[tuple[str, nn.Module | None]] = []
    keys: list[Hashable | None] = []
    walk = _Walk(intern)
    why: list[str] = []
    shared = False

    def visit(m: nn.Module, path: str) -> Hashable | None:
        nonlocal shared
        if _is_chain(m):  # a container: its call is counted, its children are opened
            if path:
                steps.append((path, None))
            own = _own_key(m, walk)  # a chain has no hooks or own forward: never raises
            sub = tuple((n, visit(c, f"{path}.{n}" if path else n))
                        for n, c in m._modules.items() if c is not None)
            if any(k is None for _, k in sub):
                return None
            return walk.canon((own, sub)) if path else (own, sub)
        seg = _Walk(intern)
        key: Hashable | None
        try:
            key = _checked_key(m, seg, path)
        except Uncacheable as err:
            why.append(str(err))
            key = None
            seg.ids = {id(x) for x in m.modules()} | {id(t) for t in m.parameters()} | {
                id(t) for t in m.buffers()}
            seg.device = next((t.device for t in m.parameters() if t.device.type != "meta"),
                              None)
        shared = shared or not seg.ids.isdisjoint(walk.ids)
        walk.ids |= seg.ids
        walk.device = walk.device or seg.device
        steps.append((path, m))
        keys.append(key)
        return key

    if not _is_chain(model):
        try:
            whole: Hashable | None = _checked_key(model, walk, "", root=True)
        except Uncacheable as err:
            whole, why = None, [str(err)]
            walk.device = next((t.device for t in model.parameters()
                                if t.device.type != "meta"), None)
        return Plan((), (), whole, False, walk.device, "; ".join(why))
    whole = visit(model, "")
    return Plan(tuple(steps), tuple(keys), whole, not shared, walk.device, "; ".join(why))


class KeyNumbers(dict):  # type: ignore[type-arg]
    """A structure key -> number table (see :func:`plan_of`) that never hands out a number
    twice: :meth:`clear` starts the next numbers after the last one, so a key made before the
    clear (e.g. in another oracle's program cache) never equals one made after it."""

    base = 0

    def clear(self) -> None:
        self.base += len(self)
        super().clear()
