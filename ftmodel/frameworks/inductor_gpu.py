"""Inductor's CUDA program without a CUDA device: its CPU schedule with the documented differences.

Inductor generates Triton kernels for a GPU only where a CUDA device, a CUDA build of torch and
Triton are present (it queries the device to compile). Where they are not, ftmodel compiles the
model for the CPU target, whose scheduler decides the same fusion groups from the same FX graph,
and reads the GPU program off that schedule (:func:`from_cpu_schedule`):

* each generated C++ kernel (``cpp_fused_*``) counts as one Triton kernel doing the same work;
* extern kernels (``extern_kernels.mm/addmm/bmm/convolution``) stay library calls (cuBLAS,
  cuDNN); the CPU library a convolution would take (oneDNN's ``mkldnn``, ``slow2d``) is dropped
  from its variant, so the GPU profile prices it as a convolution;
* aten fallbacks and layout conversions are kept as the CPU schedule has them.

Known differences left in (the prediction warns of them): a C++ kernel may hold several loop
nests of different sizes that Triton launches as separate kernels (more launches on the GPU); on
a GPU inductor splits a large reduction over few outputs into two kernels (global pooling at
small batch), and may choose Triton templates over cuBLAS only under ``max-autotune`` (not the
default). On a CUDA machine :mod:`ftmodel.frameworks.inductor` counts the Triton kernels
themselves.
"""

from __future__ import annotations

from dataclasses import replace

from ftmodel.program import Kernel, Program
from ftmodel.tracing.formulas import MAC_CLASSES

__all__ = ["CPU_SCHEDULE_WARNING", "from_cpu_schedule"]

CPU_SCHEDULE_WARNING = (
    "inductor's CUDA kernels are read from its CPU schedule (no CUDA device here): each fused "
    "C++ kernel counts as one Triton kernel, library GEMMs and convolutions as cuBLAS/cuDNN "
    "calls; kernels Triton would split (several loop nests, split reductions) are not counted")


def _on_gpu(kernel: Kernel) -> Kernel:
    if kernel.op_class in MAC_CLASSES and kernel.variant and "=" not in kernel.variant:
        return replace(kernel, variant="")  # a CPU library's path (mkldnn, slow2d, ...)
    return kernel


def from_cpu_schedule(program: Program) -> Program:
    """The Program inductor would run on a GPU, from the one it generated for the CPU."""
    return Program(program.framework, tuple(_on_gpu(k) for k in program.kernels),
                   dict(program.host_events), program.batch,
                   program.warnings + (CPU_SCHEDULE_WARNING,))
