"""torch.compile with the inductor backend: count the kernel calls of the generated wrapper code.

Pipeline: ``torch.compile(model, backend="inductor", dynamic=False)`` under ``no_grad`` in eval
mode; one warm-up call inside ``torch._inductor.utils.run_and_get_code`` compiles the graph(s)
and captures each graph's wrapper module (the Python code inductor generates and runs). Note
that ``run_and_get_code`` calls ``torch._dynamo.reset()``: other compiled functions in the
process recompile on their next call.

A Program for a prediction needs the code only: for the CPU target, lowering generates it
without compiling its C++ kernels (:mod:`ftmodel.frameworks.inductor_codegen`), and keeps that
artifact apart from the runnable ones the runner compiles (a runnable one, where built, serves
lowering as well).

This module compiles and runs; :mod:`ftmodel.frameworks.inductor_lower` turns the captured
wrapper code into a Program (its counting semantics are there).
"""

from __future__ import annotations

import logging
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ftmodel.errors import BackendUnavailable, InvalidArgumentError
from ftmodel.frameworks import feasibility
from ftmodel.frameworks.artifact_cache import ArtifactCache
from ftmodel.frameworks._common import (
    eval_no_grad,
    input_signature,
    model_in_dtype,
    real_inputs,
    trace_dtype,
)
from ftmodel.frameworks.base import Framework, register
from ftmodel.frameworks.inductor_codegen import kernels_not_compiled
from ftmodel.frameworks.inductor_cpp import triton_kernels
from ftmodel.frameworks.inductor_gpu import from_cpu_schedule
from ftmodel.program import Program
from ftmodel.frameworks.inductor_lower import NAME, lower_code, recurrent_paths
from ftmodel.tracing.inputs import InputSpec
from ftmodel.tracing.records import Trace

__all__ = ["CACHE", "RUNNERS_RECOMPILE_LIMIT", "InductorArtifact", "build",
           "keep_runners_compiled", "lower", "lower_code", "lower_model", "recurrent_paths",
           "runner"]


@dataclass
class InductorArtifact:
    compiled: Any  # the torch.compile'd module
    example: tuple[tuple[Any, ...], dict[str, Any]]
    codes: list[str]
    program: Program
    n_breaks: int
    target: str = "cpu"  # what it was compiled for: "cpu" | "cuda"
    gpu_program: Program | None = None  # a CPU target's program read as the GPU's (lazily)
    runnable: bool = True  # False: code generated, kernels never compiled (lowering only)

    def run(self) -> object:
        if not self.runnable:
            raise InvalidArgumentError(
                "this inductor artifact was generated for lowering only (its C++ kernels were "
                "never compiled) and cannot run; build it with compile_kernels=True")
        args, kwargs = self.example
        with torch.no_grad():
            return self.compiled(*args, **kwargs)


CACHE: ArtifactCache[InductorArtifact] = ArtifactCache(maxsize=4)


def _wants_gpu(device: str) -> bool:
    return str(device).split(":")[0].lower() in ("cuda", "gpu")


def _check_toolchain(device: str, run: bool = False) -> str:
    """The target inductor compiles for: "cuda" where a CUDA device is here; for a GPU
    profile without one, "cpu" (its schedule stands in for the GPU's, see
    :mod:`ftmodel.frameworks.inductor_gpu`) unless ``run`` (running it needs the GPU)."""
    key = str(device).split(":")[0].lower()
    if _wants_gpu(key):
        if torch.cuda.is_available():
            return "cuda"
        if run:
            raise BackendUnavailable(
                "running inductor for a GPU needs a CUDA device, a CUDA build of torch and "
                "triton; none is available here")
        key = "cpu"
    if key != "cpu":
        raise InvalidArgumentError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if shutil.which("g++") is None and shutil.which("c++") is None and \
            shutil.which("clang++") is None:
        raise BackendUnavailable(
            "inductor on the CPU compiles C++ kernels and found no C++ compiler (g++, c++, "
            "clang++); install one, e.g. `apt-get install g++`")
    return "cpu"


def build(model: nn.Module, inputs: InputSpec, batch: int, trace: Trace | None = None, *,
          dtype: str = "fp32", device: str = "cpu", compile_kernels: bool = True
          ) -> InductorArtifact:
    """Compile, warm up, capture the wrapper code and lower it (uncached). Without
    ``compile_kernels``, a CPU target's C++ kernels are generated but not compiled
    (:mod:`ftmodel.frameworks.inductor_codegen`): the same code and Program, in a fraction of
    the time, and an artifact that cannot run. Should that warm-up call fail (code run eagerly
    between graphs that trips over a generated kernel's unwritten output), it compiles for real."""
    from torch._dynamo.utils import graph_break_reasons
    from torch._inductor.utils import run_and_get_code

    feasibility.precheck(NAME, trace)
    dev = _check_toolchain(device)
    # inductor's C++ toolchain probe logs "No CUDA runtime is found" on CPU-only machines
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    net = model_in_dtype(model, dtype, dev)
    inp = real_inputs(model, inputs, batch, dtype, dev)
    def capture() -> tuple[Any, list[str], int]:
        """(the compiled module, each graph's wrapper code, graph breaks) after one call."""
        compiled = torch.compile(net, backend="inductor", dynamic=False)
        _, codes = run_and_get_code(compiled, *inp.args, **inp.kwargs)
        return compiled, codes, len(graph_break_reasons)

    code_only = not compile_kernels and dev == "cpu"
    with eval_no_grad(net), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        captured = None
        if code_only:
            try:
                with kernels_not_compiled():
                    captured = capture()
            except Exception:  # noqa: BLE001 - retried below, compiled for real
                code_only = False
        if captured is None:
            try:
                captured = capture()
            except Exception as err:
                raise feasibility.from_export_error(NAME, err, trace) from err
    compiled, codes, n_breaks = captured
    shapes = frozenset(tuple(t.shape) for t in inp.tensors())
    # recurrent layers always run eagerly; with no graph compiled at all (dynamo skipped the
    # forward, e.g. at a recurrent layer it could not break around) the whole model does
    eager_paths = recurrent_paths(net) if codes else ("",)
    program = lower_code(codes, trace, batch=batch, n_breaks=n_breaks, input_shapes=shapes,
                         eager_paths=eager_paths, n_modules=sum(1 for _ in net.modules()))
    return InductorArtifact(None if code_only else compiled, (inp.args, inp.kwargs), codes,
                            program, n_breaks, dev, runnable=not code_only)


