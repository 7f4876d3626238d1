"""The ``ftmodel`` command line: predict, compare, calibrate, validate, profiles, demo, report,
explain.

    ftmodel predict resnet50 --gpu cpu --batch 1,8,32
    ftmodel compare resnet50 --gpu rtx8000 --batch 1,8,64
    ftmodel calibrate --device cpu --frameworks eager --out my-cpu.json
    ftmodel calibrate --frameworks inductor --update --out my-cpu.json
    ftmodel validate resnet18@112 --profile my-cpu.json
    ftmodel profiles
    ftmodel demo
    ftmodel report resnet50 --gpu a100 --frameworks eager,onnxruntime,cudagraphs
    ftmodel explain bert-base --gpu a100 --framework eager --batch 1
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ftmodel.errors import FtmodelError
from ftmodel.measure import DEFAULT_MALLOC_HELP

__all__ = ["main"]


def _batches(text: str) -> list[int]:
    try:
        return [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise SystemExit(f"--batch must be comma-separated integers like 1,2,4, got {text!r}")


def _load_model(spec: str) -> tuple[Any, Any]:
    """A zoo name, or torchvision:<arch> (224×224 default inputs)."""
    from ftmodel.tools.zoo import get_model
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
                            inputs=make_inputs, dtype=args.dtype, host=args.host,
                            heap=args.heap)
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


def cmd_compare(args: argparse.Namespace) -> int:
    from ftmodel.tools.compare import compare_frameworks
    model, make_inputs = _load_model(args.model)
    fws = [f.strip() for f in args.frameworks.split(",") if f.strip()] if args.frameworks \
        else None
    cmp = compare_frameworks(model, args.gpu, _batches(args.batch), frameworks=fws,
                             inputs=make_inputs, dtype=args.dtype, host=args.host)
    names = list(cmp.predictions)
    rows = [[r["batch"], *(f"{r[f'{fw}_ms']:.3f} ({r[f'{fw}_regime'].split('-')[0]})"
                           for fw in names), r["fastest"]] for r in cmp.rows()]
    _table(f"{args.model} · {cmp.device} · {args.dtype}: predicted ms (regime)",
           ["batch", *names, "fastest"], rows)
    for fw, why in cmp.unavailable.items():
        print(f"{fw}: not predicted: {why}", file=sys.stderr)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from ftmodel.calibration.suite import calibrate
    fws = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    try:
        prof = calibrate(args.device, fws, args.out, threads=args.threads, quick=args.quick,
                         progress=not args.no_progress, update=args.update,
                         default_malloc=args.default_malloc)
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
    from ftmodel.measure import keep_heap, set_threads
    from ftmodel.tools.validation import compare_live
    threads = set_threads(args.threads)
    if not args.default_malloc:
        keep_heap()
    # the prediction models the heap state this process measures in
    predictor = Predictor(args.framework, args.profile,
                          heap="plain" if args.default_malloc else "kept")
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
    from ftmodel.tools.demo import run_demo
    return run_demo(recalibrate=args.recalibrate)


def _report_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in text).strip("-")


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ftmodel.tools.report import framework_curves, plot_report, report_markdown
    fws = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    model, make_inputs = _load_model(args.model)
    curves = framework_curves(model, fws, args.gpu, _batches(args.batch), inputs=make_inputs,
                              dtype=args.dtype, host=args.host)
    out = Path(args.out or f"report-{_report_name(args.model)}-{_report_name(str(args.gpu))}")
    device = next((c.predictions[0].device for c in curves if c.predictions), str(args.gpu))
    title = args.title or f"{args.model} on {device} ({args.dtype}): predicted latency per framework"
    png = plot_report(curves, out.with_suffix(".png"), title)
    command = (f"ftmodel report {args.model} --gpu {args.gpu} --frameworks {args.frameworks} "
               f"--batch {args.batch}" + ("" if args.dtype == "fp32" else f" --dtype {args.dtype}")
               + ("" if args.host is None else f" --host {args.host}"))
    md = report_markdown(curves, title, image=png.name, command=command)
    out.with_suffix(".md").write_text(md)
    rows = []
    for c in curves:
        for p in c.predictions:
            rows.append((c.framework, p.batch, f"{p.latency_ms:.3f}", f"{p.overhead_s * 1e3:.3f}",
                         f"{p.compute_s * 1e3:.3f}", p.regime, f"{p.framework_tax:.0%}",
                         _fmt_x(p.crossover_batch)))
        if not c.predictions:
            print(f"skipped {c.framework}: {c.skipped}", file=sys.stderr)
    _table(title, ["framework", "batch", "latency ms", "host ms", "device ms", "regime", "tax",
                   "crossover"], rows)
    print(f"wrote {png} and {out.with_suffix('.md')}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from ftmodel.api import predict_latency
    from ftmodel.tools.report import EXPLAIN_COLUMNS, explain_rows
    model, make_inputs = _load_model(args.model)
    p = predict_latency(model, args.framework, args.gpu, _batches(args.batch)[:1] or [1],
                        inputs=make_inputs, dtype=args.dtype, host=args.host)[0]
    rows, total = explain_rows(p, top=args.top, depth=args.depth)
    rows.append((total.module_path, f"{total.time_s * 1e3:.3f}", "100%",
                 f"{total.host_s * 1e3:.3f}", f"{total.device_s * 1e3:.3f}",
                 str(total.n_launches), f"{total.macs / 1e6:.1f}", f"{total.host_share:.0%}",
                 "100%"))
    _table(f"{args.model} · {p.framework} · {p.device} · batch {p.batch}: top {args.top} layers "
           f"by host + device time (latency {p.latency_ms:.3f} ms, {p.regime}, tax "
           f"{p.framework_tax:.0%}, {p.n_launches} launches)", list(EXPLAIN_COLUMNS), rows)
    for w in p.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ftmodel", description="Predict inference latency, "
                                 "framework tax included.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="predict latency per batch size")
    p.add_argument("model", help="zoo name (see ftmodel.tools.zoo) or torchvision:<arch>")
    p.add_argument("--framework", "-f", default="eager")
    p.add_argument("--gpu", "--device", default="auto", help="profile name or path")
    p.add_argument("--batch", "-b", default="1,2,4,8,16,32")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--host", default=None, help="host profile (name or path)")
    p.add_argument("--heap", choices=("plain", "kept"), default="plain",
                   help="CPU malloc state: plain (glibc's defaults, simulated page faults "
                   "counted; default) or kept (freed memory stays mapped, as with jemalloc or "
                   "tcmalloc)")
    p.set_defaults(fn=cmd_predict)
    cm = sub.add_parser("compare", help="each framework's predicted latency per batch, and "
                        "the fastest")
    cm.add_argument("model", help="zoo name (see ftmodel.tools.zoo) or torchvision:<arch>")
    cm.add_argument("--gpu", "--device", default="auto", help="profile name or path")
    cm.add_argument("--batch", "-b", default="1,2,4,8,16,32")
    cm.add_argument("--frameworks", default=None,
                    help="comma-separated (default: all that fit the device type)")
    cm.add_argument("--dtype", default="fp32")
    cm.add_argument("--host", default=None, help="host profile (name or path)")
    cm.set_defaults(fn=cmd_compare)
    c = sub.add_parser("calibrate", help="measure this machine and write a profile")
    c.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    c.add_argument("--frameworks", default="eager",
                   help="comma-separated: eager,onnxruntime,torchscript,inductor, and cudagraphs "
                        "on a GPU (eager's sweeps give the shared device half, so eager is always "
                        "calibrated)")
    c.add_argument("--out", default=None, help="profile path (default: the user cache)")
    c.add_argument("--threads", type=int, default=None)
    c.add_argument("--quick", action="store_true", help="fewer sizes (1-2 min on a 2-core machine)")
    c.add_argument("--update", action="store_true",
                   help="add (or re-measure) the non-eager frameworks named in --frameworks in "
                        "the existing profile at --out, keeping its eager and device parts (a "
                        "page-fault price from an older probe is measured again, with "
                        "--frameworks eager alone too)")
    c.add_argument("--no-progress", action="store_true")
    c.add_argument("--default-malloc", action="store_true", help=DEFAULT_MALLOC_HELP)
    c.set_defaults(fn=cmd_calibrate)
    v = sub.add_parser("validate", help="measure one model live and compare with the prediction")
    v.add_argument("model")
    v.add_argument("--framework", "-f", default="eager")
    v.add_argument("--profile", default="cpu")
    v.add_argument("--batch", "-b", default="1,2,4,8,16,32")
    v.add_argument("--threads", type=int, default=None)
    v.add_argument("--default-malloc", action="store_true", help=DEFAULT_MALLOC_HELP)
    v.set_defaults(fn=cmd_validate)
    pr = sub.add_parser("profiles", help="list built-in and calibrated profiles")
    pr.set_defaults(fn=cmd_profiles)
    d = sub.add_parser("demo", help="short calibration of this machine + example predictions")
    d.add_argument("--recalibrate", action="store_true")
    d.set_defaults(fn=cmd_demo)
    rp = sub.add_parser("report", help="figure + markdown: latency vs batch per framework")
    rp.add_argument("model", help="zoo name (see ftmodel.tools.zoo) or torchvision:<arch>")
    rp.add_argument("--gpu", "--device", default="auto", help="profile name or path")
    rp.add_argument("--frameworks", default="eager,torchscript,onnxruntime,inductor,cudagraphs",
                    help="comma-separated framework names")
    rp.add_argument("--batch", "-b", default="1,2,4,8,16,32,64,128,256")
    rp.add_argument("--dtype", default="fp32")
    rp.add_argument("--host", default=None, help="host profile (name or path)")
    rp.add_argument("--out", default=None,
                    help="output path without suffix (default report-<model>-<gpu>); "
                         "writes .png and .md")
    rp.add_argument("--title", default=None)
    rp.set_defaults(fn=cmd_report)
    ex = sub.add_parser("explain", help="per-layer breakdown of one prediction")
    ex.add_argument("model", help="zoo name (see ftmodel.tools.zoo) or torchvision:<arch>")
    ex.add_argument("--gpu", "--device", default="auto", help="profile name or path")
    ex.add_argument("--framework", "-f", default="eager")
    ex.add_argument("--batch", "-b", default="1", help="one batch size")
    ex.add_argument("--dtype", default="fp32")
    ex.add_argument("--host", default=None, help="host profile (name or path)")
    ex.add_argument("--top", type=int, default=15, help="layers shown")
    ex.add_argument("--depth", type=int, default=None,
                    help="group module paths to this many components (default: innermost)")
    ex.set_defaults(fn=cmd_explain)
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
