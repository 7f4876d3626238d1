"""A GPU generation's time per kernel beyond its work, from live CUDA-graph replays.

    python benchmarks/kernel_ramp.py benchmarks/results/gpu-h100/cudagraphs-v2.csv \\
        --profile h100-sxm5 --host benchmarks/results/gpu-h100/h100-profile-v2.json
    python benchmarks/kernel_ramp.py benchmarks/results/gpu-h200/zoo-run*.csv --profile h200

A CUDA-graph replay has no host part worth the name, so its measured time is the device's: the
kernels' work plus what each kernel costs beyond it (launch, ramp-up, drain). For each measured
CUDA-graph point at batch ≤ ``--max-batch`` this predicts the device time with the spec-derived
profile's per-kernel ramps set to zero (``half_macs`` = ``half_bytes`` = 0: work and floor only)
and prints ``(measured − work) / kernels``, kernels being the predicted launches; the median over
every point of every CSV given is the per-kernel ramp ``build_gpu_profiles.py`` gives that
generation (``gpu_generations.json``, ``kernel_ramp``, and per GPU left out,
``kernel_ramp_left_out``) in place of the ramps fitted on the paper's Pascal and Turing GPUs
(6.3 µs per bytes-bound, 10 µs per MAC kernel), which latencies hiding kernels behind host time
cannot pin down.

Reads ``benchmarks/validate.py`` CSVs (zoo models, ``ftmodel.tools.zoo``) and
``benchmarks/gpu_live.py`` zoo CSVs (a ``kind`` column; corpus models, ``ftmodel.tools.corpus``);
only their ``cudagraphs`` rows count.

    python benchmarks/kernel_ramp.py --trace benchmarks/results/gpu-h200/kernels-run5.csv \
        --profile h200

``--trace`` reads per-kernel profiler traces instead (``benchmarks/gpu_kernels.py measure``:
every kernel of one eager forward, by the aten op that launched it, and the forward's time as a
replayed CUDA graph) and splits the time beyond the work by the kernel's path: for each point at
batch ≤ ``--max-batch``, the kernels launched by convolutions (cuDNN's main kernel and the layout
transposes around it, counted as the profiler saw them) and every other kernel, each pair's
measured time plus its kernels' share of the replay's gaps (graph time − summed kernel time,
spread evenly over the kernels), minus the work the profile prices for its kernels (ramps at
zero), over the measured kernel count. The convolution figure is a generation's ``conv_ramp``
(``gpu_generations.json``): on a Hopper GPU a cuDNN convolution's kernels take about twice the
per-kernel time of the others, which one ramp for every kernel cannot carry.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.hardware.profile import HardwareProfile  # noqa: E402
from ftmodel.hardware.registry import load_profile  # noqa: E402
from ftmodel.tools.corpus import get_corpus_model  # noqa: E402
from ftmodel.tools.zoo import ZooModel, get_model  # noqa: E402


def without_ramps(profile: HardwareProfile) -> HardwareProfile:
    """``profile`` with every roofline's half-work sizes (the per-kernel ramps) at zero."""
    classes = {c: replace(d, params={k: (0.0 if k.startswith(("half_bytes", "half_macs"))
                                         else v) for k, v in d.params.items()})
               for c, d in profile.device.op_classes.items()}
    return replace(profile, device=replace(profile.device, op_classes=classes))


