"""What dynamo's guards cost a compiled call, per tensor and per module, after several amounts
of memory were written between calls (``FrameworkHost.guards``; priced by
:mod:`ftmodel.estimate.guards`).

Chains of K modules that inductor fuses into one generated kernel of a few elements, built and
counted by the framework's own runner and lowering (the tensors and modules a prediction
counts): K ``nn.BatchNorm1d`` (four graph inputs each) and K ``nn.Sequential(nn.ReLU())``
(two modules each, no tensor), at two sizes. Each is called :data:`CALLS` times under
``torch.profiler``, with ``flush`` bytes written before every call, and the mean self time of
the guard evaluation's own event (:data:`GUARD_EVENT`, one a call) is its guard time; at each
flush size, seconds per tensor and per module are fitted by non-negative least squares with a
constant (left out: the per-call cost of the host programs holds it). Times are scaled to the
calibration's nominal speed as host work.

A chain's tensor or module costs less than a real model's after the same bytes (a 2-vCPU Intel
Xeon VM: the chains' prices gave 0.37-0.74x the guards of torchvision and timm CNNs, 0.27-0.82x
those of the in-model stage's synthetic networks). :func:`in_model_guard_scale` measures that
level inside models: each network is called back to back, its kernels running between two
guard evaluations, and ``guard = c + s·priced`` is fitted to the networks' guard events
(``priced``: what the chains' rows give for the tensors and modules the lowering counts, at the
bytes the network touches). A calibration does not apply ``s``: on a 2-vCPU AMD EPYC Zen 5 guest
the networks put it at 3.2, and the rows so scaled (the in-model terms fitted again) priced the
inductor tuning half at 14.0% median APE against 10.0% with the chains' rows
(``benchmarks/refit_in_model.py --guards-in-model``); on the Intel Xeon VM, rows 1.6x the
chains' moved it from 15.2% to 15.8%. The guard event's self time inside a model is not all
time the call loses to guards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from scipy.optimize import nnls
from torch import nn

from ftmodel.estimate.guards import GuardRow, guard_seconds
from ftmodel.frameworks._common import silenced_output
from ftmodel.frameworks.base import get_framework
from ftmodel.program import GUARD_MODULE, GUARD_TENSOR, Program
from ftmodel.speed import at_nominal_speed
from ftmodel.tracing.dispatch import trace

__all__ = ["CALLS", "FLUSH_BYTES", "GUARD_EVENT", "fit_guard_prices", "fit_guard_scale",
           "guard_event_s", "in_model_guard_scale", "measure_guards", "scaled_rows"]

GUARD_EVENT = "TorchDynamo Cache Lookup"  # the profiler's event around dynamo's guard check
CALLS = 30
FLUSH_BYTES = (0, 2 << 20, 8 << 20, 32 << 20, 128 << 20)
_QUICK_FLUSH_BYTES = (0, 32 << 20)
_CHAINS: dict[str, Callable[[], nn.Module]] = {
    "batchnorm": lambda: nn.BatchNorm1d(4), "nested": lambda: nn.Sequential(nn.ReLU())}


def _chain_runner(kind: str, k: int) -> tuple[Callable[[], object], int, int]:
    """(runner, guarded tensors, guarded modules) of a compiled chain of ``k`` modules."""
    model = nn.Sequential(*[_CHAINS[kind]() for _ in range(k)]).eval().requires_grad_(False)
    x = (torch.randn(2, 4),)
    fw = get_framework("inductor")
    assert fw.runner is not None
    run = fw.runner(model, x, 2, device="cpu", dtype="fp32")
    events = fw.program(model, x, 2, trace(model, x), device="cpu", dtype="fp32").host_events
    return run, int(events.get(GUARD_TENSOR, 0)), int(events.get(GUARD_MODULE, 0))


def guard_event_s(run: Callable[[], object], flush: Callable[[], object] | None) -> float:
    """Mean seconds of the guard event over :data:`CALLS` calls, ``flush`` before each."""
    from torch.profiler import profile

    for _ in range(3):
        run()
    with silenced_output(), profile() as prof:  # the profiler logs its start and stop
        for _ in range(CALLS):
            if flush is not None:
                flush()
            run()
    total_us = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key == GUARD_EVENT)
    return float(total_us) * 1e-6 / CALLS


def fit_guard_prices(tensors: Sequence[int], modules: Sequence[int],
                     times_s: Sequence[float]) -> tuple[float, float]:
    """(seconds per tensor, seconds per module) of ``times_s = c + a·tensors + b·modules``."""
    a = np.column_stack([np.ones(len(times_s)), tensors, modules]).astype(np.float64)
    coef, _ = nnls(a, np.asarray(times_s, dtype=np.float64))
    return float(coef[1]), float(coef[2])


def measure_guards(quick: bool, rounds: int
                   ) -> tuple[tuple[tuple[float, float, float], ...], list[dict[str, Any]]]:
    """(rows of (bytes written between calls, seconds per tensor, seconds per module), the raw
    samples): ``rounds`` timings of each chain at each flush size, each keeping its median.
    No rows when this torch's profiler shows no guard event."""
    sizes = (4, 32) if quick else (8, 64)
    chains = [(kind, k, *_chain_runner(kind, k)) for kind in _CHAINS for k in sizes]
    flushes = _QUICK_FLUSH_BYTES if quick else FLUSH_BYTES
    buf = torch.zeros(max(flushes) // 4)
    rows: list[tuple[float, float, float]] = []
    raw: list[dict[str, Any]] = []
    with torch.no_grad():
        for nbytes in flushes:
            part = buf[: nbytes // 4]
            flush = (lambda p=part: p.add_(1.0)) if nbytes else None
            times = []
            for kind, k, run, tensors, modules in chains:
                t = float(np.median([
                    at_nominal_speed(lambda r=run: guard_event_s(r, flush), "cpu", host_share=1.0)
                    for _ in range(max(1, rounds))]))
                times.append(t)
                raw.append({"chain": kind, "k": k, "tensors": tensors, "modules": modules,
                            "flush_bytes": nbytes, "guard_s": t})
            if not any(times):
                return (), raw
            per_tensor, per_module = fit_guard_prices([c[3] for c in chains],
                                                      [c[4] for c in chains], times)
            rows.append((float(nbytes), per_tensor, per_module))
    return tuple(rows), raw


def fit_guard_scale(priced_s: Sequence[float], measured_s: Sequence[float]
                    ) -> tuple[float, float]:
    """(scale ``s``, constant ``c`` in seconds) of ``measured = c + s·priced``, non-negative
    least squares; (1, 0) when nothing is priced."""
    if not any(priced_s):
        return 1.0, 0.0
    a = np.column_stack([np.ones(len(priced_s)), priced_s]).astype(np.float64)
    coef, _ = nnls(a, np.asarray(measured_s, dtype=np.float64))
    return (float(coef[1]), float(coef[0])) if coef[1] > 0 else (1.0, 0.0)


def scaled_rows(rows: Sequence[GuardRow], scale: float) -> tuple[GuardRow, ...]:
    """``rows`` with both prices multiplied by ``scale`` (the bytes kept)."""
    return tuple((b, t * scale, m * scale) for b, t, m in rows)


def in_model_guard_scale(runs: Mapping[Any, Callable[[], object]],
                         programs: Mapping[Any, Program], rows: Sequence[GuardRow]
                         ) -> tuple[float, dict[str, Any]]:
    """(scale of ``rows``, the record): each program's guard event timed back to back
    (:func:`guard_event_s`, at nominal speed as host work) against what ``rows`` price for it,
    and :func:`fit_guard_scale` fitted to them. ``runs`` and ``programs`` share their keys (the
    in-model stage's networks); scale 1 without rows."""
    if not rows:
        return 1.0, {}
    priced: list[float] = []
    measured: list[float] = []
    with torch.no_grad():
        for key, prog in programs.items():
            run = runs[key]
            measured.append(at_nominal_speed(lambda r=run: guard_event_s(r, None), "cpu",
                                             host_share=1.0))
            priced.append(guard_seconds(prog.host_events, prog.kernels, rows))
    scale, constant = fit_guard_scale(priced, measured)
    return scale, {"scale": scale, "constant_s": constant,
                   "networks": [{"network": str(k), "priced_s": p, "measured_s": m}
                                for k, p, m in zip(programs, priced, measured)]}
