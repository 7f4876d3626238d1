"""A latency oracle for hardware-aware NAS: many candidates, cached by structure.

``CostOracle(framework, gpu)`` answers the same question as :func:`ftmodel.predict_latency`
and gives the same :class:`~ftmodel.api.Prediction` (``tests/oracle/test_cost_oracle.py``), but caches
what candidates of one search space share, so a search asking about thousands of them pays
for each distinct block once::

    oracle = CostOracle("eager", "a100")
    p = oracle.latency(model, 8, inputs)                      # a Prediction
    res = oracle.latencies({cfg: model for ...}, [1, 8], inputs)   # many candidates x batches
    res.latency_s                                             # (n_candidates, n_batches)

What is cached
--------------
* **Traces, per block** (:class:`~ftmodel.oracle.trace_cache.TraceCache`): a model whose forward is
  ``nn.Sequential``'s is traced block by block (its non-Sequential children, Sequentials
  opened recursively), each block once per structure key and input shape/stride/dtype/device
  (see :mod:`ftmodel.oracle.structure`), and the model's Trace is assembled from the pieces; it equals
  the Trace of the whole model. Other models are traced whole. For eager, whose lowering is one
  kernel per launching record, each block's kernels are cached too, per path, with their
  storage ids relocated for the last 16 distinct places in a program they were put at, and the
  Program is assembled from them directly (no Trace is built). Unless the crossover is asked
  for or the device adds helper kernels, an eager Program's kernels keep their segments' own
  storage ids (no new Kernel objects per candidate): the cache-residency model takes the
  program's operand identities from the segments and their placement instead, and nothing
  else reads them.
* **Programs, per candidate** (an LRU of ``max_programs``): the lowered Program per (structure
  of the whole model, input shapes, batch). Frameworks that lower from the trace assemble a
  new candidate's Program again (cheap: eager from its blocks' cached kernels, cudagraphs by
  lowering the assembled trace). Frameworks that
  count from their own artifact (onnxruntime, torchscript, inductor) build it once per distinct
  candidate: their optimisers fuse and change layouts across block boundaries (ONNX Runtime's
  NCHWc transformer keeps the whole convolution trunk in a blocked layout and reorders only at
  its ends; Conv+Add+activation fusion crosses the residual), so block-level artifacts would
  count launches the whole-model artifact does not have. A candidate built on the meta device
  is given real weights (its initialisers, on a copy) for those frameworks.
* **Device times, per kernel and per block** (:class:`~ftmodel.oracle.device_cache.DeviceCache`):
  :meth:`Predictor.hot_cold_times_s` is a pure function of each kernel (module path and operand
  ids aside) and is memoised; for eager, each block's (hot, cold) arrays and operand events
  (what the cache-residency model simulates) are kept too and a candidate's are concatenated.
  What depends on the whole sequence (cache residency, the timeline, the in-model terms) is
  recomputed for every candidate by the Predictor itself, so predictions follow any change to
  it.

* **Block summaries, per block and input shape** (``latencies(configs, batches, space=...)``,
  :mod:`ftmodel.oracle.space_oracle`): a search space's candidates are priced from their
  configurations, never built, composed from summaries of their blocks
  (:mod:`ftmodel.oracle.composed`) to the latency of the built candidate.

What invalidates the cache
--------------------------
Nothing is detected automatically beyond the structure key; call :meth:`CostOracle.clear`
after: changing a module class's code in place (a redefined class is a new key), changing
global state a forward reads (``torch.backends`` flags, thread counts that change convolution
backend selection, module-level globals), or editing a profile object in place. A block whose
forward depends on parameter *values* cannot be traced on fake tensors; it is traced for real
each time and never cached. Modules with forward hooks, a per-instance ``forward`` or
attributes that are not plain data are traced every time (``cache_info().uncacheable`` says
which). The oracle is not thread-safe.

``crossover=False`` (the default) skips the crossover batch (``crossover_batch`` is None): it
needs programs at batch 2 and 3 (TorchScript and ONNX Runtime: the first batch's) and a root
search, several times the cost of a prediction.
With ``crossover=True`` every field equals ``predict_latency``'s.
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
from torch import nn

from ftmodel.api import DTYPES, DeviceSpec, HostSpec, Prediction, Predictor
from ftmodel.deprecation import renamed
from ftmodel.oracle.composed import NotComposable
from ftmodel.oracle.materialize import materialized, real_inputs
from ftmodel.oracle.device_cache import DeviceCache
from ftmodel.oracle.space_oracle import SearchSpace, SpacePricer, SpaceResult, space_latencies
from ftmodel.errors import InvalidArgumentError
from ftmodel.program import Program
from ftmodel.oracle.structure import Plan, input_meta, plan_of
from ftmodel.tracing.variants import backend_threads
from ftmodel.oracle.trace_cache import Part, TraceCache
from ftmodel.tracing.inputs import InputSpec, check_batch
from ftmodel.tracing.records import Trace

__all__ = ["CacheInfo", "CostOracle", "Failure", "OracleResult"]

@dataclass(frozen=True)
class Failure:
    """A candidate the oracle skipped: its configuration (the mapping key, or its position in
    a list) and the error."""

    candidate: Any
    error: str


@dataclass(frozen=True)
class OracleResult:
    """Predictions for the candidates that succeeded, in input order, one per batch."""

    candidates: tuple[Any, ...]
    batches: tuple[int, ...]
    predictions: tuple[tuple[Prediction, ...], ...]  # [candidate][batch]
    failures: tuple[Failure, ...] = ()

    @property
    def latency_s(self) -> np.ndarray:
        """``(n_candidates, n_batches)`` predicted latencies in seconds."""
        return np.array([[p.latency_s for p in row] for row in self.predictions],
                        dtype=np.float64).reshape(len(self.predictions), len(self.batches))

    def __len__(self) -> int:
        return len(self.candidates)

    def __getitem__(self, candidate: Any) -> tuple[Prediction, ...]:
        return self.predictions[self.candidates.index(candidate)]


@dataclass(frozen=True)
class CacheInfo:
    """Sizes and hit counts of the oracle's caches."""

    block_traces: int
    block_hits: int
    block_misses: int
    programs: int
    program_hits: int
    program_misses: int
    kernels: int  # kernels with memoised device times
    uncacheable: tuple[str, ...]  # why some modules were traced every time (distinct reasons)


