"""Measure some op classes of a CPU profile again, with the current sweep, into a copy of it.

    python benchmarks/resample_curves.py benchmarks/results/cpu-xeon/cpu-profile-x1.json \
        --classes pool,norm,gemm@mkldnn_rnn_layer --out /tmp/x1-resampled.json

A screen for a change to some classes' sweeps: re-predicting a committed corpus run with the
copy (``benchmarks/repredict.py``) separates the change from a fresh calibration's noise. It is
not a calibration: the classes measured now sit beside curves and in-model terms measured
another day, possibly at another speed of the machine. The copy's provenance lists the classes
measured again and when. Runs each class's stage as ``ftmodel calibrate`` does (hot and cold
rounds; variant curves; per-op curves of norm and pool; the per-call curve of fused LSTM layers, their host
cost priced with the profile's eager host part). CPU profiles only.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.calibration.ops import named_sweeps  # noqa: E402
from ftmodel.calibration.sweep_stage import class_stage, derived_curves, grouped_curves  # noqa: E402
from ftmodel.estimate.timeline import host_costs_s  # noqa: E402
from ftmodel.errors import InvalidArgumentError  # noqa: E402
from ftmodel.hardware.profile import read_profile, write_profile  # noqa: E402
from ftmodel.measure import cache_flusher, keep_heap, last_level_cache_bytes  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("--classes", required=True,
                    help="comma-separated sweep classes (e.g. pool,norm,gemm@mkldnn_rnn_layer)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    prof = read_profile(args.profile)
    if prof.device.type != "cpu":
        ap.error(f"{args.profile} is a {prof.device.type} profile; this script re-measures CPU "
                 "curves only")
    try:
        sweeps = named_sweeps(args.classes)
    except InvalidArgumentError as err:
        ap.error(str(err))
    classes = list(sweeps)
    torch.set_num_threads(args.threads)
    keep_heap()  # the calibration's measurement protocol
    flush = cache_flusher("cpu", last_level_cache_bytes("cpu"))
    fh = prof.host.frameworks["eager"]
    op_classes = dict(prof.device.op_classes)
    raw = dict(prof.provenance.get("raw_op_times", {}))
    with torch.no_grad():
        for cls in classes:
            print(f"measuring {cls} ({len(sweeps[cls])} samples)", flush=True)
            op_classes[cls], raw[cls], variants = class_stage(
                sweeps[cls], "cpu", 5, 0.03, flush,
                host_s=lambda prog: float(host_costs_s(prog, fh, []).sum()))
            # the variant curves (e.g. conv:mkldnn_unaligned) from the new samples, as the
            # calibration's sweep makes them
            op_classes = {k: v for k, v in op_classes.items() if not k.startswith(f"{cls}:")}
            op_classes.update(grouped_curves(f"{cls}:", op_classes[cls], variants))
            op_classes.update(derived_curves(cls, op_classes[cls], raw[cls]))
    provenance = dict(prof.provenance, raw_op_times=raw)
    provenance["resampled"] = list(provenance.get("resampled", [])) + [{
        "classes": classes, "from": str(args.profile),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}]
    out = dataclasses.replace(prof, device=dataclasses.replace(prof.device, op_classes=op_classes),
                              provenance=provenance)
    write_profile(out, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
