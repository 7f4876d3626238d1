"""Inductor's CUDA program without a CUDA device: its CPU schedule with the documented differences.

Inductor generates Triton kernels for a GPU only where a CUDA device, a CUDA build of torch and
Triton are present (it queries the device to compile). Where they are not, ftmodel compiles the
model for the CPU target, whose scheduler decides the same fusion groups from the same FX graph,
and reads the GPU program off that schedule (:func:`from_cpu_schedule`):

* each generated C++ kernel (``cpp_fused_*``) counts as one Triton kernel per group of its loop
  nests that do not depend on one another (:func:`ftmodel.frameworks.inductor_cpp.independent_nests`):
  the C++ backend fuses independent nodes horizontally, Triton launches each separately (the
  per-call layout conversion of every k×k convolution weight to channels-last is one Triton
  kernel each on a GPU, one C++ kernel for all of them on the CPU); the kernel's bytes are
  shared equally among its pieces;
* extern kernels (``extern_kernels.mm/addmm/bmm/convolution``) stay library calls (cuBLAS,
  cuDNN); the CPU library a convolution would take (oneDNN's ``mkldnn``, ``slow2d``) is dropped
  from its variant, so the GPU profile prices it as a convolution;
* aten fallbacks and layout conversions are kept as the CPU schedule has them.

Convolutions run channels-last on a GPU under inductor (its layout optimisation), so they take
none of the NCHW/NHWC transposes eager's cuDNN calls add
(:data:`ftmodel.hardware.host_priors.OWN_LAYOUT_CLASSES`).

Known differences left in (the prediction warns of them): on a GPU inductor splits a large
reduction over few outputs into two kernels (global pooling at small batch); it lowers fp32
attention with a mask to two batched GEMMs around a Triton softmax where the CPU calls one
fused attention kernel (BERT-6x384: 93 GPU kernels against 63 read off the CPU schedule), and
fuses a linear layer's bias into the next Triton kernel (``mm`` instead of ``addmm``); it may
choose Triton templates over cuBLAS only under ``max-autotune`` (not the default). On a CUDA
machine :mod:`ftmodel.frameworks.inductor` counts the Triton kernels themselves.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

from ftmodel.program import Kernel, Program, kernel_events
from ftmodel.tracing.formulas import MAC_CLASSES

__all__ = ["CPU_SCHEDULE_WARNING", "from_cpu_schedule"]

CPU_SCHEDULE_WARNING = (
    "inductor's CUDA kernels are read from its CPU schedule (no CUDA device here): each group "
    "of dependent loop nests of a fused C++ kernel counts as one Triton kernel, library GEMMs "
    "and convolutions as cuBLAS/cuDNN calls; split reductions, and attention the GPU lowers "
    "differently, are not counted")


def _on_gpu(kernel: Kernel) -> Kernel:
    if kernel.op_class in MAC_CLASSES and kernel.variant and "=" not in kernel.variant:
        return replace(kernel, variant="")  # a CPU library's path (mkldnn, slow2d, ...)
    return kernel


def _pieces(kernel: Kernel, n: int) -> Iterator[Kernel]:
    """``kernel`` as ``n`` Triton kernels sharing its bytes (operands stay with the first)."""
    if n <= 1:
        yield kernel
        return
    for i in range(n):
        yield replace(kernel, bytes_read=kernel.bytes_read // n,
                      bytes_written=kernel.bytes_written // n,
                      bytes_weights=kernel.bytes_weights // n,
                      reads=kernel.reads if i == 0 else (), writes=kernel.writes if i == 0 else ())


def from_cpu_schedule(program: Program, triton_kernels: Mapping[str, int] | None = None
                      ) -> Program:
    """The Program inductor would run on a GPU, from the one it generated for the CPU.

    ``triton_kernels``: generated C++ kernel name -> the Triton kernels it stands for
    (:func:`ftmodel.frameworks.inductor_cpp.independent_nests` of its source); a kernel not
    named counts as one."""
    split = triton_kernels or {}
    kernels = tuple(piece for k in program.kernels
                    for piece in _pieces(_on_gpu(k), split.get(k.members[0], 1)
                                         if k.members else 1))
    events = dict(program.host_events)
    if len(kernels) != len(program.kernels):
        events = {e: c for e, c in events.items() if not e.startswith("kernel:")}
        events.update(kernel_events(kernels))
    return Program(program.framework, kernels, events, program.batch,
                   program.warnings + (CPU_SCHEDULE_WARNING,))
