"""Would a cold host path explain the in-model per-kernel term? A test on a profile's networks.

    python benchmarks/in_model_cold_host.py P.json --framework eager --lo-mib 4 --hi-mib 16

The in-model fit (``ftmodel.calibration.networks.fit_in_model``) prices what a kernel costs
inside a network beyond its sweep samples with, among others, a constant ``per_kernel_s`` per
Python launch. A candidate mechanism: a kernel's host path (Python, dispatcher, allocator, the
kernel's code) runs from memory when the kernel before it streamed more than the last-level
cache (``benchmarks/host_path_after_stream.py`` measures that). This prices each kernel's cold
host path at its class's cold-floor penalty from the calibration (``cold_floor_s − floor_s`` of
the class's floor sample in ``provenance.raw_op_times``; ``elementwise``'s for a class without
one), times ``φ(bytes the previous kernel moved)``: 0 below ``--lo-mib``, 1 above ``--hi-mib``,
linear between. It fits the networks the profile records (their recorded times, against the
host and device times the profile's own curves predict, as ``refit_in_model.py
--against-curves`` does) twice, with the per-kernel column as it is and with that column
replaced by the cold-host seconds, and prints each candidate form's leave-one-network-out
median error. Nothing is timed or written.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.calibration.in_model_cpu import in_model_networks  # noqa: E402
from ftmodel.calibration.networks import DEVICE_SCALED_FORMS, fit_in_model  # noqa: E402
from ftmodel.estimate.cache import CacheModel  # noqa: E402
from ftmodel.estimate.timeline import kernel_kinds  # noqa: E402
from ftmodel.hardware.profile import read_profile  # noqa: E402
from ftmodel.program import Kernel  # noqa: E402


def cold_floor_penalties_s(raw_op_times: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Per op class (its base name), the first floor sample's cold − hot floor seconds, from the
    shared curves (a framework's own curves, ``<framework>/<class>``, have no cold samples)."""
    out: dict[str, float] = {}
    for curve, rows in raw_op_times.items():
        if "/" in curve:
            continue
        base = curve.split("@")[0].split(":")[0]
        for r in rows:
            if "cold_floor_s" in r and "floor_s" in r:
                out.setdefault(base, float(r["cold_floor_s"]) - float(r["floor_s"]))
                break
    return out


def _distance_bytes(kernels: Sequence[Kernel], moved: np.ndarray, how: str) -> np.ndarray:
    """Per kernel, the bytes moved since its host path last ran, in the steady state (the
    forward pass repeated): the previous kernel's (the first kernel follows the previous call's
    last), or everything moved since the last kernel of the same op class."""
    if how == "previous":
        return np.roll(moved, 1)
    n = len(kernels)
    total = float(moved.sum())
    cum = np.concatenate([[0.0], np.cumsum(moved)])  # cum[i]: bytes moved before kernel i
    last: dict[str, int] = {}
    out = np.empty(n)
    for second in (False, True):  # the second pass sees the first pass's last occurrences
        for i, k in enumerate(kernels):
            j = last.get(k.op_class)
            if second and j is not None:  # bytes of kernels j .. i-1, across the pass's end
                out[i] = cum[i] - cum[j] if j < i else total - cum[j] + cum[i]
            last[k.op_class] = i
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--framework", default="eager")
    ap.add_argument("--lo-mib", type=float, default=4.0)
    ap.add_argument("--hi-mib", type=float, default=16.0)
    ap.add_argument("--distance", choices=("previous", "same-class"), default="previous",
                    help="bytes that evict a kernel's host path: the previous kernel's, or all "
                         "moved since the last kernel of its op class ran")
    args = ap.parse_args()
    prof = read_profile(args.profile)
    assert prof.host is not None, f"{args.profile} has no host part"
    penalty = cold_floor_penalties_s(prof.provenance.get("raw_op_times", {}))
    if "elementwise" not in penalty:
        raise SystemExit(f"{args.profile} records no cold floors (a profile without cold samples)")
    print("cold-floor penalty per class, µs: "
          + ", ".join(f"{k} {v * 1e6:.0f}" for k, v in sorted(penalty.items())))
    fh = prof.host.frameworks[args.framework]
    recorded = {str(s["network"]): s for s in fh.samples if "network" in s}
    bare = replace(prof, host=replace(prof.host, frameworks={
        **prof.host.frameworks, args.framework: replace(fh, in_model={})}))
    heap = "kept" if prof.provenance.get("allocator") == "heap kept" else "plain"
    predictor = Predictor(args.framework, bare, heap=heap)
    # the soft LRU share of the operand cache model, over the host path's own thresholds
    phi = np.vectorize(CacheModel(args.lo_mib * 2**20, args.hi_mib * 2**20).cold_share)
    cols: dict[str, list[float]] = {k: [] for k in ("host", "device", "bytes", "n", "cold", "t")}
    kinds: list[np.ndarray] = []
    groups: list[str] = []
    for (net, batch), prog in in_model_networks(bare, "cpu", False, args.framework).programs.items():
        sample = recorded.get(f"{net}@b{batch}")
        if sample is None:
            continue
        tl = predictor.program_timeline(prog)
        moved = np.array([k.bytes_total for k in prog.kernels], dtype=float)
        evicted = phi(_distance_bytes(prog.kernels, moved, args.distance))
        pen = np.array([penalty.get(k.op_class, penalty["elementwise"]) for k in prog.kernels])
        for key, value in (("host", tl.overhead_s), ("device", tl.compute_s),
                           ("bytes", float(moved.sum())), ("n", float(prog.n_python_launches)),
                           ("cold", float((evicted * pen).sum())), ("t", float(sample["time_s"]))):
            cols[key].append(value)
        kinds.append(np.bincount(kernel_kinds(prog.kernels), weights=tl.device_s, minlength=3))
        groups.append(net)
    by_kind = np.array(kinds)
    split = (list(by_kind[:, 0]), list(by_kind[:, 1]), list(by_kind[:, 2]))
    cold = np.array(cols["cold"])
    print(f"{len(groups)} network samples; cold-host seconds per sample: median "
          f"{np.median(cold) * 1e3:.2f} ms, {np.mean(cold > 0):.0%} of samples above 0")
    for label, column in (("per Python launch", cols["n"]), ("cold host path", cols["cold"])):
        print(f"per-kernel column = {label}:")
        for form in DEVICE_SCALED_FORMS:
            one = fit_in_model(cols["host"], cols["device"], cols["bytes"], column,
                               cols["t"], groups=groups, forms=(form,), device_by_kind=split)
            terms = ", ".join(f"{k} {v:.3g}" for k, v in one.items() if k != "cv_median_ape")
            print(f"  {form:<8} leave-one-network-out median APE {one['cv_median_ape']:.3f} "
                  f"[{terms}]")


if __name__ == "__main__":
    main()
