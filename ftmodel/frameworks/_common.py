"""Helpers shared by the lowerings that build a framework's own artifact from the model.

* real inputs at a batch, cast to a dtype; eval mode under ``no_grad``;
* :class:`PositionalModule`, which gives exporters a forward of positional tensors only (the
  TorchScript-based exporters fill missing arguments with defaults positionally, which clashes
  with keyword-only models such as Hugging Face ones) and returns a flat tuple of tensors;
* :func:`module_path_from_scope`, which turns an exporter scope ("/layer1/layer1.0/conv1/Conv",
  "__module.layer1/__module.layer1.0.conv1") into a module path of the model;
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import logging
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import nn

from ftmodel.errors import InvalidArgumentError
from ftmodel.program import Kernel
from ftmodel.tracing.inputs import InputSpec, ModelInputs, resolve_inputs
from ftmodel.tracing.records import Trace

__all__ = [
    "TORCH_DTYPES",
    "PositionalModule",
    "eval_no_grad",
    "input_signature",
    "make_kernel",
    "model_in_dtype",
    "module_names",
    "module_path_from_scope",
    "real_inputs",
    "trace_dtype",
]

TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
                "bf16": torch.bfloat16}
_DTYPE_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}

# loggers of libraries whose models or exporters ftmodel runs, quiet while they run: their
# handlers keep the stream they were created with, which redirecting stderr does not reach
_LIBRARY_LOGGERS = ("transformers",)


@contextlib.contextmanager
def silenced_output() -> Iterator[None]:
    """Discard what the enclosed code writes to stdout and stderr, Python's and the C++
    streams' alike (file descriptors 1 and 2), and what the libraries of
    :data:`_LIBRARY_LOGGERS` log: exporters print whole IR graphs from C++ when they fail,
    transformers logs notices while a model is traced, and a library must not."""
    sys.stdout.flush()
    sys.stderr.flush()
    loggers = [logging.getLogger(name) for name in _LIBRARY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    saved = [os.dup(1), os.dup(2)]
    try:
        with tempfile.TemporaryFile() as sink, contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        os.close(saved[0])
        os.close(saved[1])
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def trace_dtype(trace: Trace | None) -> str:
    """ftmodel's dtype name of the floating-point work in ``trace`` ("fp32" if none)."""
    if trace is not None:
        for r in trace.records:
            if r.dtype in _DTYPE_NAMES:
                return _DTYPE_NAMES[r.dtype]
    return "fp32"


def _torch_dtype(dtype: str) -> torch.dtype:
    if dtype not in TORCH_DTYPES:
        raise InvalidArgumentError(f"dtype must be one of {', '.join(TORCH_DTYPES)}, "
                                   f"got {dtype!r}")
    return TORCH_DTYPES[dtype]


def real_inputs(model: nn.Module, inputs: InputSpec, batch: int, dtype: str = "fp32",
                device: torch.device | str = "cpu") -> ModelInputs:
    """The forward arguments at ``batch`` as real tensors on ``device``, floats cast to dtype."""
    want = _torch_dtype(dtype)
    resolved = resolve_inputs(model, inputs, batch, want)

    def conv(t: torch.Tensor) -> torch.Tensor:
        if t.device.type == "meta":
            raise InvalidArgumentError(
                "this framework runs the model, so inputs must be real tensors, got a meta "
                "tensor; pass real inputs (or a callable batch -> inputs)")
        t = t.to(device)
        return t.to(want) if t.is_floating_point() else t

    return resolved.map(conv)


@contextlib.contextmanager
def eval_no_grad(model: nn.Module) -> Iterator[None]:
    """Eval mode and no_grad for the duration; restores each module's training flag."""
    was_training = [m.training for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, flag in zip(model.modules(), was_training):
            m.training = flag


def model_in_dtype(model: nn.Module, dtype: str, device: torch.device | str = "cpu"
                   ) -> nn.Module:
    """``model`` itself for fp32 on its own device, else a converted deep copy."""
    want = _torch_dtype(dtype)
    params = list(model.parameters()) + list(model.buffers())
    if any(p.device.type == "meta" for p in params):
        raise InvalidArgumentError(
            f"{type(model).__name__} has parameters on the meta device; this framework builds "
            "and runs the model, so build it with real weights")
    same_dtype = all(p.dtype == want for p in params if p.is_floating_point())
    same_device = all(p.device == torch.device(device) for p in params)
    if same_dtype and same_device:
        return model
    out = copy.deepcopy(model).to(device)
    return out.to(want) if not same_dtype else out


class PositionalModule(nn.Module):
    """``model`` behind a forward of positional tensors only, returning a flat tuple of tensors.

    The child is registered as ``model``, so exporter scopes gain one leading component
    ("model"), which :func:`module_path_from_scope` strips with ``strip_prefix``.
    """

    PREFIX = "model"

    def __init__(self, model: nn.Module, inputs: ModelInputs) -> None:
        super().__init__()
        self.model = model
        flat, self._spec = pytree.tree_flatten((inputs.args, inputs.kwargs))
        self._tensor_pos = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]
        self._template = [None if isinstance(v, torch.Tensor) else v for v in flat]
        self.example = tuple(flat[i] for i in self._tensor_pos)

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        flat = list(self._template)
        for pos, t in zip(self._tensor_pos, tensors):
            flat[pos] = t
        args, kwargs = pytree.tree_unflatten(flat, self._spec)
        out = self.model(*args, **kwargs)
        return tuple(t for t in pytree.tree_leaves(_plain(out)) if isinstance(t, torch.Tensor))


