"""Robust timing on a real device: CPU wall clocks or CUDA events, shared by calibration and
validation.

Noise on a shared machine is one-sided (a busy neighbour only slows a run), so each point is
measured in several *rounds*; each round takes the median of its repetitions, and the reported
time is the fastest round's median, unless that round is more than :data:`IMPLAUSIBLY_FAST`
times faster than the rounds' median (a round scaled by a speed reference that read slow; then
the fastest of the others, :func:`fastest_plausible`). ``spread`` (slowest round / fastest
round − 1) flags noisy points. With several callables, rounds are interleaved (A B C, A B C,
...) so that slow phases of the machine hit every point alike. Inside
:func:`ftmodel.speed.speed_normalised`, as calibration measures, a speed reference is timed
around each block of calls and the time is expressed at one machine speed: the fastest round
as timed over the fastest reference around the rounds (:func:`fastest_over_fastest`); each
round scaled by its own references gives ``spread``.

:func:`measure_cold_interleaved` times the same callables with cold caches: before every timed
call it runs an untimed flush that touches, on every thread, more memory than the last-level
cache holds, so the call's operands (weights, inputs) come from memory as they do inside a model
that is larger than the cache.

:func:`keep_heap` (from :mod:`ftmodel.heap`, re-exported here) is the allocator half of the
protocol: every process that measures (calibration, validation, the benchmarks) keeps glibc's
heap mapped, as PyTorch's caching allocator does on a GPU, so a forward pass that frees and
re-allocates a large activation does not page-fault it in afresh each time.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from ftmodel.heap import DEFAULT_MALLOC_HELP, allocator_setting, heap_kept, keep_heap
from ftmodel.machine import cpu_identity, cpu_name
from ftmodel.speed import Reference, SpeedMeter, active_meter

__all__ = ["Measurement", "measure", "measure_interleaved", "measure_cold_interleaved",
           "time_once", "DEFAULT_MALLOC_HELP", "IMPLAUSIBLY_FAST", "allocator_setting",
           "cache_flusher", "captured_repeats", "cpu_identity", "cpu_name",
           "fastest_over_fastest", "fastest_plausible", "heap_kept", "keep_heap",
           "last_level_cache_bytes", "other_threads_running", "set_threads", "settle",
           "synchronize", "QUIET_TIMEOUT_S"]

K = TypeVar("K", bound=Hashable)  # what names each timed callable


@dataclass(frozen=True)
class Measurement:
    time_s: float  # see measure_interleaved
    round_medians_s: tuple[float, ...]  # each round's median, scaled by its references if any
    n_samples: int
    timed_round_s: tuple[float, ...] = ()  # each round's median as timed (before any scaling)
    # the speed meter's references before and after each round's block (none without a meter)
    references: tuple[tuple[Reference, Reference], ...] = ()

    @property
    def spread(self) -> float:
        """Slowest round's median over the fastest's, minus 1 (0 = perfectly stable)."""
        lo, hi = min(self.round_medians_s), max(self.round_medians_s)
        return hi / lo - 1.0 if lo > 0 else 0.0


# a scaled round faster than the rounds' median by more than this factor is taken for a bad
# speed reference, not a fast round: interference only slows a round down, while a reference
# timed slow (a runtime's threads still running beside it) scales its round down as much
IMPLAUSIBLY_FAST = 1.5


def fastest_plausible(rounds_s: Sequence[float]) -> float:
    """The fastest of ``rounds_s`` that is not more than :data:`IMPLAUSIBLY_FAST` times faster
    than their median. Rounds scaled to a nominal speed can come out too fast when a speed
    reference beside them read slow: on the Intel Xeon an ONNX Runtime GEMM sample (256 x 4096
    x 1024) kept a round at 1.7 ms where its others took 6-7 ms (a 2-core machine's peak rate
    exceeded 2.5-fold), and the curve priced GPT-2's projections 3.5x too fast."""
    if not rounds_s:
        raise ValueError("no rounds to choose from")
    floor = statistics.median(rounds_s) / IMPLAUSIBLY_FAST
    return min(t for t in rounds_s if t >= floor)


def set_threads(threads: int | None) -> int:
    """Fix torch's intra-op thread count (None keeps it); returns the count in force."""
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


