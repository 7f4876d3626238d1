"""The in-model stage on an asynchronous device (a GPU), in the timeline's own max-plus form.

On a CPU host and device share one thread and a forward's time is the sum of both, so the
in-model correction is an additive least-squares fit (:func:`ftmodel.calibration.networks.fit_in_model`).
On a GPU the host launches kernels ahead of the device and a forward takes about
``max(host, device)``: an additive fit of ``measured − host`` to the device time mixes the two
(the synthetic networks are host-bound on a fast GPU, so the "device" coefficient it returns
describes the host). Here the two halves are observed and fitted separately:

* **device**: every synthetic network × batch is captured, several forwards in a row, in one CUDA
  graph (:func:`ftmodel.measure.captured_repeats`); a replay has no host work, so its time per
  forward is the network's device time. ``device_time ≈ device_scale·Σk [+ per_byte_s·Σbytes]``
  is fitted by NNLS in relative error, the form (or none) chosen by leave-one-network-out error
  as on a CPU. Batches reach 256 so the compute-bound side is covered.
  What is captured is what runs the framework's kernels: the module for eager and for CUDA
  graphs (the same kernels), the framework's own runner for the others (inductor: its compiled
  module, whose fused Triton kernels are the program's). Compiling frameworks see the networks
  at two batches (1 and 64), each a compile of its own.
* **host**: the same networks run through the framework's own runner (eager: the module; CUDA
  graphs: one replay), timed with CUDA events. With the device terms fixed, ``host_scale`` (the
  factor on every per-kernel host cost) is the value whose predicted timeline
  (:func:`ftmodel.estimate.timeline.run_timeline`, async) has the lowest median relative error,
  chosen over a grid; it is adopted only if it beats ``host_scale = 1`` leave-one-network-out.

What is not fitted: ``per_kernel_s`` (0; a per-kernel host cost is what the host programs
measure), launch latency and sync cost (the device profile's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from ftmodel.calibration.networks import fit_in_model, synthetic_networks
from ftmodel.errors import FrameworkUnsupported
from ftmodel.estimate.timeline import run_timeline
from ftmodel.hardware.profile import DEVICE_TERMS, FrameworkHost, HardwareProfile
from ftmodel.program import Program
from ftmodel.measure import captured_repeats, measure_interleaved
from ftmodel.tracing.dispatch import trace

if TYPE_CHECKING:
    from ftmodel.api import Predictor

__all__ = ["ASYNC_BATCHES", "HOST_SCALE_GRID", "NetworkRow", "device_terms_of", "fit_device_terms",
           "fit_host_scale", "fit_rows_host_scale", "in_model_stage_async", "network_row"]

ASYNC_BATCHES = (1, 8, 64, 256)
HOST_SCALE_GRID = np.geomspace(0.25, 4.0, 161)  # 1.0 is on the grid
DEVICE_FORMS = ("k", "k+b")  # no per-kernel term on the device side: replays include the gaps


@dataclass
class NetworkRow:
    key: tuple[str, int]  # (network, batch)
    host_s: np.ndarray  # o_i, as the host part prices them
    device_s: np.ndarray  # k_i from the curves, before in-model terms
    bytes_s: np.ndarray  # bytes moved per kernel


def _latency_s(row: NetworkRow, host_scale: float, device: dict[str, float], per_call_s: float,
               launch_latency_s: float, sync_s: float) -> float:
    dev = row.device_s * device["device_scale"] + row.bytes_s * device["per_byte_s"]
    return run_timeline(row.host_s * host_scale, dev, execution="async", per_call_s=per_call_s,
                        launch_latency_s=launch_latency_s, sync_s=sync_s).latency_s


def network_row(predictor: Predictor, program: Program, key: tuple[str, int]) -> NetworkRow:
    """One network × batch as the in-model fit sees it: its kernels' host and device seconds
    (``predictor``'s, before in-model terms) and bytes."""
    tl = predictor.program_timeline(program)
    return NetworkRow(key, tl.host_s, tl.device_s,
                      np.array([k.bytes_total for k in program.kernels], dtype=float))


def device_terms_of(in_model: Mapping[str, float]) -> dict[str, float]:
    """The device-side in-model terms (:data:`~ftmodel.hardware.profile.DEVICE_TERMS`) of a
    framework's ``in_model``, each at its no-correction value where absent."""
    return {k: float(in_model.get(k, 1.0 if k == "device_scale" else 0.0)) for k in DEVICE_TERMS}


def fit_device_terms(rows: Sequence[NetworkRow], device_time_s: Sequence[float]
                     ) -> dict[str, float]:
    """``device_scale`` and ``per_byte_s`` (and ``cv_median_ape``) of the networks' measured
    device times (CUDA-graph replays) against ``rows``' device seconds and bytes: one of
    :data:`DEVICE_FORMS` or no correction, by leave-one-network-out error."""
    return fit_in_model([0.0] * len(rows), [float(r.device_s.sum()) for r in rows],
                        [float(r.bytes_s.sum()) for r in rows], [len(r.host_s) for r in rows],
                        list(device_time_s), groups=[r.key[0] for r in rows],
                        forms=DEVICE_FORMS)


def fit_rows_host_scale(rows: Sequence[NetworkRow], measured_s: Sequence[float],
                        device_terms: dict[str, float], per_call_s: float,
                        profile: HardwareProfile) -> tuple[float, float]:
    """:func:`fit_host_scale` over ``rows`` (:func:`network_row`) measured at ``measured_s``,
    their device terms fixed, on ``profile``'s device (launch latency, sync)."""
    dp = profile.device
    return fit_host_scale(
        lambda i, h: _latency_s(rows[i], h, device_terms, per_call_s, dp.launch_latency_s,
                                dp.sync_s), measured_s, [r.key[0] for r in rows])


def fit_host_scale(predict: Callable[[int, float], float], measured_s: Sequence[float],
                   groups: Sequence[str]) -> tuple[float, float]:
    """(host_scale, its leave-one-group-out median APE) over :data:`HOST_SCALE_GRID`.

    ``predict(i, h)`` is row i's predicted latency with host scale h. 1.0 (no correction) is
    kept unless a scale chosen without a group predicts that group better, over all groups.
    """
    t = np.asarray(measured_s, dtype=float)
    g = np.asarray(groups)
    # err[j, i]: relative error of row i at grid point j
    pred = np.array([[predict(i, h) for i in range(len(t))] for h in HOST_SCALE_GRID])
    err = np.abs(pred - t[None, :]) / t[None, :]
    one = int(np.argmin(np.abs(HOST_SCALE_GRID - 1.0)))
    held_errs: list[float] = []
    for held in np.unique(g):
        tr = g != held
        j = int(np.argmin(np.median(err[:, tr], axis=1)))
        held_errs += list(err[j, ~tr])
    cv = float(np.median(held_errs))
    if cv >= float(np.median(err[one])):
        return 1.0, float(np.median(err[one]))
    return float(HOST_SCALE_GRID[int(np.argmin(np.median(err, axis=1)))]), cv


def _caller(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]
            ) -> Callable[[], object]:
    return lambda: module(*inputs)


