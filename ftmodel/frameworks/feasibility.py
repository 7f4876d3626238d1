"""Can a framework run this model? Pre-checks on the eager Trace and export-error translation.

Both raise :class:`ftmodel.errors.FrameworkUnsupported` naming the framework, the op and the
module path (from the Trace) where the problem sits.

Pre-checks (before any export, from the Trace):

* ``UNSUPPORTED_OPS[framework]`` — a documented set of aten ops the framework's exporter cannot
  express, refused before any export. Empty today: FFTs and complex-number views (FNet's token
  mixing), which the TorchScript-based ONNX exporter cannot convert, export as ``DFT`` with the
  dynamo exporter that the ONNX Runtime lowering falls back to, and ONNX Runtime runs them.
* **data-dependent control flow** for the tracing frameworks (``torchscript`` via
  ``torch.jit.trace``; ``onnxruntime`` via the TorchScript-based exporter) and for CUDA-graph
  capture (``cudagraphs``: a host sync inside capture is illegal, and a replay repeats one
  branch): the tracer records one branch and bakes it in. It is visible in the Trace as ``aten._local_scalar_dense`` (a
  tensor's value read into Python by ``bool()``/``item()``): such models fail on fake tensors
  and are traced for real, where the op is recorded with its module. Shape-only Python logic
  (``if x.shape[1] > 1``) is not data-dependent and is not flagged. ``inductor`` handles data-
  dependent control flow with graph breaks and is not checked.

Export errors that slip past the pre-checks are translated by :func:`from_export_error`, which
finds the failing op in the error text ("Exporting the operator 'aten::fft_fft' ...") and the
first Trace record of that op for the module path.
"""

from __future__ import annotations

import re

from ftmodel.errors import FrameworkUnsupported
from ftmodel.tracing.records import OpRecord, Trace

__all__ = ["TRACING_FRAMEWORKS", "UNSUPPORTED_OPS", "from_export_error", "precheck"]

UNSUPPORTED_OPS: dict[str, dict[str, str]] = {
    "onnxruntime": {},
    "torchscript": {},
    "inductor": {},
    "cudagraphs": {},
}
TRACING_FRAMEWORKS = frozenset({"onnxruntime", "torchscript", "cudagraphs",
                                "onnxruntime-cudagraphs"})
_DATA_DEPENDENT = "_local_scalar_dense"


def _packet(op: str) -> str:
    """``aten._fft_r2c.default`` -> ``_fft_r2c``."""
    parts = op.split(".")
    return parts[1] if len(parts) >= 3 else parts[-1]


def precheck(framework: str, trace: Trace | None) -> None:
    """Raise FrameworkUnsupported if the Trace shows an op or pattern ``framework`` lacks."""
    if trace is None:
        return
    table = UNSUPPORTED_OPS.get(framework, UNSUPPORTED_OPS.get(framework.split("-")[0], {}))
    for r in trace.records:
        name = _packet(r.op)
        if name in table:
            raise FrameworkUnsupported(framework, r.op, r.module_path, table[name])
        if framework in TRACING_FRAMEWORKS and name == _DATA_DEPENDENT:
            raise FrameworkUnsupported(
                framework, "data-dependent control flow", r.module_path,
                f"a tensor's value is read into Python ({r.op}, from bool()/item()); tracing "
                "or graph capture would bake one branch into the graph. Use inductor (graph "
                "breaks) or remove the data-dependent branch")


_OP_IN_ERROR = re.compile(r"(?:aten|prim|onnx)::([A-Za-z0-9_]+)")


def _find_record(trace: Trace | None, op_name: str) -> OpRecord | None:
    if trace is None:
        return None
    want = op_name.lstrip("_")
    for r in trace.records:
        if _packet(r.op).lstrip("_") == want:
            return r
    # a composite op decomposed before dispatch (fft_fft -> _fft_r2c): match by family
    family = want.split("_")[0]
    for r in trace.records:
        if family and _packet(r.op).lstrip("_").startswith(family):
            return r
    return None


def from_export_error(framework: str, err: BaseException, trace: Trace | None
                      ) -> FrameworkUnsupported:
    """The FrameworkUnsupported for an exception raised while building the artifact."""
    text = str(err)
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    m = _OP_IN_ERROR.search(text)
    if m is not None:
        op = m.group(1)
        rec = _find_record(trace, op)
        return FrameworkUnsupported(framework, f"aten::{op}" if "::" not in op else op,
                                    rec.module_path if rec else "",
                                    f"{type(err).__name__}: {first[:300]}")
    return FrameworkUnsupported(framework, "<export>", "", f"{type(err).__name__}: {first[:300]}")
