"""Per-operator diagnosis: torch.profiler self-CPU time vs predicted time, for one model × batch.

    python benchmarks/diagnose.py --profile P.json --model gpt2-small4@64 --batch 16
    python benchmarks/diagnose.py --profile P.json --model fastvit_t8@128 --batch 16  # corpus

Corpus models: diagnose the tuning half only (``ftmodel.tools.corpus.tuning()``); the held-out half is
measured and reported, never studied.

Prints, per aten operator, the measured self CPU time (summed over calls, median of several
profiled passes) next to the predicted device time and kernel host cost. A tool for finding which
op class a profile mispredicts; it writes nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.estimate.timeline import host_costs_s  # noqa: E402
from ftmodel.hardware.profile import read_profile  # noqa: E402
from ftmodel.tools.corpus import get_corpus_model  # noqa: E402
from ftmodel.errors import UnknownNameError  # noqa: E402
from ftmodel.tools.zoo import get_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from ftmodel.measure import keep_heap
    keep_heap()  # the steady state the prediction models
    try:
        zm = get_model(args.model)
    except UnknownNameError:
        zm = get_corpus_model(args.model)  # study tuning-half models only
    model = zm.build()
    pred = Predictor("eager", read_profile(args.profile))
    tr = pred.trace(model, zm.make_inputs, args.batch)
    prog = pred.framework.lower(tr)
    ks = pred.kernel_arrays(prog.kernels).device_s
    hs = host_costs_s(prog, pred.fw_host, [])
    pred_by_op: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for k, d, h in zip(prog.kernels, ks, hs):
        name = k.members[0].replace("aten.", "aten::").rsplit(".", 1)[0]
        row = pred_by_op[name]
        row[0] += 1
        row[1] += d
        row[2] += h
    x = zm.make_inputs(args.batch)
    call = (lambda: model(**x)) if isinstance(x, dict) else (lambda: model(x))  # noqa: E731
    with torch.no_grad():
        for _ in range(3):
            call()
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                call()
    meas: dict[str, float] = defaultdict(float)
    for ev in prof.key_averages():
        if ev.key.startswith("aten::"):
            meas[ev.key] += ev.self_cpu_time_total / 5 / 1e6
    total = sum(meas.values())
    print(f"{args.model} b{args.batch}: profiled aten self-CPU {total * 1e3:.2f} ms/pass; "
          f"predicted device {ks.sum() * 1e3:.2f} ms + host {hs.sum() * 1e3:.2f} ms")
    print(f"{'op':<44}{'n':>5}{'meas ms':>10}{'pred dev':>10}{'pred host':>10}")
    for op in sorted(set(meas) | set(pred_by_op), key=lambda o: -max(meas.get(o, 0),
                                                                     pred_by_op[o][1])):
        r = pred_by_op.get(op, [0, 0.0, 0.0])
        if meas.get(op, 0) < 2e-5 and r[1] < 2e-5:
            continue
        print(f"{op:<44}{int(r[0]):>5}{meas.get(op, 0) * 1e3:>10.3f}{r[1] * 1e3:>10.3f}"
              f"{r[2] * 1e3:>10.3f}")


if __name__ == "__main__":
    main()