class CostOracle:
    """Latency predictions for many candidates of one framework, device and dtype (cached).

    ``framework``, ``gpu``, ``host`` and ``dtype`` are those of :func:`ftmodel.predict_latency`.
    ``trace_cache`` may be shared between oracles of different frameworks or profiles (block
    traces depend on neither). ``max_programs`` bounds the per-candidate program cache; by
    default 4096 for frameworks that build an artifact (a miss costs an export) and 64 for
    those that lower the trace (a miss costs about a millisecond, less than what keeping every
    program alive costs Python's garbage collector).
    ``heap`` defaults to ``"kept"``, unlike :func:`ftmodel.predict_latency`: a candidate
    assembled from cached blocks keeps each block's own storage ids, which do not give the whole
    program's allocation lifetimes that the plain-process page-fault simulation needs
    (``heap="plain"`` is accepted and approximate).
    """

    def __init__(self, framework: str, device: DeviceSpec = "auto", *,
                 host: HostSpec | None = None, dtype: str = "fp32", crossover: bool = False,
                 trace_cache: TraceCache | None = None, max_programs: int | None = None,
                 heap: str = "kept", gpu: DeviceSpec | None = None) -> None:
        device = renamed("device", device, "auto", "gpu", gpu)
        self.predictor = Predictor(framework, device, host=host, dtype=dtype, heap=heap)
        self.crossover = bool(crossover)
        self.traces = trace_cache if trace_cache is not None else TraceCache()
        if max_programs is None:
            max_programs = 4096 if self.predictor.framework.lower_model is not None else 64
        if max_programs < 0:
            raise InvalidArgumentError(f"max_programs must be >= 0, got {max_programs!r}")
        self.max_programs = int(max_programs)
        # per candidate: the Program and, for eager, the segments its kernels come from
        self._programs: OrderedDict[Hashable, tuple[Program, tuple[Part, ...] | None]] = (
            OrderedDict())
        self._program_hits = self._program_misses = 0
        self._device = DeviceCache(self.predictor)
        self._uncacheable: dict[str, None] = {}
        fw = self.predictor.framework
        # eager's lowering is one kernel per launching record: assembled from cached segments
        self._eager = fw.name == "eager" and fw.lower_model is None
        self._helpers = False  # whether the device adds helper kernels to eager's programs
        self._space: SpacePricer | None | bool = None  # False: candidates are built

    @property
    def framework(self) -> str:
        return self.predictor.framework.name

    # -- public API ------------------------------------------------------------------------
    @overload
    def latency(self, model: nn.Module, batch: int = ..., inputs: InputSpec = ...
                ) -> Prediction: ...

    @overload
    def latency(self, model: nn.Module, batch: Sequence[int] = ..., inputs: InputSpec = ...
                ) -> list[Prediction]: ...

    def latency(self, model: nn.Module, batch: int | Sequence[int] = 1,
                inputs: InputSpec = None) -> Prediction | list[Prediction]:
        """The Prediction for ``model`` at ``batch`` (a list for a list of batches); errors
        are raised, as by ``predict_latency``."""
        if not isinstance(model, nn.Module):
            raise InvalidArgumentError(
                f"model must be a torch.nn.Module, got {type(model).__name__}")
        with _gc_paused():
            if isinstance(batch, (list, tuple, range)):
                return self._predict(model, [check_batch(b) for b in batch], inputs)
            return self._predict(model, [check_batch(batch)], inputs)[0]

    @overload
    def latencies(self, models: Iterable[Any], batch: int | Sequence[int] = ...,
                  inputs: InputSpec = ..., *, batches: int | Sequence[int] | None = ...,
                  space: SearchSpace) -> SpaceResult: ...

    @overload
    def latencies(self, models: Mapping[Any, nn.Module] | Iterable[nn.Module],
                  batch: int | Sequence[int] = ..., inputs: InputSpec = ..., *,
                  batches: int | Sequence[int] | None = ..., space: None = ...
                  ) -> OracleResult: ...

    def latencies(self, models: Mapping[Any, nn.Module] | Iterable[Any],
                  batch: int | Sequence[int] = 1, inputs: InputSpec = None, *,
                  batches: int | Sequence[int] | None = None,
                  space: SearchSpace | None = None) -> OracleResult | SpaceResult:
        """Predictions for every candidate at every batch in ``batch`` (``batches=``: its
        deprecated spelling).

        With ``space`` (a search space, e.g. ``ftmodel.search_space.MobileNetV2Space()``),
        ``models`` are its configurations and are never built: each is priced from its
        blocks' cached summaries (:mod:`ftmodel.oracle.space_oracle`) into a
        :class:`~ftmodel.oracle.space_oracle.SpaceResult` of latencies.

        ``models`` is a mapping from a candidate's configuration (any hashable description) to
        its module, or an iterable of modules (their positions name them). A candidate that
        fails (cannot be traced, unsupported by the framework, ...) is skipped and reported in
        ``failures`` and as a warning, naming its configuration; the others are predicted.
        """
        batch = renamed("batch", batch, 1, "batches", batches)
        bs = [check_batch(b) for b in (batch if isinstance(batch, (list, tuple, range))
                                       else [batch])]
        if space is not None:
            with _gc_paused():
                return space_latencies(self._space_pricer(), self._predict, space,
                                       list(models), bs)
        items: Iterable[tuple[Any, Any]]
        if isinstance(models, Mapping):
            items = models.items()
        elif isinstance(models, Sequence):
            items = enumerate(models)
        else:  # an iterator may build candidates lazily: collect garbage meanwhile
            items = _paused(enumerate(models), gc.isenabled())
        names: list[Any] = []
        rows: list[tuple[Prediction, ...]] = []
        failed: list[Failure] = []
        with _gc_paused():
            self._predict_all(items, bs, inputs, names, rows, failed)
        return OracleResult(tuple(names), tuple(bs), tuple(rows), tuple(failed))

    def _predict_all(self, items: Iterable[tuple[Any, Any]], bs: list[int], inputs: InputSpec,
                     names: list[Any], rows: list[tuple[Prediction, ...]],
                     failed: list[Failure]) -> None:
        for name, model in items:
            try:
                if not isinstance(model, nn.Module):
                    raise InvalidArgumentError(
                        f"expected a torch.nn.Module, got {type(model).__name__}")
                rows.append(tuple(self._predict(model, bs, inputs)))
                names.append(name)
            except Exception as err:  # noqa: BLE001 - one bad candidate never ends a search
                text = f"{type(err).__name__}: {str(err).strip()[:500]}"
                failed.append(Failure(name, text))
                warnings.warn(f"ftmodel oracle: candidate {name!r} skipped ({text})",
                              RuntimeWarning, stacklevel=3)

    def _space_pricer(self) -> SpacePricer | None:
        if self._space is None:
            try:
                self._space = SpacePricer(self.predictor, self.traces)
            except NotComposable:
                self._space = False
        return self._space if isinstance(self._space, SpacePricer) else None

    def cache_info(self) -> CacheInfo:
        return CacheInfo(len(self.traces), self.traces.hits, self.traces.misses,
                         len(self._programs), self._program_hits, self._program_misses,
                         len(self._device), tuple(self._uncacheable))

    def clear(self) -> None:
        """Forget every cached trace, program and device time."""
        self.traces.clear()
        self._programs.clear()
        self._device.clear()
        self._uncacheable.clear()
        if isinstance(self._space, SpacePricer):
            self._space.clear()
        self._program_hits = self._program_misses = 0

    # -- internals ---------------------------------------------------------------------------
    def _predict(self, model: nn.Module, batches: list[int], inputs: InputSpec
                 ) -> list[Prediction]:
        plan = plan_of(model, self.traces.intern)
        if plan.why:
            self._uncacheable[plan.why] = None
        pred = self.predictor
        xover: float | None = None
        warn_x: list[str] = []
        if self.crossover:
            xover = pred.crossover_from(lambda b: self._program(model, plan, inputs, b)[0],
                                        batches[0], warn_x)
        out = []
        for b in batches:
            program, parts = self._program(model, plan, inputs, b)
            arrays = self._device.device_s(program, parts)
            if arrays is None:
                arrays = pred.kernel_arrays(program.kernels)
            out.append(pred.prediction(program, arrays, b, xover, warn_x))
        return out

    def _program(self, model: nn.Module, plan: Plan, inputs: InputSpec, batch: int
                 ) -> tuple[Program, tuple[Part, ...] | None]:
        # segments traced with the convolution backends of the profile's thread count
        with backend_threads(self.predictor.threads):
            return self._program_at(model, plan, inputs, batch)

    def _program_at(self, model: nn.Module, plan: Plan, inputs: InputSpec, batch: int
                    ) -> tuple[Program, tuple[Part, ...] | None]:
        dtype = DTYPES[self.predictor.dtype]
        resolved, metas = input_meta(model, inputs, batch, dtype, plan.device)
        key = None if plan.key is None else (plan.key, metas, batch)
        if key is not None:
            hit = self._programs.get(key)
            if hit is not None:
                self._programs.move_to_end(key)
                self._program_hits += 1
                return hit
        self._program_misses += 1
        tr: Trace | None = None
        if plan.chain and len(resolved.args) == 1 and not resolved.kwargs and metas:
            if self._eager:  # eager's kernels straight from the cached segments
                # kernels keep their segments' storage ids unless something reads them from
                # the kernels: the crossover search, or device helper kernels (no parts then)
                local = not self.crossover and not self._helpers
                got = self.traces.assemble_eager_parts(plan, metas[0], dtype, relocate=not local)
                if got is not None:
                    program = self.predictor.with_helpers(got[0])
                    if program is not got[0] and local:  # helpers after all: relocate
                        self._helpers = True
                        got = self.traces.assemble_eager_parts(plan, metas[0], dtype)
                        assert got is not None  # the same walk succeeded just before
                        program = self.predictor.with_helpers(got[0])
                    return self._keep(key, program, got[1] if program is got[0] else None)
            tr = self.traces.assemble(model, plan, metas[0], dtype)
        if tr is None:
            tr = self.predictor.trace(model, inputs, batch)
        if self.predictor.framework.lower_model is not None:
            model, inputs = materialized(model), real_inputs(inputs)
        return self._keep(key, self.predictor.lower(model, inputs, batch, tr))

    def _keep(self, key: Hashable | None, program: Program,
              parts: tuple[Part, ...] | None = None
              ) -> tuple[Program, tuple[Part, ...] | None]:
        if key is not None:
            self._programs[key] = (program, parts)
            while len(self._programs) > self.max_programs:
                self._programs.popitem(last=False)
        return program, parts


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused (reference counting still frees memory): the
    oracle allocates many short-lived tuples, and full collections over a large heap (torch,
    the caches, the user's candidates) would otherwise cost more than the predictions."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _paused(items: Iterable[Any], was: bool) -> Iterator[Any]:
    """``items`` with the collector back in its previous state (``was`` enabled) while the next
    one is made (a generator may build candidates lazily), paused while the caller uses it."""
    it = iter(items)
    while True:
        if was:
            gc.enable()
        try:
            item = next(it, _END)
        finally:
            gc.disable()
        if item is _END:
            return
        yield item


_END = object()
