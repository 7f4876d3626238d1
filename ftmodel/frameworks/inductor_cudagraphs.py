"""torch.compile with ``mode="reduce-overhead"``: inductor's kernels replayed as a CUDA graph.

Inductor compiles the model (:mod:`ftmodel.frameworks.inductor`; without a CUDA device here, from
its CPU schedule, :mod:`ftmodel.frameworks.inductor_gpu`) and cudagraph trees capture its
wrapper's kernels once; each later call checks dynamo's guards and replays the graph.

Counting: inductor's kernels, unchanged; host events as for ``cudagraphs``
(:func:`ftmodel.frameworks.cudagraphs.replay_program`): one ``graph_replay`` and a
``kernel_gap:<class>`` per kernel node, with the compiled call's guards and wrapper in the
profile's ``per_call_s``. Not counted: the copies cudagraph trees make of inputs that are not
static into the graph's buffers (one device copy per such input). Predicted only: no runner.
"""

from __future__ import annotations

from torch import nn

from ftmodel.errors import InvalidArgumentError
from ftmodel.frameworks import inductor
from ftmodel.frameworks.base import Framework, register
from ftmodel.frameworks.cudagraphs import replay_program
from ftmodel.program import Program
from ftmodel.tracing.inputs import InputSpec
from ftmodel.tracing.records import Trace

__all__ = ["NAME", "lower_model"]

NAME = "inductor-cudagraphs"


def lower_model(model: nn.Module, inputs: InputSpec, batch: int, trace: Trace | None = None, *,
                device: str = "cuda", dtype: str | None = None) -> Program:
    """Inductor's GPU program for ``model`` at ``batch``, replayed as one CUDA graph."""
    base = inductor.lower_model(model, inputs, batch, trace, device=device, dtype=dtype)
    return replay_program(base, NAME)


def _lower(trace: Trace) -> Program:
    raise InvalidArgumentError(
        f"{NAME} lowers from the model itself (torch.compile's generated code), not from a "
        "Trace; call Framework.lower_model(model, inputs, batch, trace)")


FRAMEWORK = register(Framework(
    NAME, _lower, needs_gpu=True,
    description='torch.compile mode="reduce-overhead" (inductor kernels in a CUDA graph)',
    lower_model=lower_model))
