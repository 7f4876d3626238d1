"""PyTorch eager: every non-view aten op is one kernel launch, dispatched from Python.

Host events counted (each priced by the host profile's ``eager`` entry):
``module_call`` per ``nn.Module.__call__``; ``py_call`` per Python call of the model's own code; ``view`` per aliasing op; ``alloc`` per uninitialised allocation; ``kernel:<class>`` per kernel.
Nothing is fused.
"""

from __future__ import annotations

from collections import Counter

from ftmodel.frameworks.base import Framework, register
from ftmodel.program import Kernel, Program, kernel_events
from ftmodel.tracing.variants import planes_of
from ftmodel.tracing.records import OpRecord, Trace

__all__ = ["kernel_of", "lower"]


def kernel_of(r: OpRecord) -> Kernel:
    """The kernel eager launches for one launching op record."""
    return Kernel(r.op_class, r.macs, r.bytes_read, r.bytes_written, r.module_path, (r.op,),
                  r.dtype, r.variant, r.bytes_weights, r.reads, r.writes, r.inner,
                  planes=planes_of(r.op, r.input_shapes),
                  bytes_window_reads=r.bytes_window_reads)


def lower(trace: Trace) -> Program:
    kernels = tuple(kernel_of(r) for r in trace.records if r.launches)
    events: Counter[str] = kernel_events(kernels)
    events["module_call"] = trace.n_module_calls
    events["py_call"] = trace.n_py_calls
    events["view"] = sum(1 for r in trace.records if r.op_class == "view")
    events["alloc"] = sum(1 for r in trace.records if r.op_class == "alloc")
    return Program("eager", kernels, dict(events), trace.batch, trace.warnings)


FRAMEWORK = register(Framework("eager", lower, description="PyTorch eager mode",
                               allocations_known=True))
