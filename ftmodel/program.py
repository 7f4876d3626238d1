"""What a framework launches: the Program a Trace lowers to.

A :class:`Kernel` is one device kernel (possibly several fused aten ops) with the work of its
members at the kernel boundary. A :class:`Program` is the ordered kernels plus the host events
the framework pays for on the CPU (module calls, Python-level torch calls, views, allocations),
counted by kind. Lowerings (:mod:`ftmodel.frameworks`) produce Programs; the estimate layer
(:mod:`ftmodel.estimate`) prices them; neither imports the other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["GUARD_MODULE", "GUARD_TENSOR", "Kernel", "Program", "entry_launches",
           "kernel_events"]

# host events of a compiled call's guard evaluation (dynamo: ftmodel.estimate.guards): a tensor,
# a module its guards check on every call
GUARD_TENSOR = "guard:tensor"
GUARD_MODULE = "guard:module"


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
    # how many times the kernel streams its weights (``bytes_weights``) in one call: a library
    # whose work items are (image, filter block, output rows) reads every filter once per image
    # (ONNX Runtime's NCHWc convolutions); 1 for a kernel that reads them once
    weight_reads: int = 1
    # whether ``weight_reads`` is the batch's image count (so it follows the batch when the
    # kernel is re-sized to another batch, ftmodel.batch_scaling.kernel_at_batch)
    weights_per_image: bool = False
    # the small units a kernel loops over one call at a time, each costing beyond its work:
    # the (image, channel) planes of a per-channel op (batch norm: N·C;
    # ftmodel.tracing.variants.planes_of), an ONNX Runtime transpose's 2-D MLAS calls, its
    # broadcasting ops' spans, its batched MatMul's matrices (ftmodel.frameworks.onnx_graph);
    # 0 = not counted. Priced by a device profile's per-plane curve where it has one
    # (``<curve>:per_plane``)
    planes: int = 0
    # bytes of a buffer the kernel allocates and frees inside its own call, apart from its
    # operands (a frozen TorchScript graph's oneDNN convolution copies its weights into one on
    # every call: ftmodel.tracing.variants.prepacked_reorders_weights; oneDNN one of an
    # inductor convolution's channels-last weights: channels_last_reorders_weights); the same
    # at any batch.
    # Followed by ftmodel.estimate.allocator in a plain process
    bytes_scratch: int = 0
    # bytes of input a pool's windows read, each window's in full (ftmodel.tracing.windows);
    # in proportion to batch; 0 = not a pool, or not counted (then priced on its bytes).
    # Priced by a device profile's per-window curve where it has one (``pool@<op>:windows``)
    bytes_window_reads: int = 0
    # bytes of operands the kernel reads in one memory order and writes, the same shape, in
    # another (each counted once, as read; the copy writes as much): inductor's generated
    # layout conversions (the channels-last copy of a convolution's weights on every call, of a
    # graph's NCHW input); part of bytes_read / bytes_written. Priced on the profile's
    # transpose curve where it has one (``<framework>/copy:transpose``,
    # ftmodel.estimate.transposes), the rest of the kernel on its class's curve
    bytes_transposed: int = 0

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def read_traffic_bytes(self) -> int:
        """Bytes the kernel reads, counting each re-read of its weights (``weight_reads``):
        the axis its device-time curve is looked up on. ``bytes_read`` counts each operand
        once (what the cache model and the allocator see)."""
        return self.bytes_read + max(0, self.weight_reads - 1) * self.bytes_weights


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


def kernel_events(kernels: tuple[Kernel, ...]) -> Counter[str]:
    return Counter(f"kernel:{k.op_class}" for k in kernels)
