"""Kernel launches per forward on this GPU: torch.profiler's CUDA kernel events vs ftmodel's count.

    python benchmarks/gpu_launch_counts.py --profile G.json --batches 1,32 --out counts.csv

For each zoo model and batch, one eager forward is profiled after warm-up and its CUDA kernel
events (``DeviceType.CUDA`` activities: kernels and memcpy/memset the runtime issues) are counted;
the prediction's ``n_launches`` for the same model, batch and profile is written beside it, with
the host time per launch that the eager in-model fit implies. Needs a CUDA device.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.hardware.profile import read_profile  # noqa: E402
from ftmodel.tracing.inputs import resolve_inputs  # noqa: E402
from ftmodel.tools.zoo import VALIDATION_SET, get_model  # noqa: E402


def kernel_events(model: torch.nn.Module, args: tuple, kwargs: dict) -> Counter[str]:
    """Names of the CUDA activities one forward issues (after three warm-up forwards)."""
    with torch.no_grad():
        for _ in range(3):
            model(*args, **kwargs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            model(*args, **kwargs)
            torch.cuda.synchronize()
    return Counter(e.name for e in prof.events() if e.device_type == DeviceType.CUDA)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--profile", required=True)
    ap.add_argument("--models", default=",".join(VALIDATION_SET + ("resnet50", "bert-base")))
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--out", default="gpu-launch-counts.csv")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("gpu_launch_counts.py needs a CUDA device")
    predictor = Predictor("eager", read_profile(Path(args.profile)))
    batches = [int(b) for b in args.batches.split(",")]
    rows = []
    for name in args.models.split(","):
        zm = get_model(name)
        torch.manual_seed(0)
        model = zm.build().eval()
        preds = predictor.predict(model, batches, zm.make_inputs)
        model = model.to("cuda")
        for b, p in zip(batches, preds):
            inp = resolve_inputs(model, zm.make_inputs(b), b).map(lambda t: t.to("cuda"))
            events = kernel_events(model, inp.args, inp.kwargs)
            measured = sum(events.values())
            top = "; ".join(f"{n[:60]}×{c}" for n, c in events.most_common(4))
            rows.append({"model": zm.name, "batch": b, "profiler_kernels": measured,
                         "predicted_launches": p.n_launches,
                         "ratio": round(p.n_launches / max(measured, 1), 3), "top": top})
            print(f"{zm.name:<24} b{b:<4} profiler {measured:5d}  ftmodel {p.n_launches:5d}  "
                  f"ratio {p.n_launches / max(measured, 1):.2f}", flush=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
