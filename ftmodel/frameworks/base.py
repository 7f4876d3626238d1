"""What a framework launches: the Program a Trace lowers to, and the framework registry.

A :class:`Kernel` is one device kernel (possibly several fused aten ops) with the work of its
members at the kernel boundary. A :class:`Program` is the ordered kernels plus the host events
the framework pays for on the CPU (module calls, Python-level torch calls, views, allocations),
counted by kind. Each framework module exposes ``lower(trace) -> Program``.

Frameworks that compile the model into their own artifact (ONNX Runtime, TorchScript, inductor)
cannot lower from a Trace alone: they also set :attr:`Framework.lower_model`, which receives the
model and its inputs and counts kernels from the artifact (the Trace is passed along for
feasibility checks and cost attribution). :attr:`Framework.runner` runs that same artifact for
live measurement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ftmodel.errors import UnknownNameError
from ftmodel.tracing.records import Trace

__all__ = ["Kernel", "Program", "entry_launches", "Framework", "FRAMEWORKS", "ALIASES", "get_framework",
           "canonical_framework", "ModelLowering", "ModelRunner", "register"]


@dataclass(frozen=True)
class Kernel:
    """One device kernel launch and the work it does."""

    op_class: str
    macs: int
    bytes_read: int
    bytes_written: int
    module_path: str
    members: tuple[str, ...]  # aten ops (or runtime nodes) fused into this kernel
    dtype: str = "float32"
    variant: str = ""  # refines op_class for device time: "inplace", "math", "math_inplace"
    bytes_weights: int = 0  # part of bytes_read that is model parameters / buffers
    # (storage id, bytes) of each operand read / result written, when the lowering knows them
    # (eager: from the trace); the cache model uses them to tell warm operands from cold ones
    reads: tuple[tuple[int, int], ...] = ()
    writes: tuple[tuple[int, int], ...] = ()
    # launched from C++ inside a Python call that launched an earlier kernel (OpRecord.inner;
    # eager only): no Python between the two, so no per-call Python cost
    inner: bool = False

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written


def entry_launches(kernels: Sequence[Kernel]) -> np.ndarray:
    """1.0 for each kernel the model's Python launched, 0.0 for one C++ launched inside the
    same call after an earlier kernel (``Kernel.inner``: a fused RNN's steps)."""
    return np.fromiter((0.0 if k.inner else 1.0 for k in kernels), np.float64, len(kernels))


@dataclass(frozen=True)
class Program:
    """The kernels one forward call launches and the host events around them."""

    framework: str
    kernels: tuple[Kernel, ...]
    host_events: Mapping[str, int]  # event kind -> count; kernel events are "kernel:<class>"
    batch: int | None = None
    warnings: tuple[str, ...] = ()

    @property
    def n_launches(self) -> int:
        return len(self.kernels)

    @property
    def n_python_launches(self) -> int:
        """Kernels the model's Python launched (not ``Kernel.inner``)."""
        return int(entry_launches(self.kernels).sum())

    @property
    def macs(self) -> int:
        return sum(k.macs for k in self.kernels)


class ModelLowering(Protocol):
    """``lower_model(model, inputs, batch, trace, *, device="cpu", dtype="fp32") -> Program``.

    ``inputs`` is the user's InputSpec (resolved to ``batch`` by the lowering), ``device`` the
    profile's device type ("cpu" | "cuda"), ``dtype`` one of ftmodel's dtype names.
    """

    def __call__(self, model: Any, inputs: Any, batch: int, trace: Trace, *,
                 device: str = "cpu", dtype: str = "fp32") -> Program: ...


class ModelRunner(Protocol):
    """``runner(model, inputs, batch, *, device="cpu", dtype="fp32") -> fn``; ``fn()`` runs one
    inference with the very artifact the lowering counted (for live measurement)."""

    def __call__(self, model: Any, inputs: Any, batch: int, *, device: str = "cpu",
                 dtype: str = "fp32") -> Callable[[], object]: ...


@dataclass(frozen=True)
class Framework:
    """A framework as ftmodel models it.

    ``lower`` maps a Trace to a Program. ``lower_model``, when set, is preferred by the
    predictor: it builds the framework's own artifact from the model and counts from it.
    """

    name: str
    lower: Callable[[Trace], Program]
    needs_gpu: bool = False
    description: str = ""
    legacy: bool = False
    host_events_from: str = ""  # host profile entry to read costs from ("" = own name)
    lower_model: ModelLowering | None = None
    runner: ModelRunner | None = None
    # pause between timing two of its runners (ftmodel.measure.measure_interleaved's settle_s):
    # its worker threads spin after a run and would steal the next runner's cores
    settle_s: float = 0.0
    # its CPU Programs' kernels carry operand identities (Kernel.reads/writes) from which
    # ftmodel.estimate.allocator follows the storages glibc's malloc hands out (a plain process)
    allocations_known: bool = False

    def program(self, model: Any, inputs: Any, batch: int, trace: Trace, *, device: str,
                dtype: str) -> Program:
        """The Program this framework runs: counted from its own artifact (``lower_model``)
        where it has one, else lowered from ``trace``; the device's helper kernels not added."""
        if self.lower_model is not None:
            return self.lower_model(model, inputs, batch, trace, device=device, dtype=dtype)
        return self.lower(trace)


def kernel_events(kernels: tuple[Kernel, ...]) -> Counter[str]:
    return Counter(f"kernel:{k.op_class}" for k in kernels)


FRAMEWORKS: dict[str, Framework] = {}
ALIASES = {"pytorch": "eager", "torch": "eager", "ort": "onnxruntime", "torch.compile": "inductor",
           "compile": "inductor", "jit": "torchscript", "ort-cudagraphs": "onnxruntime-cudagraphs",
           "cuda-graphs": "cudagraphs", "cuda_graphs": "cudagraphs"}
PLANNED: tuple[str, ...] = ()  # names accepted but not modelled yet


def register(fw: Framework) -> Framework:
    FRAMEWORKS[fw.name] = fw
    return fw


def canonical_framework(name: str) -> str:
    """The canonical name of ``name`` (aliases resolved, case-insensitive) or a clear error."""
    if not isinstance(name, str):
        raise UnknownNameError("framework", repr(name), list(FRAMEWORKS) + list(ALIASES))
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    _load_builtin_frameworks()
    if key in FRAMEWORKS:
        return key
    if key in PLANNED:
        raise NotImplementedError(
            f"framework {name!r} is planned but not modelled by this version of ftmodel; "
            f"available now: {', '.join(sorted(FRAMEWORKS))}")
    raise UnknownNameError("framework", name, list(FRAMEWORKS) + list(ALIASES) + list(PLANNED))


def get_framework(name: str) -> Framework:
    return FRAMEWORKS[canonical_framework(name)]


_BUILTIN_LOADED = False


def _load_builtin_frameworks() -> None:
    # A flag, not ``if FRAMEWORKS``: importing one framework module directly (calibration imports
    # eager) registers it without loading the others. The modules import their heavy
    # dependencies (onnx, onnxruntime, torch._inductor) lazily, on first use.
    global _BUILTIN_LOADED
    if _BUILTIN_LOADED:
        return
    _BUILTIN_LOADED = True
    import importlib

    for module in ("eager", "onnxruntime", "torchscript", "inductor", "cudagraphs"):
        importlib.import_module(f"ftmodel.frameworks.{module}")  # each registers itself
