"""The ``ftmodel`` command line: predict, calibrate, validate, profiles, demo.

    ftmodel predict resnet50 --gpu cpu --batch 1,8,32
    ftmodel calibrate --device cpu --frameworks eager --out my-cpu.json
    ftmodel validate resnet18@112 --profile my-cpu.json
    ftmodel profiles
    ftmodel demo
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ftmodel.errors import FtmodelError

__all__ = ["main"]


def _batches(text: str) -> list[int]:
    try:
        return [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise SystemExit(f"--batch must be comma-separated integers like 1,2,4, got {text!r}")


def _load_model(spec: str) -> tuple[Any, Any]:
    """A zoo name, or torchvision:<arch> (224×224 default inputs)."""
    from ftmodel.zoo import get_model
    if spec.startswith("torchvision:"):
        import torchvision
        arch = spec.split(":", 1)[1]
        if not hasattr(torchvision.models, arch):
            raise SystemExit(f"torchvision has no model {arch!r}")
        return getattr(torchvision.models, arch)(weights=None).eval(), None
    zm = get_model(spec)
    return zm.build(), zm.make_inputs


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=title)
    for c in columns:
        t.add_column(c, justify="right" if c not in ("model", "regime", "device") else "left")
    for r in rows:
        t.add_row(*[str(v) for v in r])
    Console().print(t)


def _fmt_x(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def cmd_predict(args: argparse.Namespace) -> int:
    from ftmodel.api import predict_latency
    model, make_inputs = _load_model(args.model)
    preds = predict_latency(model, args.framework, args.gpu, _batches(args.batch),
                            inputs=make_inputs, dtype=args.dtype, host=args.host)
    rows = [(p.batch, f"{p.latency_ms:.3f}", f"{p.overhead_s * 1e3:.3f}",
             f"{p.compute_s * 1e3:.3f}", p.regime, f"{p.framework_tax:.0%}", p.n_launches,
             f"{p.macs / 1e9:.3f}") for p in preds]
    _table(f"{args.model} · {preds[0].framework} · {preds[0].device} · {preds[0].dtype} "
           f"(crossover batch {_fmt_x(preds[0].crossover_batch)})",
           ["batch", "latency ms", "host ms", "device ms", "regime", "tax", "launches", "GMACs"],
           rows)
    for w in preds[0].warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from calibration.suite import calibrate
    fws = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    try:
        prof = calibrate(args.device, fws, args.out, threads=args.threads, quick=args.quick,
                         progress=not args.no_progress)
    except KeyboardInterrupt:
        print("interrupted: the measurements so far are kept in the profile (marked incomplete)",
              file=sys.stderr)
        return 130
    from ftmodel.hardware.registry import default_profile_path
    path = args.out or default_profile_path(prof.name)
    print(f"wrote {path} ({prof.provenance['duration_s']} s, {len(prof.device.op_classes)} op "
          f"classes, threads={prof.provenance['threads']})")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from ftmodel.api import Predictor
    from ftmodel.measure import set_threads
    from ftmodel.validation import compare_live
    threads = set_threads(args.threads)
    predictor = Predictor(args.framework, args.profile)
    model, make_inputs = _load_model(args.model)
    if make_inputs is None:
        from ftmodel.tracing.inputs import default_inputs
        make_inputs = lambda b: default_inputs(model, b).args  # noqa: E731
    points = compare_live(args.model, model, make_inputs, _batches(args.batch), predictor)
    rows = [(p.batch, f"{p.measured_s * 1e3:.3f}", f"{p.predicted_s * 1e3:.3f}",
             f"{(p.predicted_s / p.measured_s - 1):+.1%}", f"{p.spread:.1%}", p.regime)
            for p in points]
    _table(f"{args.model} · {args.framework} · live on this CPU ({threads} threads)",
           ["batch", "measured ms", "predicted ms", "error", "noise", "regime"], rows)
    return 0


def cmd_profiles(args: argparse.Namespace) -> int:
    from ftmodel.hardware.registry import list_profiles, profile_home
    entries = list_profiles()
    rows = [(e.name, e.kind, e.device, ", ".join(e.aliases[:4]), e.source) for e in entries]
    _table(f"profiles (user cache: {profile_home()})", ["name", "kind", "device", "aliases",
                                                        "source"], rows)
    if not entries:
        print("no profiles yet: run `ftmodel calibrate --device cpu`")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from ftmodel.demo import run_demo
    return run_demo(recalibrate=args.recalibrate)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ftmodel", description="Predict inference latency, "
                                 "framework tax included.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="predict latency per batch size")
    p.add_argument("model", help="zoo name (see ftmodel.zoo) or torchvision:<arch>")
    p.add_argument("--framework", "-f", default="eager")
    p.add_argument("--gpu", "--device", default="auto", help="profile name or path")
    p.add_argument("--batch", "-b", default="1,2,4,8,16,32")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--host", default=None, help="host profile (name or path)")
    p.set_defaults(fn=cmd_predict)
    c = sub.add_parser("calibrate", help="measure this machine and write a profile")
    c.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    c.add_argument("--frameworks", default="eager",
                   help="comma-separated: eager,onnxruntime,torchscript,inductor (eager's sweeps "
                        "give the shared device half, so eager is always calibrated)")
    c.add_argument("--out", default=None, help="profile path (default: the user cache)")
    c.add_argument("--threads", type=int, default=None)
    c.add_argument("--quick", action="store_true", help="fewer sizes (about 20 s)")
    c.add_argument("--no-progress", action="store_true")
    c.set_defaults(fn=cmd_calibrate)
    v = sub.add_parser("validate", help="measure one model live and compare with the prediction")
    v.add_argument("model")
    v.add_argument("--framework", "-f", default="eager")
    v.add_argument("--profile", default="cpu")
    v.add_argument("--batch", "-b", default="1,2,4,8,16,32")
    v.add_argument("--threads", type=int, default=None)
    v.set_defaults(fn=cmd_validate)
    pr = sub.add_parser("profiles", help="list built-in and calibrated profiles")
    pr.set_defaults(fn=cmd_profiles)
    d = sub.add_parser("demo", help="short calibration of this machine + example predictions")
    d.add_argument("--recalibrate", action="store_true")
    d.set_defaults(fn=cmd_demo)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except (FtmodelError, NotImplementedError) as err:
        print(f"ftmodel: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