def replay_points(path: Path, max_batch: int) -> list[dict[str, str]]:
    """The CUDA-graph rows of one measured CSV at batch ≤ ``max_batch``, each with ``corpus``
    set when its model is a corpus model (a ``gpu_live.py`` zoo CSV)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        if r.get("framework", "cudagraphs") != "cudagraphs" or r.get("kind", "zoo") != "zoo":
            continue
        if int(r["batch"]) <= max_batch:
            out.append({**r, "corpus": "1" if "kind" in r else ""})
    return out


def model_of(row: dict[str, str]) -> ZooModel:
    return get_corpus_model(row["model"]) if row["corpus"] else get_model(row["model"])


def trace_ramps(paths: list[Path], profile: HardwareProfile, max_batch: int) -> None:
    """Print the per-kernel time beyond the work of convolution kernels and of the others, per
    point of ``gpu_kernels.py measure`` traces, and their medians (see the module docstring)."""
    from build_gpu_profiles import CONV_CLASSES  # the classes that take a conv_ramp
    from gpu_kernels import CLASS_OF_OP  # the class of a top-level aten op, as measured
    pred = Predictor("cudagraphs", without_ramps(profile))
    per: dict[str, list[float]] = {"conv": [], "other": []}
    measured: dict[str, list[float]]
    for path in paths:
        points: dict[tuple[str, int], list[dict[str, str]]] = {}
        with open(path, newline="", encoding="utf-8") as f:
            for r in csv.DictReader(f):
                if int(r["batch"]) <= max_batch:
                    points.setdefault((r["model"], int(r["batch"])), []).append(r)
        for (name, batch), pts in points.items():
            graph_us = sum(float(r["device_us"]) for r in pts if r["top_op"] == "__graph__")
            ops = [r for r in pts if r["top_op"] not in ("__graph__", "__eager__")]
            measured = {"conv": [0.0, 0.0], "other": [0.0, 0.0]}
            for r in ops:
                acc = measured["conv" if CLASS_OF_OP.get(r["top_op"]) == "conv" else "other"]
                acc[0] += float(r["device_us"])
                acc[1] += int(r["n_kernels"] or 0)
            n_all = sum(n for _, n in measured.values())
            gap_us = max(graph_us - sum(t for t, _ in measured.values()), 0.0) / max(n_all, 1)
            zm = get_corpus_model(name)
            torch.manual_seed(0)
            net = zm.build().eval()
            prog = pred.lower(net, zm.make_inputs, batch, pred.trace(net, zm.make_inputs, batch))
            work = {"conv": 0.0, "other": 0.0}
            for k, t in zip(prog.kernels, pred.kernel_arrays(prog.kernels).device_s):
                if k.op_class != "aux":  # a helper's work is nil; its floor is not work
                    work["conv" if k.op_class in CONV_CLASSES else "other"] += t * 1e6
            line = []
            for side, (t_us, n) in measured.items():
                if n:
                    extra = (t_us + n * gap_us - work[side]) / n
                    per[side].append(extra * 1e-6)
                    line.append(f"{side} {n:4.0f} kernels {extra:6.2f} µs per kernel")
            print(f"{path.name:<18} {name:<24} b{batch:<3} gap {gap_us:5.2f} µs; "
                  + "; ".join(line), flush=True)
    for path_name, v in per.items():
        q = np.percentile(v, [25, 50, 75]) * 1e6
        print(f"{path_name}: {len(v)} points, median {q[1]:.2f} µs per kernel (25th-75th "
              f"percentile {q[0]:.2f}-{q[2]:.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="+", type=Path,
                    help="cudagraphs measurements (benchmarks/validate.py or gpu_live.py zoo), "
                         "or with --trace, gpu_kernels.py measure traces")
    ap.add_argument("--profile", required=True, help="the GPU's spec-derived profile")
    ap.add_argument("--host", default=None)
    ap.add_argument("--max-batch", type=int, default=4)
    ap.add_argument("--trace", action="store_true",
                    help="per-kernel traces: convolution kernels and the others apart")
    args = ap.parse_args()
    if args.trace:
        trace_ramps(args.csv, load_profile(args.profile), args.max_batch)
        return
    pred = Predictor("cudagraphs", without_ramps(load_profile(args.profile)), host=args.host)
    per: list[float] = []
    for path in args.csv:
        rows = replay_points(path, args.max_batch)
        for model in dict.fromkeys((r["model"], r["corpus"]) for r in rows):
            pts = [r for r in rows if (r["model"], r["corpus"]) == model]
            zm = model_of(pts[0])
            torch.manual_seed(0)
            net = zm.build().eval()
            batches = [int(r["batch"]) for r in pts]
            for r, p in zip(pts, pred.predict(net, batches, zm.make_inputs)):
                extra = (float(r["measured_s"]) - p.compute_s) / p.n_launches
                per.append(extra)
                print(f"{path.name:<20} {model[0]:<24} b{r['batch']:<3} measured "
                      f"{float(r['measured_s']) * 1e3:7.3f} ms  work {p.compute_s * 1e3:7.3f} ms  "
                      f"{p.n_launches:4d} kernels  {extra * 1e6:6.2f} µs per kernel", flush=True)
    q = np.percentile(per, [25, 50, 75]) * 1e6
    print(f"{len(per)} points: median {q[1]:.2f} µs per kernel (25th-75th percentile "
          f"{q[0]:.2f}-{q[2]:.2f})")


if __name__ == "__main__":
    main()
