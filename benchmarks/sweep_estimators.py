"""How far the same op-sweep samples move between passes of one process, for each way of
turning a sample's rounds and the speed references around them into one time.

    python benchmarks/sweep_estimators.py --classes gemm,bmm,conv,conv_grouped --passes 3 \\
        --out benchmarks/results/cpu-epyc/sweep-estimators.md

Times each class's calibration samples (``ftmodel.calibration.ops.CPU_GRID``, hot rounds as
``ftmodel calibrate`` times them, under a speed meter) ``--passes`` times, each pass over every
class in turn; each :class:`ftmodel.measure.Measurement` keeps its rounds as timed and the
references around them. Then, for
each estimator and each pair of passes, over the samples of more than 0.2 ms: the class's
offset (|median log ratio| between the two passes) and the per-sample scatter around it (median
absolute deviation of the log ratios). Estimators:

- ``fastest scaled round``: each round scaled by its own references, the fastest kept
  (``ftmodel.measure.fastest_plausible``; calibrations before 2026-11-28);
- ``median scaled round``: the same rounds' median;
- ``fastest over fastest``: the fastest round as timed over the fastest reference around the
  rounds (``ftmodel.measure.fastest_over_fastest``; calibrations from 2026-11-28), the GEMM's
  factor alone;
- ``fastest over fastest, class blend``: the same with the class's blend of the GEMM and memory
  references' factors (``ftmodel.speed.gemm_share``; calibrations since 2026-11-29);
- ``fastest as timed``: the fastest round, not scaled (what a machine without a meter gives).

Nothing else may run on the machine meanwhile.
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.calibration.ops import named_sweeps  # noqa: E402
from ftmodel.calibration.sweep_stage import caller, to_device  # noqa: E402
from ftmodel.errors import InvalidArgumentError  # noqa: E402
from ftmodel.measure import (Measurement, cpu_name, fastest_over_fastest,  # noqa: E402
                             fastest_plausible, keep_heap, measure_interleaved)
from ftmodel.speed import SpeedMeter, gemm_share, speed_normalised  # noqa: E402

BIG_S = 2e-4  # samples slower than this in every pass are compared


def _estimates(meter: SpeedMeter, m: Measurement, share: float) -> dict[str, float]:
    """A sample's time by each estimator, from its rounds as timed and their references
    (``share``: its class's share of the GEMM reference)."""
    scaled = [t * meter.factor(a, b) for t, (a, b) in zip(m.timed_round_s, m.references)]
    refs = [r for ab in m.references for r in ab]
    return {"fastest scaled round": fastest_plausible(scaled),
            "median scaled round": statistics.median(scaled),
            "fastest over fastest": fastest_over_fastest(meter, m.timed_round_s, refs),
            "fastest over fastest, class blend": fastest_over_fastest(
                meter, m.timed_round_s, refs, gemm_share=share),
            "fastest as timed": min(m.timed_round_s)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--classes", default="gemm,bmm,conv,conv_grouped")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.passes < 2:
        ap.error(f"--passes must be at least 2 to compare passes, got {args.passes}")
    try:
        sweeps = named_sweeps(args.classes)
    except InvalidArgumentError as err:
        ap.error(str(err))
    classes = list(sweeps)
    torch.set_num_threads(args.threads)
    keep_heap()  # the calibration's measurement protocol
    started = time.time()
    meter = SpeedMeter("cpu")
    passes: dict[str, list[dict[str, Measurement]]] = {c: [] for c in classes}
    with torch.no_grad(), speed_normalised(meter):
        for n in range(args.passes):
            for c in classes:
                fns = {s.label: caller(*to_device(s.module, s.inputs, "cpu")) for s in sweeps[c]}
                passes[c].append(measure_interleaved(fns, device="cpu", rounds=5, round_s=0.03))
                print(f"pass {n + 1}/{args.passes} {c} ({len(sweeps[c])} samples)", flush=True)
    lines = [f"# Op-sweep samples between passes, per estimator ({cpu_name()})", "",
             f"- date: {datetime.date.today()}; torch {torch.__version__}, {args.threads} "
             f"threads; {args.passes} passes; took {time.time() - started:.0f} s",
             f"- command: `python benchmarks/sweep_estimators.py --classes {args.classes} "
             f"--passes {args.passes} --out {args.out}`",
             f"- reference GEMM: nominal {meter.nominal_s * 1e3:.3f} ms, seen "
             f"{min(meter.seen_s) * 1e3:.3f}-{max(meter.seen_s) * 1e3:.3f} ms "
             f"(median {statistics.median(meter.seen_s) * 1e3:.3f}) over "
             f"{len(meter.seen_s)} references; memory reference seen "
             f"{min(meter.seen_memory_s) * 1e3:.3f}-{max(meter.seen_memory_s) * 1e3:.3f} ms "
             f"(median {statistics.median(meter.seen_memory_s) * 1e3:.3f})",
             "", "Over each pair of passes, samples slower than 0.2 ms: the class's offset "
             "(|median log ratio|) and the per-sample scatter around it (median absolute "
             "deviation of the log ratios); mean over the pairs.", "",
             "| class | samples | estimator | offset | per-sample scatter |",
             "|---|---|---|---|---|"]
    for c in classes:
        est = [{k: _estimates(meter, m, gemm_share(c)) for k, m in p.items()}
               for p in passes[c]]
        big = [k for k in est[0] if all(e[k]["fastest as timed"] > BIG_S for e in est)]
        for name in est[0][big[0]] if big else []:
            offs, mads = [], []
            for i in range(len(est)):
                for j in range(i + 1, len(est)):
                    logs = np.array([math.log(est[j][k][name] / est[i][k][name]) for k in big])
                    offs.append(abs(float(np.median(logs))))
                    mads.append(float(np.median(np.abs(logs - np.median(logs)))))
            lines.append(f"| {c} | {len(big)} | {name} | {np.mean(offs):.1%} | "
                         f"{np.mean(mads):.1%} |")
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
