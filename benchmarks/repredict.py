"""Re-predict the points of a committed live validation with the current code, against the
latencies measured then (a screen for a model change between live runs; not a validation:
predicted and measured are not from the same run).

    python benchmarks/repredict.py benchmarks/results/gpu-h100/eager-run1.csv \\
        --profile benchmarks/results/gpu-h100/h100-profile.json
    python benchmarks/repredict.py benchmarks/results/cpu-epyc/cpu-eager.csv \\
        --profile benchmarks/results/cpu-epyc/cpu-profile-zoo.json --framework eager
    python benchmarks/repredict.py \\
        benchmarks/results/cpu-epyc/corpus-calibration-16/corpus-onnxruntime.csv \\
        --profile benchmarks/results/cpu-epyc/cpu-profile-13.json  # a corpus run, per half

A corpus CSV (``benchmarks/corpus.py`` output, with a ``half`` column) is re-predicted with the
heap setting each row was predicted for, and its figures are given per half (and, where the run recorded them, against the times at its
calibration's machine speed, and predicted at the speed probed before each measuring process,
``speed="now"``, with this profile).

Prints median / P90 APE, Spearman ρ and the median ratio (predicted / measured) of the
committed predictions and of the new ones on the
same measured points, and the models whose median APE moved most.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.frameworks.base import FRAMEWORKS, canonical_framework, get_framework  # noqa: E402
from ftmodel.tools.corpus import get_corpus_model  # noqa: E402
from ftmodel.hardware.profile import HardwareProfile  # noqa: E402
from ftmodel.hardware.registry import load_profile  # noqa: E402
from ftmodel.current_speed import at_current_speed  # noqa: E402
from ftmodel.speed import blended, nominal_host_reference_s, nominal_reference_s  # noqa: E402
from ftmodel.tools.zoo import get_model  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from corpus_speed import latencies_at, probes_of, toward  # noqa: E402


def _stats(pred: np.ndarray, meas: np.ndarray) -> str:
    ape = np.abs(pred - meas) / meas
    return (f"median APE {np.median(ape):.1%}, P90 {np.quantile(ape, 0.9):.1%}, "
            f"ρ {spearmanr(pred, meas).statistic:.3f}, ratio {np.median(pred / meas):.2f}")


def _with_in_model(profile: HardwareProfile, fw: str, terms: str) -> HardwareProfile:
    """``profile`` with ``fw``'s in-model terms replaced by ``terms`` ("name:value,...")."""
    host = profile.host
    if host is None or fw not in host.frameworks:
        raise SystemExit(f"--in-model: the profile has no host part for {fw!r}")
    try:
        new = {k.strip(): float(v) for k, v in (t.split(":") for t in terms.split(",") if t)}
    except ValueError:
        raise SystemExit(f"--in-model {terms!r}: expected name:value pairs separated by commas, "
                         "e.g. device_scale_other:1.0") from None
    fh = host.frameworks[fw]
    return dataclasses.replace(profile, host=dataclasses.replace(host, frameworks={
        **host.frameworks, fw: dataclasses.replace(fh, in_model={**fh.in_model, **new})}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("csv", help="a validation CSV (benchmarks/validate.py output)")
    ap.add_argument("--profile", required=True, help="a profile path or built-in name")
    ap.add_argument("--host", default=None, help="host half from this profile")
    ap.add_argument("--framework", default=None, help="default: the CSV's framework column")
    ap.add_argument("--drop-curves", default="",
                    help="comma-separated op-class keys to remove from the profile first (an "
                         "ablation: the same profile without those curves)")
    ap.add_argument("--page-fault-s", type=float, default=None,
                    help="seconds per freshly mapped page instead of the profile's own (an "
                         "ablation: the same profile with another probe's page-fault price)")
    ap.add_argument("--mmap-threshold-bytes", type=int, default=None,
                    help="start the heap simulation from this mmap threshold instead of the "
                         "profile's (an ablation: 0 = glibc's initial 128 KiB, as profiles "
                         "made before calibration measured it after `import torch`)")
    ap.add_argument("--simulate-heap", action="store_true",
                    help="simulate glibc's heap over every allocation the framework's Program "
                         "carries, as for eager (an ablation for a framework whose small "
                         "allocations are not simulated: inductor)")
    ap.add_argument("--in-model", default="",
                    help="comma-separated term:value pairs replacing the framework's in-model "
                         "terms (an ablation: device_scale_other:1 prices kernels without MACs "
                         "as their curves say)")
    ap.add_argument("--speed-exponents", default="1",
                    help="comma-separated: price a corpus run's probes with each reference "
                         "moved this part of the way from the profile's speed (1: the probe, "
                         "as speed='now' does; an experiment, corpus_speed.toward)")
    ap.add_argument("--points", action="store_true",
                    help="also print every point: measured ms, committed and current "
                         "predicted / measured")
    args = ap.parse_args(argv)
    rows = list(csv.DictReader(open(args.csv)))
    fw = args.framework or rows[0]["framework"]
    profile = load_profile(args.profile)  # a path or a built-in name
    if args.drop_curves:
        drop = {k.strip() for k in args.drop_curves.split(",") if k.strip()}
        missing = sorted(drop - set(profile.device.op_classes))
        if missing:
            raise SystemExit(f"--drop-curves: the profile has no curve {', '.join(missing)}")
        profile = dataclasses.replace(profile, device=dataclasses.replace(
            profile.device, op_classes={k: v for k, v in profile.device.op_classes.items()
                                        if k not in drop}))
    if args.page_fault_s is not None:
        if profile.host is None or not args.page_fault_s >= 0.0:
            raise SystemExit(f"--page-fault-s {args.page_fault_s}: needs a CPU profile with a "
                             "host half and a price >= 0 seconds per page")
        profile = dataclasses.replace(profile, host=dataclasses.replace(
            profile.host, page_fault_s=args.page_fault_s))
    if args.mmap_threshold_bytes is not None:
        if profile.host is None or args.mmap_threshold_bytes < 0:
            raise SystemExit(f"--mmap-threshold-bytes {args.mmap_threshold_bytes}: needs a CPU "
                             "profile with a host half and a byte count >= 0")
        profile = dataclasses.replace(profile, host=dataclasses.replace(
            profile.host, mmap_threshold_bytes=args.mmap_threshold_bytes))
    if args.in_model:
        profile = _with_in_model(profile, canonical_framework(fw), args.in_model)
    if args.simulate_heap:
        FRAMEWORKS[canonical_framework(fw)] = dataclasses.replace(
            get_framework(fw), allocations_known=True)
    corpus = "half" in rows[0]
    nominal_s = nominal_reference_s(profile.provenance) or float("nan")
    nominal_host_s = nominal_host_reference_s(profile.provenance)
    predictors: dict[str, Predictor] = {}

    def predictor(heap: str) -> Predictor:  # validate.py measures with the heap kept
        if heap not in predictors:
            predictors[heap] = Predictor(fw, profile, host=args.host, heap=heap)
        return predictors[heap]

    by_model: dict[tuple[str, str], list[dict[str, str]]] = {}
    for r in rows:
        heap = r.get("predicted_heap") or "kept"
        by_model.setdefault((r["model"], heap), []).append(r)
    old, new, meas, names, halves, at_speed, batch = [], [], [], [], [], [], []
    faults: list[tuple[float, float, float]] = []  # (committed, current, measured) per call
    fault_halves: list[str] = []
    row_faults: list[tuple[float, float, float]] = []  # (measured, committed, current) per row
    exponents = [float(x) for x in args.speed_exponents.split(",") if x.strip()]
    # at the speed probed before each measuring process (corpus runs), per exponent
    now: dict[float, list[float]] = {e: [] for e in exponents}
    for (name, heap), rs in by_model.items():
        zm = get_corpus_model(name) if corpus else get_model(name)
        torch.manual_seed(0)
        batches = [int(r["batch"]) for r in rs]
        model = zm.build().eval()
        preds = predictor(heap).predict(model, batches, zm.make_inputs)
        refs = probes_of(rs[0])
        scaled = [at_current_speed(profile, toward(profile, r, e)) for e in exponents
                  for r in refs]
        at_probes = (latencies_at(fw, scaled, heap, model, batches, zm.make_inputs, args.host)
                     if refs else [])
        for i, (r, p) in enumerate(zip(rs, preds)):
            old.append(float(r["predicted_s"]))
            new.append(p.latency_s)
            meas.append(float(r["measured_s"]))
            # at the calibration's nominal speed; re-expressed at this profile's (the host
            # part, as this prediction shares it, by the host references where both have one)
            factor = nominal_s / float(r.get("nominal_reference_s") or "nan")
            row_host_s = float(r.get("nominal_host_reference_s") or "nan")
            if nominal_host_s is not None and math.isfinite(row_host_s):
                total = p.overhead_s + p.compute_s
                share = p.overhead_s / total if total > 0 else 0.0
                factor = blended(factor, nominal_host_s / row_host_s, share)
            at_speed.append(float(r.get("measured_at_speed_s") or "nan") * factor)
            for k, e in enumerate(exponents):
                per = at_probes[k * len(refs):(k + 1) * len(refs)]
                now[e].append(float(np.median([ps[i] for ps in per]))
                              if per else float("nan"))
            names.append(name)
            halves.append(r.get("half", "all"))
            row_faults.append((float(r.get("faults_per_call") or "nan"),
                               float(r.get("predicted_faults") or "nan"), float(p.page_faults)))
            if heap == "plain" and r.get("faults_per_call") and r.get("predicted_faults"):
                faults.append((float(r["predicted_faults"]), float(p.page_faults),
                               float(r["faults_per_call"])))
                fault_halves.append(r.get("half", "all"))
            batch.append(int(r["batch"]))
    o, n, m = np.array(old), np.array(new), np.array(meas)
    dropped = f" without {args.drop_curves}" if args.drop_curves else ""
    print(f"{args.csv}: {len(m)} points, framework {fw}, profile {args.profile}{dropped}")
    for half in sorted(set(halves)):
        sel = np.array([h == half for h in halves])
        label = "" if half == "all" else f"{half} half, {int(sel.sum())} points: "
        print(f"  {label}committed predictions: {_stats(o[sel], m[sel])}")
        print(f"  {label}current code:          {_stats(n[sel], m[sel])}")
        a = np.array(at_speed)[sel]
        if np.isfinite(a).all():  # measured times at the calibration's speed (corpus runs)
            print(f"  {label}current code, at calibration speed: {_stats(n[sel], a)}")
        for e in exponents:
            w = np.array(now[e])[sel]
            if np.isfinite(w).all():  # predicted at the probes taken before measuring
                what = "" if e == 1.0 else f" (exponent {e:g})"
                print(f"  {label}current code, speed probed before measuring{what}: "
                      f"{_stats(w, m[sel])}")
    for half in sorted(set(fault_halves)):
        f = np.array([x for x, h in zip(faults, fault_halves) if h == half])
        # counts + 100, so that points near zero compare by absolute difference
        logs = np.abs(np.log((f[:, :2] + 100) / (f[:, 2:] + 100)))
        print(f"  {half} half, page faults per call against measured ({len(f)} plain points): "
              f"committed within 2x {int((logs[:, 0] <= np.log(2)).sum())}, median |log "
              f"ratio| {np.median(logs[:, 0]):.2f}; current within 2x "
              f"{int((logs[:, 1] <= np.log(2)).sum())}, {np.median(logs[:, 1]):.2f}")
    if args.points:
        print(f"  {'model':<28} {'half':<9} {'batch':>5} {'measured ms':>12} "
              f"{'committed':>9} {'current':>8}  (predicted / measured)   page faults per call: "
              "measured, committed, current")
        for i in range(len(m)):
            print(f"  {names[i]:<28} {halves[i]:<9} {batch[i]:>5} {m[i] * 1e3:>12.2f} "
                  f"{o[i] / m[i]:>9.2f} {n[i] / m[i]:>8.2f}   "
                  + " ".join(f"{f:>8.0f}" for f in row_faults[i]))
    change = np.abs(n - o) / o
    print(f"  predictions moved: median {np.median(change):.2%}, max {change.max():.2%}")
    moved = []
    for name in dict.fromkeys(names):
        idx = [i for i, x in enumerate(names) if x == name]
        before = statistics.median(abs(o[i] - m[i]) / m[i] for i in idx)
        after = statistics.median(abs(n[i] - m[i]) / m[i] for i in idx)
        moved.append((after - before, name, before, after))
    for d, name, before, after in sorted(moved, key=lambda x: -abs(x[0]))[:6]:
        print(f"  {name:<24} median APE {before:.1%} -> {after:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