def in_model_stage_async(partial: HardwareProfile, fh: FrameworkHost, device: str, quick: bool,
                         rounds: int, framework: str = "eager") -> FrameworkHost:
    """``fh`` with the in-model terms fitted on a GPU (see the module docstring)."""
    from ftmodel.api import Predictor

    predictor = Predictor(framework, partial)
    fw = predictor.framework
    dev_type = partial.device.type
    nets = synthetic_networks(6 if quick else 18)
    compiles = fw.runner is not None and not fw.needs_gpu  # e.g. inductor: a build per batch
    batches = (1, 64) if quick or compiles else ASYNC_BATCHES
    host_fns: dict[tuple[str, int], Callable[[], object]] = {}
    device_fns: dict[tuple[str, int], Callable[[], object]] = {}
    reps: dict[tuple[str, int], int] = {}
    rows: list[NetworkRow] = []
    uncaptured: list[str] = []
    for net in nets:
        module = net.module.to(device)
        for b in batches:
            xs = net.make_inputs(b)
            try:
                prog = fw.program(net.module, xs, b, trace(net.module, xs), device=dev_type,
                                  dtype="fp32")
                on_dev = tuple(x.to(device) for x in xs)
                eager_call = _caller(module, on_dev)
                host_fns[(net.name, b)] = (
                    eager_call if fw.runner is None
                    else fw.runner(net.module, xs, b, device=dev_type, dtype="fp32"))
                # a replay of captured graphs cannot itself be captured: CUDA graphs' kernels
                # are eager's; a compiled framework's are its runner's
                key = (net.name, b)
                try:
                    device_fns[key], reps[key] = captured_repeats(
                        host_fns[key] if compiles else eager_call, device)
                except RuntimeError as err:  # compiled code that a CUDA graph cannot capture
                    if not compiles:
                        raise
                    uncaptured.append(f"{net.name}@b{b}: {str(err).splitlines()[0][:120]}")
                    torch.cuda.synchronize(device)
            except FrameworkUnsupported:
                continue
            rows.append(network_row(predictor, prog, (net.name, b)))
    dev_meas = measure_interleaved(device_fns, device=device, rounds=rounds, round_s=0.02,
                                   max_reps=30)
    host_meas = measure_interleaved(host_fns, device=device, rounds=rounds, round_s=0.05,
                                    max_reps=30)
    device_t = [dev_meas[r.key].time_s / reps[r.key] if r.key in reps else float("nan")
                for r in rows]
    if uncaptured:  # the device half is shared: eager's device terms, fitted on its replays
        assert partial.host is not None  # the eager stage wrote it
        dev_fit = device_terms_of(partial.host.frameworks["eager"].in_model)
    else:
        dev_fit = fit_device_terms(rows, device_t)
    dev_terms = {k: dev_fit[k] for k in DEVICE_TERMS}
    measured = [host_meas[r.key].time_s for r in rows]
    host_scale, host_cv = fit_rows_host_scale(rows, measured, dev_terms, fh.per_call_s,
                                              partial)
    coef = {"host_scale": host_scale, "per_kernel_s": 0.0, **dev_terms, "cv_median_ape": host_cv}
    if uncaptured:  # recorded as a count; the reasons go to the samples
        coef["uncaptured_networks"] = float(len(uncaptured))
    else:
        coef["device_cv_median_ape"] = dev_fit.get("cv_median_ape", 0.0)
    samples = tuple(fh.samples) + tuple(
        {"network": f"{r.key[0]}@b{r.key[1]}", "host_s": float(r.host_s.sum()),
         "device_s": float(r.device_s.sum()), "bytes": float(r.bytes_s.sum()),
         "n_kernels": len(r.host_s), "time_s": t, "device_time_s": None if np.isnan(d) else d}
        for r, t, d in zip(rows, measured, device_t)) + tuple(
        {"uncaptured": reason} for reason in uncaptured)
    del device_fns, host_fns
    torch.cuda.empty_cache()
    return replace(fh, samples=samples, in_model=coef)
