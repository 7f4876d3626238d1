"""What a framework launches: the Program a Trace lowers to, and the framework registry.

A :class:`Kernel` is one device kernel (possibly several fused aten ops) with the work of its
members at the kernel boundary. A :class:`Program` is the ordered kernels plus the host events
the framework pays for on the CPU (module calls, Python-level torch calls, views, allocations),
counted by kind. Each framework module exposes ``lower(trace) -> Program``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ftmodel.errors import UnknownNameError
from ftmodel.tracing.records import Trace

__all__ = ["Kernel", "Program", "Framework", "FRAMEWORKS", "ALIASES", "get_framework",
           "canonical_framework"]


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

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written


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
    def macs(self) -> int:
        return sum(k.macs for k in self.kernels)


@dataclass(frozen=True)
class Framework:
    """A framework as ftmodel models it."""

    name: str
    lower: Callable[[Trace], Program]
    needs_gpu: bool = False
    description: str = ""
    legacy: bool = False
    host_events_from: str = ""  # host profile entry to read costs from ("" = own name)


def kernel_events(kernels: tuple[Kernel, ...]) -> Counter[str]:
    return Counter(f"kernel:{k.op_class}" for k in kernels)


FRAMEWORKS: dict[str, Framework] = {}
ALIASES = {"pytorch": "eager", "torch": "eager", "ort": "onnxruntime", "torch.compile": "inductor",
           "compile": "inductor", "jit": "torchscript", "ort-cudagraphs": "onnxruntime-cudagraphs",
           "cuda-graphs": "cudagraphs", "cuda_graphs": "cudagraphs"}
PLANNED = ("torchscript", "onnxruntime", "inductor", "cudagraphs", "onnxruntime-cudagraphs")


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


def _load_builtin_frameworks() -> None:
    if FRAMEWORKS:
        return
    from ftmodel.frameworks import eager  # noqa: F401  (registers itself)
