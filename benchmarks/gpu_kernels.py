"""Per-op device times of corpus models on a live GPU, against a profile's predicted ones.

    # on the GPU machine: every kernel of one eager forward, by the aten op that launched it
    python benchmarks/gpu_kernels.py measure --out OUT/kernels.csv
    # anywhere: the eager forward per kernel, and host time per library op by its kernel count
    python benchmarks/gpu_kernels.py host OUT/kernels.csv --out host.md
    # anywhere: the same ops priced by a profile (eager's kernels, before in-model terms),
    # summed per aten op and model, beside the measured sums
    python benchmarks/gpu_kernels.py compare OUT/kernels.csv \\
        --profile benchmarks/results/gpu-h200/h200-profile-run3-refit.json --out compare.md

``measure`` runs each model (``--models``, corpus names; random weights) eagerly at each
``--batches`` on the GPU, three warm-up forwards, then one forward under ``torch.profiler``
(CUDA and CPU activity). Each GPU kernel is attributed to the innermost aten op that launched it
and to that op's top-level aten op (the one Python called); one row per launching op: its kernels,
their summed durations (device time, the gaps between kernels excluded), their names, and the
host time of the launching op and of its top-level op (profiled, so each carries the profiler's
own cost of a few µs). Two rows per model and batch: ``__graph__`` holds the forward's time as a
replayed CUDA graph of repeated forwards (``ftmodel.measure.captured_repeats``: device time with
the gaps), ``__eager__`` the eager forward's time (CUDA events, not profiled; ``host_us``) and
the summed host time of every top-level aten op in the profiled forward (``top_host_us``: what
the rest of the forward's time, Python and module calls, is not).

``host`` reads the host side of a ``measure`` file: per model and batch, the eager forward's
time (unprofiled) per kernel the profiler saw; per library op (``aten::cudnn_convolution``,
``aten::addmm`` ...), how many kernels one call launched and the op's median profiled host time
at each count (the profiler's own cost per op is the same at every count, so the step between
counts is the host cost of one more launch inside the op).

``compare`` lowers the same models for eager on ``--profile`` and prices their kernels
(``Predictor.kernel_arrays``: curves, hot and cold operands; no in-model terms), then sums
measured and predicted device time by op class, mapped from the top-level aten op's name.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_live import ZOO_MODELS  # noqa: E402

FIELDS = ("model", "batch", "index", "top_op", "op", "shapes", "n_kernels", "device_us",
          "host_us", "top_host_us", "kernels")

# the op class of a top-level aten op, for the comparison (the tracer's classes)
CLASS_OF_OP = {
    "aten::conv2d": "conv", "aten::convolution": "conv", "aten::conv1d": "conv",
    "aten::linear": "gemm", "aten::addmm": "gemm", "aten::mm": "gemm", "aten::matmul": "gemm",
    "aten::bmm": "bmm", "aten::baddbmm": "bmm",
    "aten::scaled_dot_product_attention": "attention",
    "aten::batch_norm": "norm", "aten::layer_norm": "norm", "aten::group_norm": "norm",
    "aten::max_pool2d": "pool", "aten::adaptive_avg_pool2d": "pool", "aten::avg_pool2d": "pool",
    "aten::softmax": "softmax", "aten::_softmax": "softmax",
    "aten::embedding": "embedding", "aten::mean": "reduction", "aten::sum": "reduction",
    "aten::cat": "copy", "aten::contiguous": "copy", "aten::clone": "copy", "aten::copy_": "copy",
}

# a predicted class under the name its top-level aten op has (a grouped or depthwise
# convolution is aten::conv2d too)
PREDICTED_AS = {"conv_grouped": "conv"}


def _ancestors(evt: Any) -> Any:
    while evt.cpu_parent is not None:
        evt = evt.cpu_parent
    return evt


def _forward_rows(name: str, batch: int, fn: Any) -> list[dict[str, Any]]:
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 record_shapes=True) as prof:
        fn()
        torch.cuda.synchronize()
    tops = [e for e in prof.events() if e.cpu_parent is None and e.name.startswith("aten::")]
    rows: list[dict[str, Any]] = [{"model": name, "batch": batch, "index": -2,
                                   "top_op": "__eager__", "op": "__eager__",
                                   "top_host_us": round(sum(e.cpu_time_total for e in tops), 3)}]
    events = sorted((e for e in prof.events() if e.kernels), key=lambda e: e.time_range.start)
    for i, e in enumerate(events):
        top = _ancestors(e)
        rows.append({"model": name, "batch": batch, "index": i, "top_op": top.name, "op": e.name,
                     "shapes": str(top.input_shapes)[:200], "n_kernels": len(e.kernels),
                     "device_us": round(sum(k.duration for k in e.kernels), 3),
                     "host_us": round(e.cpu_time_total, 3),
                     "top_host_us": round(top.cpu_time_total, 3),
                     "kernels": ";".join(k.name[:60] for k in e.kernels)[:400]})
    return rows


def measure(out: Path, models: list[str], batches: list[int]) -> None:
    from ftmodel.measure import captured_repeats, measure_interleaved
    from ftmodel.tools.corpus import get_corpus_model
    from ftmodel.tracing.inputs import resolve_inputs
    with open(out, "w", newline="") as f:
        csv.DictWriter(f, fieldnames=FIELDS).writeheader()
    for name in models:
        zm = get_corpus_model(name)
        for b in batches:
            torch.manual_seed(0)
            model = zm.build().eval().to("cuda")
            inp = resolve_inputs(model, zm.make_inputs(b), b).map(lambda t: t.to("cuda"))

            def call(m: Any = model, i: Any = inp) -> object:
                with torch.no_grad():
                    return m(*i.args, **i.kwargs)
            rows = _forward_rows(name, b, call)
            graph, reps = captured_repeats(call, "cuda")
            t = measure_interleaved({"g": graph, "e": call}, device="cuda", rounds=5,
                                    round_s=0.05)
            rows[0]["host_us"] = round(t["e"].time_s * 1e6, 3)
            rows.append({"model": name, "batch": b, "index": -1, "top_op": "__graph__",
                         "op": "__graph__", "n_kernels": sum(r.get("n_kernels", 0) for r in rows),
                         "device_us": round(t["g"].time_s / reps * 1e6, 3)})
            with open(out, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=FIELDS).writerows(rows)
            summed = sum(r["device_us"] for r in rows[1:-1])
            print(f"{name} b{b}: {len(rows) - 2} ops, {rows[-1]['n_kernels']} kernels, "
                  f"{summed:.1f} us of kernels, {rows[-1]['device_us']:.1f} us as a graph; "
                  f"eager {rows[0]['host_us']:.1f} us, {rows[0]['top_host_us']:.1f} us in "
                  "top-level aten ops (profiled)", flush=True)
            del graph, model
            torch.cuda.empty_cache()


def compare(measured: Path, profile: str, out: Path) -> None:
    from ftmodel.api import Predictor
    from ftmodel.tools.corpus import get_corpus_model
    with open(measured) as f:
        rows = list(csv.DictReader(f))
    points = sorted({(r["model"], int(r["batch"])) for r in rows})
    pred = Predictor("eager", profile)
    lines = [f"# Per-class device time: {measured.name} against {profile}", "",
             "| model | batch | class | ops measured | µs measured | kernels predicted | "
             "µs predicted | ratio |", "|---|---|---|---|---|---|---|---|"]
    for name, b in points:
        meas: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        graph = 0.0
        for r in rows:
            if (r["model"], int(r["batch"])) != (name, b):
                continue
            if r["top_op"] == "__graph__":
                graph = float(r["device_us"])
                continue
            if r["top_op"] == "__eager__":
                continue
            cls = CLASS_OF_OP.get(r["top_op"], "elementwise")
            meas[cls][0] += 1
            meas[cls][1] += float(r["device_us"])
        zm = get_corpus_model(name)
        torch.manual_seed(0)
        model = zm.build().eval()
        prog = pred.lower(model, zm.make_inputs, b, pred.trace(model, zm.make_inputs, b))
        arr = pred.kernel_arrays(prog.kernels)
        got: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        for k, d in zip(prog.kernels, arr.device_s):
            cls = PREDICTED_AS.get(k.op_class, k.op_class)
            cls = cls if cls in set(CLASS_OF_OP.values()) else "elementwise"
            got[cls][0] += 1
            got[cls][1] += float(d) * 1e6
        for cls in sorted(set(meas) | set(got), key=lambda c: -meas[c][1]):
            m, p = meas[cls], got[cls]
            ratio = f"{p[1] / m[1]:.2f}" if m[1] else ""
            lines.append(f"| {name} | {b} | {cls} | {m[0]:.0f} | {m[1]:.1f} | {p[0]:.0f} | "
                         f"{p[1]:.1f} | {ratio} |")
        tm, tp = sum(v[1] for v in meas.values()), sum(v[1] for v in got.values())
        lines.append(f"| {name} | {b} | **all** (graph replay {graph:.1f} µs) | | {tm:.1f} | "
                     f"{len(prog.kernels)} | {tp:.1f} | {tp / tm:.2f} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


HOST_OPS = ("aten::cudnn_convolution", "aten::mm", "aten::addmm", "aten::bmm",
            "aten::native_layer_norm", "aten::cudnn_batch_norm", "aten::_efficient_attention_forward",
            "aten::add", "aten::mul", "aten::clamp_min_", "aten::copy_", "aten::cat")


def host(measured: Path, out: Path) -> None:
    with open(measured) as f:
        rows = list(csv.DictReader(f))
    kernels: dict[tuple[str, str], int] = defaultdict(int)
    eager: dict[tuple[str, str], float] = {}
    by_count: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in rows:
        key = (r["model"], r["batch"])
        if r["top_op"] == "__eager__":
            eager[key] = float(r["host_us"])
        elif r["top_op"] != "__graph__":
            kernels[key] += int(r["n_kernels"])
            by_count[(r["op"], int(r["n_kernels"]))].append(float(r["host_us"]))
    lines = [f"# Host side of one eager forward: {measured.name}", "",
             "| model | batch | eager forward µs (unprofiled) | kernels | µs per kernel |",
             "|---|---|---|---|---|"]
    per_kernel = []
    for (name, b), t in eager.items():
        n = kernels[(name, b)]
        per_kernel.append(t / max(n, 1))
        lines.append(f"| {name} | {b} | {t:.0f} | {n} | {t / max(n, 1):.1f} |")
    per_kernel.sort()
    lines += ["", f"Median µs per kernel: {per_kernel[len(per_kernel) // 2]:.1f} "
              f"(min {per_kernel[0]:.1f}, max {per_kernel[-1]:.1f}).", "",
              "| library op | kernels per call | calls | median host µs (profiled) |",
              "|---|---|---|---|"]
    for op in HOST_OPS:
        for n in sorted(c for o, c in by_count if o == op):
            v = sorted(by_count[(op, n)])
            lines.append(f"| {op} | {n} | {len(v)} | {v[len(v) // 2]:.1f} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--models", default=",".join(ZOO_MODELS))
    m.add_argument("--batches", default="1,32")
    c = sub.add_parser("compare")
    c.add_argument("measured", type=Path)
    c.add_argument("--profile", required=True)
    c.add_argument("--out", type=Path, required=True)
    h = sub.add_parser("host")
    h.add_argument("measured", type=Path)
    h.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.cmd == "measure":
        measure(args.out, args.models.split(","), [int(x) for x in args.batches.split(",")])
    elif args.cmd == "host":
        host(args.measured, args.out)
    else:
        compare(args.measured, args.profile, args.out)


if __name__ == "__main__":
    main()
