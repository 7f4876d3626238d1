"""Do glibc's page faults explain what the oracle under-predicts? Same candidates, two allocators.

    python benchmarks/page_faults.py --profile benchmarks/results/cpu-xeon/cpu-profile.json
    python benchmarks/page_faults.py --profile P --zoo resnet18@112:32,mobilenet_v2@112:32 --out O

Picks the candidates of ``benchmarks/oracle_rank.py``'s sample (same space, seed and count) with
the largest and the smallest activation one kernel writes at ``--batch`` (fake-tensor trace, no
weights), then measures each twice on this CPU, in two child processes:

* ``default``: glibc malloc as it comes. Its mmap and heap-trim thresholds move with the sizes
  freed; a buffer of tens of MiB can go back to the OS after a forward and be faulted in again
  (one minor fault per 4 KiB page) by the next.
* ``steady``: ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` and ``MALLOC_TOP_PAD_`` set so
  that glibc keeps its heap mapped between forwards (setting them also turns off the thresholds'
  adjustment).

With ``--zoo`` (``name:batch,...``, models of :mod:`ftmodel.tools.zoo`) those models are measured and
predicted instead (``predict_latency``), all in one process as well: whether glibc trims its heap
depends on every size the process has freed, so a model's time under the defaults depends on
what ran next to it.

Each child measures the candidates in the same interleaved rounds (eager, fixed threads,
warm-up, fastest round's median) and counts the minor page faults the measurement made
(``getrusage``). The prediction is the oracle's, from the profile; it is the same for both.
Writes ``<out>.csv`` and ``<out>-summary.md``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.api import predict_latency  # noqa: E402
from ftmodel.frameworks import eager  # noqa: E402
from ftmodel.measure import cpu_name, measure_interleaved, set_threads  # noqa: E402
from ftmodel.oracle import CostOracle  # noqa: E402
from ftmodel.oracle.search_space import MobileNetV2Space  # noqa: E402
from ftmodel.tracing.dispatch import trace  # noqa: E402
from ftmodel.tracing.inputs import as_inputs  # noqa: E402
from ftmodel.tools.validation import eager_call  # noqa: E402
from ftmodel.tools.zoo import ZOO  # noqa: E402

STEADY_ENV = {"MALLOC_MMAP_THRESHOLD_": "2147483647", "MALLOC_TRIM_THRESHOLD_": "4294967295",
              "MALLOC_TOP_PAD_": "536870912"}
MIB = 1 << 20


def _configs(args: argparse.Namespace) -> tuple[MobileNetV2Space, list]:
    space = MobileNetV2Space(resolution=args.resolution)
    rng = random.Random(args.seed)
    return space, [space.sample(rng) for _ in range(args.n)]


def _zoo_points(spec: str) -> list[tuple[str, int]]:
    points = []
    for item in spec.split(","):
        name, _, batch = item.partition(":")
        if name not in ZOO or not batch.isdigit():
            raise SystemExit(f"--zoo item {item!r}: expected NAME:BATCH with NAME one of "
                             f"{', '.join(ZOO)}")
        points.append((name, int(batch)))
    return points


def _child(args: argparse.Namespace) -> None:
    """Measure the chosen candidates (or zoo models) here; print {key: [seconds, spread]} and
    the faults."""
    set_threads(args.threads)
    torch.manual_seed(0)
    fns = {}
    if args.zoo:
        for name, b in _zoo_points(args.zoo):
            fns[f"{name}:{b}"] = eager_call(ZOO[name].build().eval(),
                                            as_inputs(ZOO[name].make_inputs(b)))
    else:
        space, cfgs = _configs(args)
        for i in args.indices:
            fns[str(i)] = eager_call(space.build(cfgs[i]).eval(),
                                     as_inputs(space.inputs(args.batch)))
    with torch.no_grad():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        res = measure_interleaved(fns, rounds=args.rounds, round_s=args.round_s, max_reps=20)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    reps = sum(m.n_samples for m in res.values())
    print(json.dumps({"times": {k: [m.time_s, m.spread] for k, m in res.items()},
                      "faults_per_forward": faults / max(reps, 1)}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", required=True, help="a calibrated profile of this CPU")
    ap.add_argument("--n", type=int, default=60, help="sample size (as oracle_rank.py)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--resolution", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--pick", type=int, default=4, help="candidates from each end")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--round-s", type=float, default=0.2)
    ap.add_argument("--zoo", default=None, help="zoo models instead: NAME:BATCH,...")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "local" / "page-faults"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--indices", type=lambda s: [int(v) for v in s.split(",")],
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args)
        return 0
    if args.zoo:
        points = _zoo_points(args.zoo)
        keys = [f"{n}:{b}" for n, b in points]
        labels, configs = dict(zip(keys, keys)), dict(zip(keys, keys))
        largest, predicted = {}, {}
        for n, b in points:  # one model each: traced for its largest write, then predicted
            model, xs = ZOO[n].build().eval(), ZOO[n].make_inputs(b)
            kernels = eager.lower(trace(model, xs)).kernels
            largest[f"{n}:{b}"] = max(k.bytes_written for k in kernels)
            predicted[f"{n}:{b}"] = predict_latency(model, "eager", args.profile, b,
                                                    inputs=xs).latency_s
        child = ["--zoo", args.zoo]
    else:
        space, cfgs = _configs(args)
        x = torch.empty(args.batch, 3, args.resolution, args.resolution, device="meta")
        sizes = {i: max(k.bytes_written for k in eager.lower(
            trace(space.build(c, device="meta"), (x,))).kernels) for i, c in enumerate(cfgs)}
        order = sorted(sizes, key=lambda i: sizes[i])
        picked = sorted(set(order[-args.pick:] + order[:args.pick]))
        keys = [str(i) for i in picked]
        labels = {str(i): f"c{i:02d}" for i in picked}
        configs = {str(i): str(cfgs[i]) for i in picked}
        largest = {str(i): sizes[i] for i in picked}
        oracle = CostOracle("eager", args.profile, heap="kept")
        predicted = {str(i): oracle.latency(space.build(cfgs[i], device="meta"), args.batch,
                                            space.input_spec()).latency_s for i in picked}
        child = ["--indices", ",".join(keys)]
    runs = {}
    for label, extra in (("default", {}), ("steady", STEADY_ENV)):
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | extra
        cmd = [sys.executable, __file__, "--child", "--profile", args.profile] + child + [
            f"--{k.replace('_', '-')}={getattr(args, k)}" for k in
            ("n", "seed", "resolution", "batch", "threads", "rounds", "round_s")]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"the {label} measurement failed (exit {proc.returncode}):\n"
                             f"{proc.stderr[-3000:]}")
        runs[label] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{label}: {runs[label]['faults_per_forward']:.0f} minor faults per forward")
    rows = []
    for i in keys:
        d, s = runs["default"]["times"][i], runs["steady"]["times"][i]
        rows.append({"candidate": labels[i], "config": configs[i],
                     "largest_write_mib": largest[i] / MIB, "predicted_ms": predicted[i] * 1e3,
                     "default_ms": d[0] * 1e3, "default_spread": d[1],
                     "steady_ms": s[0] * 1e3, "steady_spread": s[1]})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{out}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    cmd = " ".join(["python benchmarks/page_faults.py"] + (sys.argv[1:] if argv is None else argv))
    what = (f"zoo models at the batches named, measured in one process and predicted by "
            f"`predict_latency` with `{args.profile}`" if args.zoo else
            f"batch {args.batch}; candidates of `benchmarks/oracle_rank.py`'s sample (seed "
            f"{args.seed}, n {args.n}) with the {args.pick} largest and {args.pick} smallest "
            f"single-kernel writes, predicted by `CostOracle` with `{args.profile}`")
    lines = [
        "# Page faults: the same models under glibc's defaults and with its heap kept", "",
        f"`{cmd}`", "",
        f"Eager, {cpu_name()}, {args.threads} threads, torch {torch.__version__}; {what}. Steady: "
        + " ".join(f"`{k}={v}`" for k, v in STEADY_ENV.items()) + ". Minor page faults per timed "
        f"forward (warm-up calls' faults included): default "
        f"{runs['default']['faults_per_forward']:.0f}, steady "
        f"{runs['steady']['faults_per_forward']:.0f}.", "",
        "| model | largest write (MiB) | predicted ms | default ms | steady ms | "
        "predicted / default | predicted / steady |",
        "|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: -r["largest_write_mib"]):
        lines.append(f"| {r['candidate']} | {r['largest_write_mib']:.1f} | "
                     f"{r['predicted_ms']:.1f} | {r['default_ms']:.1f} | {r['steady_ms']:.1f} | "
                     f"{r['predicted_ms'] / r['default_ms']:.2f} | "
                     f"{r['predicted_ms'] / r['steady_ms']:.2f} |")
    for label in ("default", "steady"):
        med = statistics.median(r["predicted_ms"] / r[f"{label}_ms"] for r in rows)
        lines.append(f"\nMedian predicted / measured, {label}: {med:.2f}")
    Path(f"{out}-summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