QUIET_TIMEOUT_S = 0.5  # the longest :func:`settle` waits for other threads to stop running
_QUIET_POLL_S = 0.002


def other_threads_running() -> int:
    """How many threads of this process, other than the calling one, are running or runnable
    now (Linux ``/proc/self/task/*/stat``, state ``R``); 0 where that is not readable."""
    me = threading.get_native_id()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return 0
    running = 0
    for tid in tids:
        if tid == str(me):
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # the thread exited meanwhile
        running += state == "R"
    return running


def settle(seconds: float) -> float:
    """Sleep ``seconds``, then wait (at most :data:`QUIET_TIMEOUT_S`) until no other thread of
    this process is running; returns the seconds waited in all. ONNX Runtime's worker threads
    spin on after a run: on a 2-vCPU Intel Xeon one stayed running for 40-55 ms, and a PyTorch
    GEMM timed 20 ms after the run took 10-13 ms instead of 0.9 (its threads waited for time
    slices beside the spinning one). PyTorch's own OpenMP workers spin for about 7 ms after a
    parallel op, and are waited for too."""
    t0 = time.perf_counter()
    if seconds > 0:
        time.sleep(seconds)
    deadline = time.perf_counter() + QUIET_TIMEOUT_S
    while other_threads_running() and time.perf_counter() < deadline:
        time.sleep(_QUIET_POLL_S)
    return time.perf_counter() - t0


def time_once(fn: Callable[[], object], device: str) -> float:
    """Seconds one call of ``fn`` takes: between CUDA events, synchronised after it, on a GPU;
    by the host clock on a CPU."""
    if device.startswith("cuda"):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _reps_for(fn: Callable[[], object], device: str, target_s: float, max_reps: int) -> int:
    t = max(time_once(fn, device), 1e-7)
    return int(max(3, min(max_reps, target_s / t)))


def measure_interleaved(fns: Mapping[K, Callable[[], object]], *, device: str = "cpu",
                        rounds: int = 5, warmup: int = 2, round_s: float = 0.05,
                        max_reps: int = 200, settle_s: float = 0.0,
                        host_share: Mapping[K, float] | None = None,
                        gemm_share: Mapping[K, float] | None = None) -> dict[K, Measurement]:
    """Time each callable in ``rounds`` interleaved rounds of about ``round_s`` seconds each.

    ``settle_s``: before each callable's block (and its warm-up), untimed, sleep this long and
    then wait until the process's other threads stop running (:func:`settle`). ONNX Runtime's
    worker threads keep spinning for a while after a run; interleaved with another session they
    steal its cores (chains of GEMMs measured 1.5-4x slow on 2 cores), and a speed reference
    timed beside them reads several times slow, so its sessions are timed with a pause in
    between (and the reference's own threads are waited for before the block).

    Inside :func:`ftmodel.speed.speed_normalised` (a CPU), the meter's references are timed
    before and after each block of calls (at most every ``ftmodel.speed.REFERENCE_INTERVAL_S``;
    after each pause with ``settle_s``), each round's median is scaled to the meter's nominal
    speed (``host_share``: the part of each callable's time that is host work, which follows
    the host reference; 0 when not given; ``gemm_share``: the part of its device time that
    follows the reference GEMM rather than the memory reference, as
    :func:`ftmodel.speed.gemm_share` gives it per op class; 1 when not given)."""
    reps: dict[K, int] = {}
    for key, fn in fns.items():
        if settle_s > 0:
            settle(settle_s)
        for _ in range(warmup):
            fn()
        synchronize(device)
        reps[key] = _reps_for(fn, device, round_s, max_reps)
    meter = active_meter(device)
    timed = _Rounds(list(fns), meter, host_share, gemm_share)
    for _ in range(rounds):
        refs: list[Reference] = []  # the speed meter's references this round, if one is in force
        after_ref: dict[K, int] = {}  # each block's reference before it
        raw: dict[K, float] = {}
        for key, fn in fns.items():
            if settle_s > 0:
                settle(settle_s)
            if meter is not None and (not refs or settle_s > 0 or meter.due()):
                refs.append(meter.reference())  # after the pause, before the runtime wakes
                if settle_s > 0:
                    settle(0.0)  # the reference's own worker threads, before the runtime's
            after_ref[key] = len(refs) - 1
            if settle_s > 0:
                fn()  # untimed: wakes the runtime's threads
            times = [time_once(fn, device) for _ in range(reps[key])]
            raw[key] = statistics.median(times)
        timed.add(raw, refs, after_ref, settle_s)
    return timed.results(reps)


