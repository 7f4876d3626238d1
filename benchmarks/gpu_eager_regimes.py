"""One eager forward timed in several regimes on a GPU, each in a fresh process.

    python benchmarks/gpu_eager_regimes.py --out regimes.csv            # on the GPU machine
    python benchmarks/gpu_eager_regimes.py --device cpu --out dry.csv   # a dry run anywhere

On the H200 VMs the same eager forward measured 2-3x apart between processes and minutes
(ResNet-34 at batch 1: 2.2 ms replayed in a plain loop, 3.2-6.1 ms in the zoo's interleaved
rounds), while the calibration's host programs agreed within 5-14% across three VMs. This
script separates the candidates: per regime, one model at batch 1, in its own process:

* ``loop``: ``n`` forwards back to back, one synchronisation at the end (host clock / n);
* ``per-call``: each forward between CUDA events, synchronised after each (the zoo's timing,
  ``ftmodel.measure.measure_interleaved``);
* ``timer``: ``torch.utils.benchmark.Timer.blocked_autorange`` (what a user runs);
* ``after-graph``: ``per-call`` after a CUDA graph of the same model was captured and
  replayed in the process;
* ``after-profiler``: ``per-call`` after one ``torch.profiler`` pass over the forward;
* ``interleaved``: ``per-call`` with a CUDA graph replay between every two forwards.

Each row also has the GPU's SM clock (MHz, NVML) read right after the timed calls, where NVML
is installed. Nothing is downloaded: corpus models with random weights.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
REGIMES = ("loop", "per-call", "timer", "after-graph", "after-profiler", "interleaved")
MODELS = ("resnet34@96", "bert-6x384@64", "regnet_x_400mf@112")
FIELDS = ("model", "regime", "device", "time_s", "spread", "calls", "sm_clock_mhz", "note")


def _sm_clock_mhz() -> int | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # NVML is optional: the clock is a by-product
        return None


def _per_call(fn: Callable[[], object], device: str, calls: int,
              between: Callable[[], object] | None = None) -> list[float]:
    from ftmodel.measure import synchronize, time_once
    times = []
    for _ in range(calls):
        if between is not None:
            between()
            synchronize(device)
        times.append(time_once(fn, device))
    return times


def run_one(model_name: str, regime: str, device: str, calls: int) -> dict[str, Any]:
    """Time ``model_name``'s batch-1 eager forward in ``regime``, in this process."""
    import torch

    from ftmodel.measure import synchronize
    from ftmodel.tools.corpus import get_corpus_model
    from ftmodel.tracing.inputs import resolve_inputs
    torch.set_num_threads(2)
    zm = get_corpus_model(model_name)
    torch.manual_seed(0)
    model = zm.build().eval().to(device)
    inp = resolve_inputs(model, zm.make_inputs(1), 1).map(lambda t: t.to(device))

    def forward() -> object:
        with torch.no_grad():
            return model(*inp.args, **inp.kwargs)
    for _ in range(5):
        forward()
    synchronize(device)
    between: Callable[[], object] | None = None
    note = ""
    if regime in ("after-graph", "interleaved"):
        if device.startswith("cuda"):
            from ftmodel.frameworks.cudagraphs import capture_forward
            replay = capture_forward(model, inp.args, inp.kwargs)
            for _ in range(5):
                replay()
            synchronize(device)
            between = replay if regime == "interleaved" else None
        else:
            note = "no CUDA graph on this device"
    if regime == "after-profiler":
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda")
                                         else [])
        with profile(activities=acts):
            forward()
            synchronize(device)
    if regime == "loop":
        rounds = []
        for _ in range(5):
            synchronize(device)
            t0 = time.perf_counter()
            for _ in range(calls):
                forward()
            synchronize(device)
            rounds.append((time.perf_counter() - t0) / calls)
        times = rounds
    elif regime == "timer":
        from torch.utils.benchmark import Timer
        m = Timer(stmt="forward()", globals={"forward": forward},
                  num_threads=2).blocked_autorange(min_run_time=1.0)
        times = list(m.times)
    else:
        times = _per_call(forward, device, calls, between)
    clock = _sm_clock_mhz() if device.startswith("cuda") else None
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return {"model": model_name, "regime": regime, "device": device,
            "time_s": statistics.median(times), "spread": round((q[2] - q[0]) / q[1], 4),
            "calls": len(times), "sm_clock_mhz": clock, "note": note}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--regimes", default=",".join(REGIMES))
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "REGIME"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:  # the child: one model in one regime, a JSON row on stdout
        print(json.dumps(run_one(args.one[0], args.one[1], args.device, args.calls)))
        return
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for name in args.models.split(","):
            for regime in args.regimes.split(","):
                cmd = [sys.executable, __file__, "--out", "-", "--device", args.device,
                       "--calls", str(args.calls), "--one", name, regime]
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                try:
                    row = json.loads(res.stdout.strip().splitlines()[-1])
                except (IndexError, json.JSONDecodeError):
                    row = {"model": name, "regime": regime, "device": args.device,
                           "note": f"failed: {res.stderr.strip()[-200:]}"}
                w.writerow(row)
                f.flush()
                t = row.get("time_s")
                print(f"{name} {regime}: " + (f"{t * 1e3:.3f} ms, spread {row['spread']}, "
                                               f"SM {row.get('sm_clock_mhz')} MHz"
                                               if t else row["note"]), flush=True)


if __name__ == "__main__":
    main()
