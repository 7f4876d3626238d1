"""Host time of each aten op of a model's eager forward, replayed alone and unprofiled.

    # on the GPU machine
    python benchmarks/gpu_hostops.py measure --out OUT/hostops.csv [--models M1,M2] [--batches 1]
    # anywhere: the same ops' host prices in a profile, summed per op class and model
    python benchmarks/gpu_hostops.py compare OUT/hostops.csv --profile P.json --out hostops.md

``measure`` records every aten op one eager forward dispatches (a ``TorchDispatchMode``:
composite ops arrive decomposed, as the backend runs them), with its arguments, then times
each distinct call (op and argument shapes) alone: ``--reps`` back-to-back calls on the host
clock without synchronising, after a warm-up. On a GPU the launch queue takes each call while
its kernels take less time than the host spends launching them, so this is the call's host
cost (the row's device time, from CUDA events around synchronised calls, says whether that
held). One row per distinct call: its op class (the tracer's), how often the forward made it,
host and device µs per call; one ``__forward__`` row per model and batch with the forward's
own time (host clock, synchronised). Σ count × host against the forward's time says how much
of eager's time the ops themselves take and how much is Python between them; unlike
``gpu_kernels.py measure``, nothing here is profiled, so the profiler's own cost per CUDA
runtime call (large for cuBLAS and cuDNN calls) is not in the figures.

``compare`` prices each op class at the profile's eager host cost (``kernel:<class>`` or
``view`` / ``alloc``, times the in-model ``host_scale``) beside the measured sums.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpu_live import ZOO_MODELS  # noqa: E402

FIELDS = ("model", "batch", "op", "op_class", "shapes", "count", "host_us", "device_us")


class _Recorder(TorchDispatchMode):
    """Every aten call of the forward, with its arguments (kept alive for the replay)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        kwargs = kwargs or {}
        self.calls.append((func, args, kwargs))
        return func(*args, **kwargs)


def _shapes(args: Any) -> str:
    return str([tuple(a.shape) if isinstance(a, torch.Tensor) else
                [tuple(x.shape) for x in a if isinstance(x, torch.Tensor)]
                if isinstance(a, (list, tuple)) else None for a in args])[:200]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _time_call(func: Any, args: Any, kwargs: Any, device: str, reps: int
               ) -> tuple[float, float]:
    """(host seconds per call, unsynchronised; device seconds per call, synchronised)."""
    for _ in range(3):
        func(*args, **kwargs)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        func(*args, **kwargs)
    host = (time.perf_counter() - t0) / reps
    _sync(device)
    if not device.startswith("cuda"):
        return host, 0.0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        func(*args, **kwargs)
    end.record()
    torch.cuda.synchronize()
    return host, start.elapsed_time(end) / 1e3 / reps


