"""Per-node diagnosis under ONNX Runtime: its profiler's node times against predicted ones.

    python benchmarks/diagnose_ort.py --profile P.json --model resnet34@96 --batch 16
    python benchmarks/diagnose_ort.py --profile P.json --model synthetic:cnn3 --batch 4
    python benchmarks/diagnose_ort.py --profile P.json --model timm:efficientvit_b1@128 --batch 16
    python benchmarks/diagnose_ort.py --profile P.json --model path/file.py:factory \
        --input-shape 3x112x112 --batch 16

Corpus models: the tuning half only (``ftmodel.tools.corpus.tuning()``); a held-out name is
refused. ``synthetic:<name>`` takes one of the calibration's in-model networks,
``timm:<arch>@<side>`` a timm image model, ``path/file.py:factory`` a model of a file.

Prints, per ONNX op type of the optimized graph, the node count, the node time ONNX Runtime's
profiler records (per node the median over profiled passes, summed), the predicted device time
and the predicted host cost of the matching kernels; then the session's wall-clock time per
``run`` without the profiler (median of 21 calls), the profiled ``model_run`` time and the
sum of node times, so that the time spent outside the nodes (executor, allocations, thread-pool
wake-ups) can be read beside the prediction's host part. The profiler adds a few microseconds to
each node, so node times of tiny nodes read high. Writes nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.frameworks import onnxruntime as ort_fw  # noqa: E402
from ftmodel.hardware.profile import read_profile  # noqa: E402
from ftmodel.speed import median_of_calls  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from diagnose import model_by_name  # noqa: E402


def _op_type(member: str) -> str:
    return member.rsplit("::", 1)[-1]


def _wall_s(run: Callable[[], object], calls: int = 21) -> float:
    """Seconds of one ``run`` without the profiler: the median of ``calls`` after 3 warm-ups."""
    for _ in range(3):
        run()
    return median_of_calls(run, calls)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=20, help="profiled passes")
    ap.add_argument("--input-shape", default=None,
                    help="a file model's input shape without the batch (path/file.py:factory)")
    ap.add_argument("--nodes", type=int, default=0,
                    help="also list this many nodes, slowest first, beside their kernels")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, make_inputs = model_by_name(args.model, args.input_shape)
    pred = Predictor("onnxruntime", read_profile(args.profile), heap="kept")
    tr = pred.trace(model, make_inputs, args.batch)
    prog = pred.lower(model, make_inputs, args.batch, tr)
    tl = pred.program_timeline(prog)
    by_op: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0, 0.0])
    kernels_of: dict[str, list[tuple[Any, float]]] = defaultdict(list)  # op type -> in order
    for k, d, h in zip(prog.kernels, tl.device_s, tl.host_s):
        kernels_of[_op_type(k.members[0])].append((k, float(d)))
        row = by_op[_op_type(k.members[0])]
        row[0] += 1
        row[1] += float(d)
        row[2] += float(h)

    wall = _wall_s(ort_fw.runner(model, make_inputs, args.batch))
    with tempfile.TemporaryDirectory(prefix="ftmodel-ortdiag-") as tmp:
        art = ort_fw.build(model, make_inputs, args.batch, None, enable_profiling=True,
                           profile_dir=tmp)
        for _ in range(3):
            art.run()
        for _ in range(args.passes):
            art.run()
        events = json.loads(Path(art.session.end_profiling()).read_text())
    durs: dict[str, list[float]] = defaultdict(list)
    op_of: dict[str, str] = {}
    shapes: dict[str, str] = {}
    runs: list[float] = []
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") == "Node" and name.endswith("_kernel_time"):
            durs[name].append(float(e["dur"]) * 1e-6)
            op_of[name] = str(e.get("args", {}).get("op_name", "?"))
            shapes[name] = json.dumps(e.get("args", {}).get("input_type_shape", ""))
        elif e.get("cat") == "Session" and name == "model_run":
            runs.append(float(e["dur"]) * 1e-6)
    for name, v in durs.items():
        row = by_op[op_of[name]]
        row[3] += 1
        row[4] += statistics.median(v[-args.passes:])
    nodes_s = sum(r[4] for r in by_op.values())
    run_s = statistics.median(runs[-args.passes:]) if runs else float("nan")
    print(f"{args.model} b{args.batch}: wall {wall * 1e3:.3f} ms/run (no profiler); "
          f"profiled model_run {run_s * 1e3:.3f} ms, node times {nodes_s * 1e3:.3f} ms "
          f"(outside nodes {(run_s - nodes_s) * 1e3:.3f} ms)")
    print(f"predicted {tl.latency_s * 1e3:.3f} ms: device {tl.compute_s * 1e3:.3f} ms, host "
          f"{tl.overhead_s * 1e3:.3f} ms (per call {pred.fw_host.per_call_s * 1e6:.1f} us); "
          f"ratio to wall {tl.latency_s / wall:.2f}")
    print(f"{'op type':<28}{'kern':>5}{'nodes':>6}{'node ms':>10}{'pred dev':>10}"
          f"{'pred host':>10}{'dev/node':>9}")
    for op, r in sorted(by_op.items(), key=lambda kv: -max(kv[1][1], kv[1][4])):
        if r[1] < 1e-6 and r[4] < 1e-6:
            continue
        ratio = f"{r[1] / r[4]:.2f}" if r[4] > 0 else "-"
        print(f"{op:<28}{int(r[0]):>5}{int(r[3]):>6}{r[4] * 1e3:>10.3f}{r[1] * 1e3:>10.3f}"
              f"{r[2] * 1e3:>10.3f}{ratio:>9}")
    if args.nodes:
        _print_nodes(durs, op_of, shapes, kernels_of, args.passes, args.nodes)


def _print_nodes(durs: dict[str, list[float]], op_of: dict[str, str], shapes: dict[str, str],
                 kernels_of: dict[str, list[tuple[Any, float]]], passes: int, n: int) -> None:
    """The slowest nodes, each beside the kernel of the same op type at the same position in
    execution order (ORT's sequential executor runs the optimized graph's nodes in order)."""
    seen: dict[str, int] = defaultdict(int)
    rows = []
    for name in durs:  # first-appearance order is execution order
        op = op_of[name]
        i = seen[op]
        seen[op] += 1
        k, d = kernels_of[op][i] if i < len(kernels_of[op]) else (None, float("nan"))
        t = statistics.median(durs[name][-passes:])
        rows.append((t, name, op, d, k))
    print(f"\n{'node':<44}{'node us':>9}{'pred us':>9}{'ratio':>7}{'MMACs':>9}{'MB':>7}  variant")
    for t, name, op, d, k in sorted(rows, key=lambda r: -r[0])[:n]:
        macs = k.macs / 1e6 if k is not None else float("nan")
        mb = k.bytes_total / 1e6 if k is not None else float("nan")
        var = k.variant if k is not None else ""
        short = name.removesuffix("_kernel_time")[-43:]
        print(f"{short:<44}{t * 1e6:>9.1f}{d * 1e6:>9.1f}{d / t:>7.2f}{macs:>9.2f}{mb:>7.2f}  "
              f"{var} {shapes[name][:80]}")


if __name__ == "__main__":
    main()