class _Rounds(Generic[K]):
    """Each callable's rounds: the round medians as timed, the references around each, and the
    round medians scaled to the meter's nominal speed by those references (as timed without a
    meter)."""

    def __init__(self, keys: Sequence[K], meter: SpeedMeter | None,
                 host_share: Mapping[K, float] | None = None,
                 gemm_share: Mapping[K, float] | None = None) -> None:
        self.meter = meter
        self.shares = dict(host_share or {})
        self.gemm_shares = dict(gemm_share or {})
        self.scaled: dict[K, list[float]] = {k: [] for k in keys}
        self.raw: dict[K, list[float]] = {k: [] for k in keys}
        self.refs: dict[K, list[tuple[Reference, Reference]]] = {k: [] for k in keys}

    def add(self, raw: Mapping[K, float], refs: list[Reference], after_ref: Mapping[K, int],
            settle_s: float = 0.0) -> None:
        """One round's medians ``raw``, each block timed after reference ``after_ref[key]``
        of ``refs``; a last reference is taken now, after the round."""
        meter = self.meter
        if meter is not None:
            if settle_s > 0:
                settle(settle_s)
            refs.append(meter.reference())
        for key, t in raw.items():
            i = after_ref.get(key, -1)
            self.raw[key].append(t)
            if meter is None or i < 0:
                self.scaled[key].append(t)
                continue
            self.refs[key].append((refs[i], refs[i + 1]))
            self.scaled[key].append(t * meter.factor(refs[i], refs[i + 1],
                                                     self.shares.get(key, 0.0),
                                                     self.gemm_shares.get(key, 1.0)))

    def results(self, calls_per_round: Mapping[K, int]) -> dict[K, Measurement]:
        """Each callable's :class:`Measurement`. Without a meter, its time is the fastest
        plausible round (:func:`fastest_plausible`); with one, its fastest round as timed over
        the fastest reference around its rounds (:func:`fastest_over_fastest`)."""
        out: dict[K, Measurement] = {}
        for k, scaled in self.scaled.items():
            n = calls_per_round[k] * len(scaled)
            refs = tuple(self.refs[k])
            time_s = (fastest_plausible(scaled) if self.meter is None or not refs else
                      fastest_over_fastest(self.meter, self.raw[k], [r for ab in refs for r in ab],
                                           self.shares.get(k, 0.0), self.gemm_shares.get(k, 1.0)))
            out[k] = Measurement(time_s, tuple(scaled), n, tuple(self.raw[k]), refs)
        return out


def fastest_over_fastest(meter: SpeedMeter, raw_s: Sequence[float],
                         refs: Sequence[Reference], host_share: float = 0.0,
                         gemm_share: float = 1.0) -> float:
    """A time at the meter's nominal speed from rounds timed on a machine whose speed moves: the
    fastest round as timed, scaled by the fastest of the references around the rounds
    (:meth:`ftmodel.speed.SpeedMeter.factor`; the GEMM, host and memory references'
    fastest each). Interference only slows a call down, the reference's as much as the
    measurement's, so each minimum is that call's time on the undisturbed machine.

    Scaling each round by its own references and keeping the fastest scaled round (the estimator
    before this one) kept whichever round's reference had read slow: on the 2-vCPU AMD EPYC,
    the GEMM, batched-matmul and convolution samples of a calibration timed in three passes
    about a minute apart (``benchmarks/sweep_estimators.py``, two runs) moved between passes by
    4.6-21.1% per class and 5.9-12.0% per sample that way, 1.1-21.1% and 2.2-9.6% this way
    (better in 7 of 8 class-runs on each count)."""
    if not raw_s or not refs:
        raise ValueError("no rounds or no references to choose from")
    hosts = [r.host_s for r in refs]
    memories = [r.memory_s for r in refs]
    fastest = Reference(min(r.gemm_s for r in refs),
                        None if any(h is None for h in hosts) else min(h for h in hosts if h),
                        None if any(m is None for m in memories) else min(m for m in memories if m))
    return min(raw_s) * meter.factor(fastest, fastest, host_share, gemm_share)