def measure(out: Path, models: list[str], batches: list[int], device: str, reps: int) -> None:
    from ftmodel.tools.corpus import get_corpus_model
    from ftmodel.tracing.formulas import classify
    from ftmodel.tracing.inputs import resolve_inputs
    with open(out, "w", newline="") as f:
        csv.DictWriter(f, fieldnames=FIELDS).writeheader()
    for name in models:
        zm = get_corpus_model(name)
        for b in batches:
            torch.manual_seed(0)
            model = zm.build().eval().to(device)
            inp = resolve_inputs(model, zm.make_inputs(b), b).map(lambda t: t.to(device))
            with torch.no_grad():
                for _ in range(3):
                    model(*inp.args, **inp.kwargs)
                _sync(device)
                t0 = time.perf_counter()
                for _ in range(reps):
                    model(*inp.args, **inp.kwargs)
                _sync(device)
                forward_s = (time.perf_counter() - t0) / reps
                rec = _Recorder()
                with rec:
                    model(*inp.args, **inp.kwargs)
                groups: dict[tuple[str, str], list[Any]] = {}
                for func, args, kwargs in rec.calls:
                    key = (str(func), _shapes(args))
                    if key in groups:
                        groups[key][0] += 1
                    else:
                        groups[key] = [1, func, args, kwargs]
                rows: list[dict[str, Any]] = [{"model": name, "batch": b, "op": "__forward__",
                                               "count": 1, "host_us": round(forward_s * 1e6, 3)}]
                for (op, shapes), (count, func, args, kwargs) in groups.items():
                    if func._schema.is_mutable and any(  # replays would shift integer indices
                            isinstance(a, torch.Tensor) and not a.is_floating_point()
                            for a in args):
                        print(f"{name} b{b} {op}: not replayed (mutates integer inputs)")
                        continue
                    try:
                        host, dev = _time_call(func, args, kwargs, device, reps)
                    except Exception as err:  # an op that cannot run twice (consumed state)
                        print(f"{name} b{b} {op}: not replayed ({type(err).__name__})")
                        continue
                    rows.append({"model": name, "batch": b, "op": op,
                                 "op_class": classify(func, args), "shapes": shapes,
                                 "count": count, "host_us": round(host * 1e6, 3),
                                 "device_us": round(dev * 1e6, 3)})
            with open(out, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=FIELDS).writerows(rows)
            summed = sum(r["count"] * r["host_us"] for r in rows[1:])
            print(f"{name} b{b}: forward {forward_s * 1e6:.1f} us, {len(rec.calls)} aten calls "
                  f"({len(rows) - 1} distinct), their host time alone {summed:.1f} us",
                  flush=True)
            del model, rec, groups


def compare(measured: Path, profile: str, out: Path) -> None:
    from ftmodel.hardware.profile import read_profile
    host = read_profile(profile).host
    if host is None or "eager" not in host.frameworks:
        raise SystemExit(f"{profile} has no eager host costs to price the ops with")
    eager = host.frameworks["eager"]
    scale = eager.in_model.get("host_scale", 1.0)
    per = eager.per_event_s

    def price(op_class: str) -> float:
        key = op_class if op_class in ("view", "alloc") else f"kernel:{op_class}"
        return scale * per.get(key, per.get("kernel:elementwise", 0.0))

    with open(measured) as f:
        rows = list(csv.DictReader(f))
    lines = [f"# Host time per op class, replayed alone: {measured.name} against {profile}", "",
             "| model | batch | class | calls | µs measured | µs priced | ratio |",
             "|---|---|---|---|---|---|---|"]
    points = sorted({(r["model"], int(r["batch"])) for r in rows})
    for name, b in points:
        mine = [r for r in rows if (r["model"], int(r["batch"])) == (name, b)]
        forward = next((float(r["host_us"]) for r in mine if r["op"] == "__forward__"), 0.0)
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        for r in mine:
            if r["op"] == "__forward__":
                continue
            n = float(r["count"])
            s = sums[r["op_class"]]
            s[0] += n
            s[1] += n * float(r["host_us"])
            s[2] += n * price(r["op_class"]) * 1e6
        for cls, (n, m, p) in sorted(sums.items(), key=lambda kv: -kv[1][1]):
            lines.append(f"| {name} | {b} | {cls} | {n:.0f} | {m:.1f} | {p:.1f} | "
                         f"{p / m:.2f} |" if m else f"| {name} | {b} | {cls} | {n:.0f} | 0 | "
                         f"{p:.1f} | |")
        tm, tp = sum(v[1] for v in sums.values()), sum(v[2] for v in sums.values())
        lines.append(f"| {name} | {b} | **all ops** (forward {forward:.1f} µs) | | {tm:.1f} | "
                     f"{tp:.1f} | {tp / tm:.2f} |")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--models", default=",".join(ZOO_MODELS))
    m.add_argument("--batches", default="1")
    m.add_argument("--device", default="cuda")
    m.add_argument("--reps", type=int, default=50)
    c = sub.add_parser("compare")
    c.add_argument("measured", type=Path)
    c.add_argument("--profile", required=True)
    c.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if args.cmd == "measure":
        measure(args.out, args.models.split(","), [int(x) for x in args.batches.split(",")],
                args.device, args.reps)
    else:
        compare(args.measured, args.profile, args.out)


if __name__ == "__main__":
    main()
