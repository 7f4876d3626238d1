"""CUDA graphs: the same kernels as eager PyTorch / ONNX Runtime, replayed as one graph launch.

Predicted from the lowerings below (no capture is needed to predict; both frameworks need a GPU
profile and the predictor refuses CPU profiles for them); ``cudagraphs`` also has a runner that
captures the eager forward with ``torch.cuda.graphs`` and replays it, for calibration and live
validation on a GPU:

* ``cudagraphs``: the kernels of the eager lowering (a captured eager forward launches exactly
  the eager kernels) — work, op classes and module paths unchanged.
* ``onnxruntime-cudagraphs``: the kernels of the ONNX Runtime lowering for the CUDA execution
  provider (``enable_cuda_graph``); building it needs that provider here.

Host events: no per-kernel dispatch, no module calls, no views. One ``graph_replay`` event
(``cudaGraphLaunch``) per forward call, plus one ``kernel_gap:<class>`` event per kernel: the
device-side gap between consecutive kernel nodes of a graph (about a microsecond on recent
GPUs, by op class where calibration shows it differs). The current timeline prices every
non-kernel host event on the host side and spreads it over the kernels; the gaps belong on the
device timeline, which ``ftmodel.estimate.timeline`` does not model separately yet.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ftmodel.frameworks import eager, feasibility, onnxruntime
from ftmodel.errors import BackendUnavailable, InvalidArgumentError
from ftmodel.frameworks.base import Framework, register
from ftmodel.program import Program
from ftmodel.tracing.inputs import InputSpec, resolve_inputs
from ftmodel.tracing.records import Trace

__all__ = ["capture_forward", "lower", "lower_model_ort", "replay_program", "runner"]


def replay_program(base: Program, framework: str) -> Program:
    """``base``'s kernels with the host events of one CUDA graph replay."""
    events: Counter[str] = Counter({"graph_replay": 1})
    events.update(f"kernel_gap:{k.op_class}" for k in base.kernels)
    return Program(framework, base.kernels, dict(events), base.batch, base.warnings)


def lower(trace: Trace) -> Program:
    """A CUDA graph of the eager forward: eager kernels, one replay."""
    feasibility.precheck("cudagraphs", trace)
    return replay_program(eager.lower(trace), "cudagraphs")


def lower_model_ort(model: nn.Module, inputs: InputSpec, batch: int, trace: Trace | None = None,
                    *, device: str = "cuda", dtype: str | None = None) -> Program:
    """ONNX Runtime's CUDA-EP program, replayed as one CUDA graph."""
    base = onnxruntime.lower_model(model, inputs, batch, trace, device=device, dtype=dtype)
    return replay_program(base, "onnxruntime-cudagraphs")


def runner(model: nn.Module, inputs: InputSpec, batch: int, *, device: str = "cuda",
           dtype: str = "fp32") -> Callable[[], object]:
    """Capture one eager forward of ``model`` at ``batch`` into a CUDA graph (after three warm-up
    calls on a side stream, as torch.cuda.graphs requires); the callable replays it. The model
    and its inputs are moved to the GPU; the inputs are the graph's static buffers."""
    if not str(device).startswith("cuda"):
        raise InvalidArgumentError(f"cudagraphs runs on a CUDA device, got device={device!r}")
    if not torch.cuda.is_available():
        raise BackendUnavailable("cudagraphs captures a CUDA graph, which needs a CUDA device and "
                                 "a CUDA build of torch; none is available here")
    if dtype != "fp32":
        raise InvalidArgumentError(f"the cudagraphs runner runs fp32 models, got dtype={dtype!r}")
    model = model.to(device).eval()
    inp = resolve_inputs(model, inputs, batch).map(lambda t: t.to(device))
    return capture_forward(model, inp.args, inp.kwargs)


def capture_forward(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
                    ) -> Callable[[], object]:
    """One no-grad forward of ``model`` on ``args``/``kwargs`` (already on the GPU; they become
    the graph's static buffers) captured as a CUDA graph after three warm-up calls on a side
    stream, as torch.cuda.graphs requires; the callable replays it."""
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(3):
            model(*args, **kwargs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = model(*args, **kwargs)

    static = (model, args, kwargs)  # the graph reads these addresses: kept with the callable

    def replay() -> object:
        graph.replay()
        return out if static else None
    return replay


def _lower_ort_from_trace(trace: Trace) -> Program:
    return onnxruntime.lower(trace)  # raises: ORT lowers from the model


CUDAGRAPHS = register(Framework(
    "cudagraphs", lower, needs_gpu=True, runner=runner,
    description="PyTorch eager captured into a CUDA graph (torch.cuda.graphs)"))
ORT_CUDAGRAPHS = register(Framework(
    "onnxruntime-cudagraphs", _lower_ort_from_trace, needs_gpu=True, exports_graph=True,
    description="ONNX Runtime CUDA EP with enable_cuda_graph; modelled",
    lower_model=lower_model_ort))