def measure(fn: Callable[[], object], *, device: str = "cpu", rounds: int = 5, warmup: int = 2,
            round_s: float = 0.05, max_reps: int = 200) -> Measurement:
    """Time one callable; see :func:`measure_interleaved`."""
    return measure_interleaved({0: fn}, device=device, rounds=rounds, warmup=warmup,
                               round_s=round_s, max_reps=max_reps)[0]


def last_level_cache_bytes(device: str = "cpu") -> int:
    """Size of the device's last-level cache: the CPU's largest cache (Linux sysfs) or the
    GPU's L2; 0 when unknown."""
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        return int(getattr(props, "L2_cache_size", 0))
    best = 0
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (d / "type").read_text().strip() == "Instruction":
                continue
            text = (d / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * scale)
    return best


def cache_flusher(device: str = "cpu", cache_bytes: int | None = None) -> Callable[[], object]:
    """A callable that evicts the caches: a parallel (all threads) pass over a buffer twice the
    last-level cache (64 MiB when the size is unknown)."""
    size = 2 * (cache_bytes if cache_bytes else last_level_cache_bytes(device) or 32 << 20)
    buf = torch.ones(size // 4, dtype=torch.float32, device=device)

    def flush() -> object:
        return buf.sum()  # parallel reduction: every worker thread streams its share
    return flush


def measure_cold_interleaved(fns: Mapping[K, Callable[[], object]], *,
                             flush: Callable[[], object], device: str = "cpu", rounds: int = 3,
                             reps: int = 5, warmup: int = 1,
                             gemm_share: Mapping[K, float] | None = None
                             ) -> dict[K, Measurement]:
    """Time each callable right after an (untimed) cache flush; rounds interleaved as in
    :func:`measure_interleaved` (``gemm_share`` as there), each round the median of ``reps``
    flushed calls."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    synchronize(device)
    meter = active_meter(device)
    timed = _Rounds(list(fns), meter, gemm_share=gemm_share)
    for _ in range(rounds):
        refs: list[Reference] = []
        after_ref: dict[K, int] = {}
        raw: dict[K, float] = {}
        for key, fn in fns.items():
            if meter is not None and (not refs or meter.due()):
                refs.append(meter.reference())
            after_ref[key] = len(refs) - 1
            times = []
            for _ in range(reps):
                flush()
                synchronize(device)
                times.append(time_once(fn, device))
            raw[key] = statistics.median(times)
        timed.add(raw, refs, after_ref)
    return timed.results({k: reps for k in fns})


def captured_repeats(fn: Callable[[], object], device: str, *, target_s: float = 2e-3,
                     max_reps: int = 64) -> tuple[Callable[[], object], int]:
    """``fn`` called ``reps`` times back to back inside one captured CUDA graph, and ``reps``.

    Replaying the graph runs the calls' kernels with no host work between them, so a replay's
    CUDA-event time over ``reps`` is the device time of one call (kernels and the device-side
    gaps between them), whatever the host costs: on an asynchronous GPU this is how a single
    op's device time is observed (an eagerly launched small op is host-bound, and subtracting a
    host floor from it leaves noise). ``reps`` makes a replay last about ``target_s``. ``fn`` is
    warmed up on a side stream first (as capture requires); the outputs of all ``reps`` calls
    live in the graph's memory pool, kept alive with the returned callable.
    """
    if not device.startswith("cuda"):
        raise ValueError(f"captured_repeats needs a CUDA device, got {device!r}")
    side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    synchronize(device)
    one_s = max(time_once(fn, device), 1e-7)  # an upper bound: launch included
    reps = int(max(1, min(max_reps, target_s / one_s)))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [fn() for _ in range(reps)]

    def replay() -> object:
        graph.replay()
        # the closure holds fn, and fn what the graph reads (its operands): both stay alive
        return outs if fn is not None else None
    return replay, reps