def _artifact(model: nn.Module, inputs: InputSpec, batch: int, trace: Trace | None,
              device: str, dtype: str | None, run: bool = False,
              shared: bool = False) -> InductorArtifact:
    """The cached artifact; ``shared``: one compiled for another model of the same structure
    will do (its Program, not its compiled module, is what the caller uses). Without ``run``,
    a runnable artifact already built serves, and otherwise one whose kernels were never
    compiled is built (lowering only)."""
    dtype = dtype or trace_dtype(trace)
    feasibility.precheck(NAME, trace)
    dev = _check_toolchain(device, run)
    with torch.no_grad():
        sig = input_signature(real_inputs(model, inputs, batch, dtype, "cpu"))
    key = (batch, dtype, dev, sig)
    if not run:
        built = CACHE.get(model, (*key, "runnable"), by_structure=shared)
        if built is not None:
            return built
    return CACHE.get_or_build(
        model, (*key, "runnable" if run else "code"),
        lambda: build(model, inputs, batch, trace, dtype=dtype, device=dev,
                      compile_kernels=run), by_structure=shared)


def lower_model(model: nn.Module, inputs: InputSpec, batch: int, trace: Trace | None = None, *,
                device: str = "cpu", dtype: str | None = None) -> Program:
    """The Program inductor's generated code runs for ``model`` at ``batch`` (cached). For a GPU
    without a CUDA device here, read off the CPU schedule (:func:`inductor_gpu.from_cpu_schedule`)."""
    art = _artifact(model, inputs, batch, trace, device, dtype, shared=True)
    if _wants_gpu(device) and art.target == "cpu":
        if art.gpu_program is None:  # read once per artifact
            art.gpu_program = from_cpu_schedule(art.program, triton_kernels(art.codes))
        return art.gpu_program
    return art.program


# compiled versions dynamo keeps of one code object while runners are in use (see runner)
RUNNERS_RECOMPILE_LIMIT = 8192


def keep_runners_compiled() -> None:
    """Let dynamo keep every runner's compiled code: raise ``torch._dynamo.config``'s
    ``recompile_limit`` and ``accumulated_recompile_limit`` to :data:`RUNNERS_RECOMPILE_LIMIT`
    (never lower them) for the rest of the process.

    dynamo caches compiled code per Python code object, and the modules a measurement compiles
    share code objects (every ``nn.Sequential`` its ``forward``). Past the default limit of 8
    compiled versions of one code object, dynamo runs every further one eagerly and says so
    only in a log line. A calibration's runners (its tiny programs, op samples and synthetic
    networks) rely on this; before it the calibration raised the limits around its framework
    stages, and a script building runners outside it timed eager code: the calibration's 18
    synthetic networks x 2 batches, rebuilt that way, ran 10 of the networks eagerly (one at
    1.73 ms, eager 1.59 ms, compiled 0.83 ms on the 2-vCPU AMD EPYC guest). A hit entry moves
    to the front of its code object's cache, so a runner called repeatedly checks its own
    guards first."""
    cfg = torch._dynamo.config
    cfg.recompile_limit = max(cfg.recompile_limit, RUNNERS_RECOMPILE_LIMIT)
    cfg.accumulated_recompile_limit = max(cfg.accumulated_recompile_limit,
                                          RUNNERS_RECOMPILE_LIMIT)


def runner(model: nn.Module, inputs: InputSpec, batch: int, *, device: str = "cpu",
           dtype: str = "fp32") -> Callable[[], object]:
    """A zero-argument callable running the cached compiled module once. Raises dynamo's
    recompile limits for the process (:func:`keep_runners_compiled`), so that each runner keeps
    running its compiled code however many others share its code objects."""
    keep_runners_compiled()
    return _artifact(model, inputs, batch, None, device, dtype, run=True).run


def lower(trace: Trace) -> Program:
    raise InvalidArgumentError(
        "inductor lowers from the model itself (torch.compile's generated code), not from a "
        "Trace; call Framework.lower_model(model, inputs, batch, trace)")


FRAMEWORK = register(Framework(
    NAME, lower, description="torch.compile (inductor backend, static shapes)",
    lower_model=lower_model, runner=runner, large_allocations_known=True))
