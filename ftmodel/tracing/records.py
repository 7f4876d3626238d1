"""Facts recorded by the tracer: one :class:`OpRecord` per aten op, gathered in a :class:`Trace`.

Counting semantics
------------------
* One record per aten operator that reaches the dispatcher below autograd (after
  CompositeImplicitAutograd decompositions), in execution order. ``aten.linear`` therefore
  appears as ``aten.t`` (a view) plus ``aten.addmm``.
* ``macs`` counts multiply-accumulates of the matrix-like ops only (mm, addmm, bmm, baddbmm,
  convolution, scaled-dot-product attention); it is half of what
  ``torch.utils.flop_counter.FlopCounterMode`` reports for the same ops. Elementwise,
  normalisation, pooling and softmax ops have ``macs == 0``.
* ``flops`` is ``2 * macs`` for those ops and one FLOP per output element for elementwise,
  normalisation, softmax, pooling and reduction ops (a coarse figure; not used for latency).
* ``bytes_read`` / ``bytes_written`` are the sizes of the tensor arguments and results
  (element size × number of elements), i.e. the traffic of an unfused kernel; views move 0 bytes.
  ``bytes_weights`` is the part of ``bytes_read`` that is model parameters or buffers: in a whole
  forward pass these stream from memory rather than sit in cache.
* ``reads`` / ``writes`` name the storage behind each tensor argument / result, as
  ``(storage id, bytes)`` pairs (ids are small integers unique within one trace; a view and its
  base share an id; an in-place op writes the id it reads). They let the cache model
  (``ftmodel.estimate.cache``) tell operands just written by the previous op (warm) from weights
  and skip connections last touched long ago (cold). Views and allocations have none.
* Where a composite op takes another path on a tensor subclass than eager takes on plain CPU
  tensors, the record is eager's: ``F.max_pool1d`` (which fake tensors send through
  ``max_pool2d_with_indices`` on an unsqueezed view) is one ``aten.max_pool1d`` writing its
  values only. A pool called with ``return_indices=True``, which does write indices, is
  counted the same way.
* ``launches`` is the number of device kernels the op launches in eager PyTorch: 0 for views and
  uninitialised allocations (``empty``), 1 otherwise.
* ``variant`` refines the op class for device time: ``inplace`` (writes into an input, no new
  allocation), ``math`` (transcendental elementwise: exp, tanh, erf, ...), ``math_inplace``, the
  convolution backend eager PyTorch selects for these shapes on this host (``mkldnn``,
  ``slow2d``, ...: their speeds differ several-fold; ``mkldnn_unaligned`` where a channel
  count is not a multiple of oneDNN's block), or "".
* ``inner`` marks a launching op that C++ dispatched inside a call the Python code made, after
  an earlier launching op of the same call: the steps of ``torch._VF.gru``, the layers of a
  stacked ``_VF.lstm``, the ``bmm`` after ``matmul``'s copy; not ``aten.addmm`` under
  ``F.linear`` (the call's first kernel). The Python call is told by the calling frame, its
  bytecode offset and the calls into C the model's own code made since (counted by
  ``n_py_calls``' profile hook): a Python loop whose body is a single operator expression,
  with no call in it, would have its later iterations marked inner.
* Also counted per trace: ``n_module_calls`` (``nn.Module.__call__`` entries) and
  ``n_py_calls`` (Python function calls made by the model's own code — its ``forward`` methods
  and helpers, e.g. Hugging Face's mask and config glue — but not by torch or ftmodel), which
  carry the eager framework's Python-side tax with the aten dispatches. Calibration prices both.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OpRecord", "Trace", "OpSummary"]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class OpRecord:
    """One aten operator as executed (on fake tensors) by the traced model."""

    index: int
    module_path: str  # dotted path of the innermost nn.Module running the op ("" = root)
    op: str  # e.g. "aten.addmm.default"
    op_class: str  # see ftmodel.tracing.formulas.OP_CLASSES
    macs: int
    flops: int
    bytes_read: int
    bytes_written: int
    bytes_weights: int
    input_shapes: tuple[Shape, ...]
    output_shapes: tuple[Shape, ...]
    dtype: str  # dtype of the first tensor output (or input), e.g. "float32"
    is_view: bool
    launches: int
    variant: str = ""  # "inplace" | "math" | "math_inplace" | conv backend | ""  (see docstring)
    reads: tuple[tuple[int, int], ...] = ()  # (storage id, bytes) per tensor argument
    writes: tuple[tuple[int, int], ...] = ()  # (storage id, bytes) per tensor result
    # launched by C++ inside an op the model called, not by the model's Python: the previous
    # launching record came from the same Python call (see "Counting semantics")
    inner: bool = False
    # bytes of input a pool's windows read (ftmodel.tracing.windows.window_bytes_of); 0 for
    # other ops
    bytes_window_reads: int = 0

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written


@dataclass(frozen=True)
class OpSummary:
    """Totals over a group of records (an operator, a module, a class)."""

    count: int = 0
    launches: int = 0
    macs: int = 0
    flops: int = 0
    bytes_total: int = 0

    def __add__(self, other: OpSummary) -> OpSummary:
        return OpSummary(
            self.count + other.count,
            self.launches + other.launches,
            self.macs + other.macs,
            self.flops + other.flops,
            self.bytes_total + other.bytes_total,
        )

    @staticmethod
    def of(r: OpRecord) -> OpSummary:
        return OpSummary(1, r.launches, r.macs, r.flops, r.bytes_total)


@dataclass(frozen=True)
class Trace:
    """The ordered op records of one forward pass, with uniform queries (fvcore style)."""

    records: tuple[OpRecord, ...]
    n_module_calls: int
    module_calls: Mapping[str, int] = field(default_factory=dict)  # path -> calls
    batch: int | None = None
    fake: bool = True  # False when the fallback ran the model for real
    warnings: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    n_py_calls: int = 0  # Python calls of the model's own code (see "Counting semantics")

    # ---- totals -----------------------------------------------------------------------------
    @property
    def total_macs(self) -> int:
        return sum(r.macs for r in self.records)

    @property
    def total_flops(self) -> int:
        return sum(r.flops for r in self.records)

    @property
    def n_launches(self) -> int:
        return sum(r.launches for r in self.records)

    @property
    def n_ops(self) -> int:
        return len(self.records)

    @property
    def n_views(self) -> int:
        return sum(1 for r in self.records if r.is_view)

    @property
    def bytes_total(self) -> int:
        return sum(r.bytes_total for r in self.records)

    # ---- group-bys --------------------------------------------------------------------------
    def by_operator(self) -> dict[str, OpSummary]:
        """Totals per aten operator name, most MACs first."""
        out: dict[str, OpSummary] = defaultdict(OpSummary)
        for r in self.records:
            out[r.op] = out[r.op] + OpSummary.of(r)
        return dict(sorted(out.items(), key=lambda kv: (-kv[1].macs, -kv[1].count)))

    def by_op_class(self) -> dict[str, OpSummary]:
        out: dict[str, OpSummary] = defaultdict(OpSummary)
        for r in self.records:
            out[r.op_class] = out[r.op_class] + OpSummary.of(r)
        return dict(out)

    def by_module(self, depth: int | None = None) -> dict[str, OpSummary]:
        """Totals per module path; ``depth`` truncates paths to that many components.

        A module's totals include its children's only when ``depth`` cuts the children off.
        """
        out: dict[str, OpSummary] = defaultdict(OpSummary)
        for r in self.records:
            path = r.module_path
            if depth is not None:
                path = ".".join(path.split(".")[:depth]) if path else ""
            out[path] = out[path] + OpSummary.of(r)
        return dict(out)

    def unsupported_ops(self) -> dict[str, int]:
        """Ops without a cost formula (class "other"), with how often each ran."""
        return dict(Counter(r.op for r in self.records if r.op_class == "other"))

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        return (
            f"Trace(ops={self.n_ops}, launches={self.n_launches}, macs={self.total_macs:,}, "
            f"module_calls={self.n_module_calls}, "
            f"batch={self.batch}, fake={self.fake})"
        )