def _plain(out: Any) -> Any:
    """Hugging Face ModelOutput and other Mapping outputs as plain dicts (pytree-friendly)."""
    if isinstance(out, dict):  # ModelOutput is an OrderedDict
        return {k: _plain(v) for k, v in out.items()}
    if isinstance(out, (tuple, list)):
        return tuple(_plain(v) for v in out)
    return out


def module_names(model: nn.Module) -> frozenset[str]:
    return frozenset(n for n, _ in model.named_modules(remove_duplicate=False))


def module_path_from_scope(components: Sequence[str], names: frozenset[str],
                           strip_prefix: str = "") -> str:
    """The deepest module path of the model that the scope components spell.

    Exporters write each scope component either relative to the previous one ("conv1" under
    "layer1.0") or relative to an ancestor ("layer1.0" under "layer1"; "model.0" under the
    root). Each component is tried as a child of the current path, of its ancestors, and on its
    own; the walk stops at the first component that names no module (an op name such as
    "Conv"). ``strip_prefix`` is the name of a wrapper's child holding the model
    (:class:`PositionalModule`): paths are resolved with it and returned without it.
    """
    comps = [c for c in components if c]
    full = _prefixed(names, strip_prefix) if strip_prefix else names
    path = ""
    for comp in comps:
        found = None
        base = path
        while True:
            cand = f"{base}.{comp}" if base else comp
            if cand in full:
                found = cand
                break
            if not base:
                break
            base = base.rpartition(".")[0]
        if found is None:
            break
        path = found
    if strip_prefix:
        if path == strip_prefix:
            return ""
        if path.startswith(strip_prefix + "."):
            return path[len(strip_prefix) + 1:]
    return path


@functools.lru_cache(maxsize=8)
def _prefixed(names: frozenset[str], prefix: str) -> frozenset[str]:
    return frozenset({prefix} | {f"{prefix}.{n}" for n in names if n})


def input_signature(inputs: ModelInputs) -> tuple[Any, ...]:
    flat, spec = pytree.tree_flatten((inputs.args, inputs.kwargs))
    sig = tuple((tuple(v.shape), str(v.dtype)) if isinstance(v, torch.Tensor) else repr(v)
                for v in flat)
    return (str(spec), sig)


_KERNEL_FIELDS = set(Kernel.__dataclass_fields__)


def make_kernel(op_class: str, macs: int, bytes_read: int, bytes_written: int,
                module_path: str, members: tuple[str, ...], dtype: str = "float32",
                variant: str = "", bytes_weights: int = 0,
                reads: tuple[tuple[int, int], ...] = (),
                writes: tuple[tuple[int, int], ...] = (), weight_reads: int = 1,
                weights_per_image: bool = False, bytes_scratch: int = 0,
                bytes_window_reads: int = 0, planes: int = 0,
                bytes_transposed: int = 0) -> Kernel:
    """A Kernel; ``bytes_weights``, the operand identities ``reads``/``writes`` ((storage
    id, bytes) pairs), ``weight_reads`` of a kernel that reads its weights once per image
    (``weights_per_image``), ``bytes_scratch``, ``bytes_window_reads``, ``planes`` and
    ``bytes_transposed`` are kept where this version of Kernel has the fields."""
    kw: dict[str, Any] = {}
    if bytes_transposed and "bytes_transposed" in _KERNEL_FIELDS:
        kw["bytes_transposed"] = int(bytes_transposed)
    if planes and "planes" in _KERNEL_FIELDS:
        kw["planes"] = int(planes)
    if bytes_window_reads and "bytes_window_reads" in _KERNEL_FIELDS:
        kw["bytes_window_reads"] = int(bytes_window_reads)
    if bytes_scratch and "bytes_scratch" in _KERNEL_FIELDS:
        kw["bytes_scratch"] = int(bytes_scratch)
    if weights_per_image and "weights_per_image" in _KERNEL_FIELDS:
        kw["weight_reads"], kw["weights_per_image"] = max(1, int(weight_reads)), True
    if "bytes_weights" in _KERNEL_FIELDS:
        kw["bytes_weights"] = int(bytes_weights)
    if (reads or writes) and "reads" in _KERNEL_FIELDS:
        kw["reads"], kw["writes"] = tuple(reads), tuple(writes)
    return Kernel(op_class, int(macs), int(bytes_read), int(bytes_written), module_path,
                  members, dtype, variant, **kw)
