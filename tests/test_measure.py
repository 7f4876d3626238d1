"""ftmodel.measure: robust timing bookkeeping (no assertion on absolute times)."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ftmodel.measure import (
    Measurement,
    fastest_plausible,
    measure,
    measure_interleaved,
    set_threads,
    synchronize,
)


def _work() -> int:
    return sum(range(200))


def test_measure_cheap_callable() -> None:
    calls = 0

    def fn() -> int:
        nonlocal calls
        calls += 1
        return _work()

    m = measure(fn, rounds=3, warmup=2, round_s=0.002, max_reps=20)
    assert isinstance(m, Measurement)
    assert m.time_s > 0
    assert m.spread >= 0
    assert len(m.round_medians_s) == 3
    # the fastest round's median, unless it is implausibly faster than the others
    assert m.time_s == fastest_plausible(m.round_medians_s)
    assert m.time_s in m.round_medians_s
    reps = m.n_samples // 3
    assert m.n_samples == 3 * reps and 3 <= reps <= 20
    # warmup + 1 probe to size the rounds + the timed samples
    assert calls == 2 + 1 + m.n_samples


def test_max_reps_caps_samples() -> None:
    m = measure(_work, rounds=2, warmup=0, round_s=10.0, max_reps=5)
    assert m.n_samples == 2 * 5


def test_measure_interleaved_one_per_key() -> None:
    order: list[str] = []

    def make(key: str):  # type: ignore[no-untyped-def]
        def fn() -> int:
            order.append(key)
            return _work()
        return fn

    fns = {"a": make("a"), "b": make("b"), ("c", 1): make("c")}
    out = measure_interleaved(fns, rounds=2, warmup=1, round_s=0.001, max_reps=4)
    assert set(out) == set(fns)
    for m in out.values():
        assert m.time_s > 0 and m.spread >= 0 and len(m.round_medians_s) == 2
    # rounds are interleaved: after warmups/probes, a's, then b's, then c's, then a's again
    timed = order[3 * 2:]  # 3 keys × (1 warmup + 1 probe)
    reps = {k: out[k].n_samples // 2 for k in fns}
    first_round = ["a"] * reps["a"] + ["b"] * reps["b"] + ["c"] * reps[("c", 1)]
    assert timed == first_round * 2


def test_settle_pauses_and_wakes_before_each_block(monkeypatch: pytest.MonkeyPatch) -> None:
    # a runtime whose threads spin after a run (ONNX Runtime) is timed with a pause, then one
    # untimed call, before each callable's block
    import ftmodel.measure as m
    events: list[str] = []
    monkeypatch.setattr(m.time, "sleep", lambda s: events.append(f"sleep {s}"))
    monkeypatch.setattr(m, "other_threads_running", lambda: 0)  # quiet: see the next test

    def make(key: str):  # type: ignore[no-untyped-def]
        def fn() -> int:
            events.append(key)
            return _work()
        return fn

    out = measure_interleaved({"a": make("a"), "b": make("b")}, rounds=2, warmup=1,
                              round_s=0.001, max_reps=3, settle_s=0.02)
    blocks = [i for i, e in enumerate(events) if e == "sleep 0.02"]
    assert len(blocks) == 2 + 2 * 2  # before each warm-up, and before each of 2 × 2 blocks
    reps = {k: out[k].n_samples // 2 for k in out}
    # after each pause of the timed rounds: one untimed call, then the block
    for i in blocks[2:]:
        key = events[i + 1]
        assert events[i + 1: i + 2 + reps[key]] == [key] * (1 + reps[key])


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_a_spinning_thread_of_this_process_is_seen_running() -> None:
    # a thread of this process that keeps running (as ONNX Runtime's workers do after a run) is
    # counted; once it has ended, it no longer is
    import threading

    from ftmodel.measure import other_threads_running
    stop = threading.Event()

    def spin() -> None:  # PyTorch ops release the GIL: the thread runs while this one polls
        x = torch.randn(256, 256)
        while not stop.is_set():
            x = torch.tanh(x @ x)

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        seen = max(other_threads_running() for _ in range(200))
    finally:
        stop.set()
        worker.join()
    assert seen >= 1


def test_settle_polls_until_no_other_thread_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # settle keeps polling while another thread is running and returns at the first quiet poll;
    # (a real thread waiting for the GIL reads as sleeping, so the polling is checked on counts)
    from ftmodel import measure as timing
    counts = iter([2, 1, 1, 0, 3])
    polls: list[int] = []

    def running() -> int:
        polls.append(1)
        return next(counts)

    monkeypatch.setattr(timing, "other_threads_running", running)
    timing.settle(0.0)
    assert len(polls) == 4  # 2, 1, 1 waited on; 0 ends it; 3 never read


def test_settle_gives_up_after_its_time_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from ftmodel import measure as timing
    monkeypatch.setattr(timing, "other_threads_running", lambda: 1)
    monkeypatch.setattr(timing, "QUIET_TIMEOUT_S", 0.01)
    waited = timing.settle(0.0)
    assert 0.01 <= waited < timing.QUIET_TIMEOUT_S + 5.0  # returned despite a thread running


def test_spread_definition() -> None:
    m = Measurement(time_s=1.0, round_medians_s=(1.0, 1.5, 1.2), n_samples=9)
    assert m.spread == pytest.approx(0.5)
    assert Measurement(0.0, (0.0, 0.0), 2).spread == 0.0


def test_a_round_far_faster_than_the_others_is_passed_over() -> None:
    from ftmodel.measure import IMPLAUSIBLY_FAST

    # interference slows rounds: the fastest is kept
    assert fastest_plausible([6.0, 6.4, 7.9, 6.1, 9.0]) == 6.0
    # a round scaled by a reference that read 3.5x slow: passed over for the fastest other one
    assert fastest_plausible([1.7, 6.1, 6.0, 6.3, 6.2]) == 6.0
    # at the bound it still counts
    assert fastest_plausible([4.0 / IMPLAUSIBLY_FAST, 4.0, 4.0]) == pytest.approx(4.0 / 1.5)
    assert fastest_plausible([3.0]) == 3.0
    with pytest.raises(ValueError):
        fastest_plausible([])


def test_set_threads() -> None:
    before = torch.get_num_threads()
    try:
        assert set_threads(None) == before
        assert set_threads(1) == 1
        with pytest.raises(ValueError, match="0"):
            set_threads(0)
        with pytest.raises(ValueError):
            set_threads(-2)
        assert torch.get_num_threads() == 1  # unchanged by the failed calls
    finally:
        torch.set_num_threads(before)


def test_synchronize_cpu_is_noop() -> None:
    synchronize("cpu")  # must not touch CUDA


@pytest.mark.requires_cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_measure_cuda_events() -> None:
    x = torch.randn(256, 256, device="cuda")
    m = measure(lambda: x @ x, device="cuda", rounds=2, warmup=1, round_s=0.001, max_reps=5)
    assert m.time_s > 0 and m.n_samples >= 2 * 3


def test_cold_measurement_flushes_before_every_timed_call() -> None:
    from ftmodel.measure import measure_cold_interleaved
    calls: list[str] = []
    res = measure_cold_interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                                   flush=lambda: calls.append("flush"), rounds=2, reps=3,
                                   warmup=1)
    assert set(res) == {"a", "b"} and all(m.n_samples == 6 for m in res.values())
    timed = calls[2:]  # after one unflushed warm-up call each
    assert timed == ["flush", "a"] * 3 + ["flush", "b"] * 3 + ["flush", "a"] * 3 + \
        ["flush", "b"] * 3


def test_last_level_cache_is_found_on_linux() -> None:
    import sys

    from ftmodel.measure import cache_flusher, last_level_cache_bytes
    size = last_level_cache_bytes("cpu")
    if sys.platform.startswith("linux"):
        assert size >= 256 * 1024  # any x86/Arm server CPU has at least this much
    cache_flusher("cpu", 1 << 20)()  # a small flusher runs


def test_captured_repeats_needs_cuda() -> None:
    from ftmodel.measure import captured_repeats
    with pytest.raises(ValueError, match="needs a CUDA device, got 'cpu'"):
        captured_repeats(lambda: None, "cpu")


@pytest.mark.requires_cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_captured_repeats_replays_the_calls() -> None:
    from ftmodel.measure import captured_repeats
    x = torch.randn(64, 64, device="cuda")
    replay, reps = captured_repeats(lambda: x @ x, "cuda", max_reps=8)
    assert 1 <= reps <= 8
    x.copy_(torch.eye(64, device="cuda"))  # the graph reads x's memory at replay
    outs = replay()
    synchronize("cuda")
    assert len(outs) == reps and all(torch.equal(o, x) for o in outs)


_FAULTS = """
import resource, statistics, sys, torch
from ftmodel.measure import allocator_setting, keep_heap
kept = keep_heap() if sys.argv[1] == "keep" else False
faults = []
for _ in range(9):  # allocate, touch and free 48 MiB, as a forward pass does an activation
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(12 << 20)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(kept, allocator_setting(), int(statistics.median(faults)), sep="|")
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="keep_heap acts on glibc only")
def test_keep_heap_stops_page_faults_on_reallocation() -> None:
    """A 48 MiB block freed and allocated again is page-faulted in afresh each time with glibc's
    defaults (12,288 pages), and not once the heap is kept (the first few allocations may land
    on heap pages not touched yet: the median over nine is taken)."""
    def run(mode: str) -> tuple[str, str, int]:
        out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True,
                             text=True, check=True).stdout.strip().split("|")
        return out[0], out[1], int(out[2])

    kept, setting, faults = run("keep")
    assert (kept, setting) == ("True", "heap kept")
    assert faults < 1000
    kept, setting, faults = run("default")
    assert (kept, setting) == ("False", "default")
    assert faults > 10_000
