"""What the ``ftmodel`` commands predict, compare, validate, profiles, report and explain do,
given their parsed arguments. :mod:`ftmodel.cli` builds the parser, runs these, and runs
calibrate and demo itself (the only commands that import the calibration suite). Each returns
the process's exit status and prints its tables with rich."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ftmodel.errors import InvalidArgumentError

if TYPE_CHECKING:
    from torch import nn

    from ftmodel.tracing.inputs import InputSpec

__all__ = ["cmd_compare", "cmd_explain", "cmd_predict",
           "cmd_profiles", "cmd_report", "cmd_validate", "framework_list",
           "report_frameworks"]


def _batches(text: str) -> list[int]:
    try:
        batches = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        batches = []
    if not batches:
        raise InvalidArgumentError(f"--batch must be comma-separated integers like 1,2,4, got "
                                   f"{text!r}")
    return batches


def _load_model(args: argparse.Namespace) -> tuple[nn.Module, InputSpec]:
    """The model ``args.model`` names, with the inputs ``--input-shape`` / ``--seq-len`` ask
    for (:func:`ftmodel.tools.user_models.load_model`)."""
    from ftmodel.tools.user_models import load_model, parse_input_shape
    shape = None if args.input_shape is None else parse_input_shape(args.input_shape)
    return load_model(args.model, input_shape=shape, seq_len=args.seq_len)


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
    from ftmodel.inputs import decode
    model, inputs = _load_model(args)
    step = args.decode_context is not None  # one decode step per batch of sequences
    if step:
        inputs = decode(args.decode_context, args.cache)
    preds = predict_latency(model, args.framework, args.device, _batches(args.batch),
                            inputs=inputs, dtype=args.dtype, host=args.host, heap=args.heap,
                            speed=args.speed)
    rows = [(p.batch, f"{p.latency_ms:.3f}", f"{p.overhead_s * 1e3:.3f}",
             f"{p.compute_s * 1e3:.3f}", p.regime, f"{p.framework_tax:.0%}", p.n_launches,
             f"{p.macs / 1e9:.3f}", *([f"{p.tokens_per_s:,.0f}"] if step else []))
            for p in preds]
    what = f" · decode step at context {args.decode_context}" if step else ""
    what += " · at this machine's speed now" if args.speed == "now" else ""
    _table(f"{args.model} · {preds[0].framework} · {preds[0].device} · {preds[0].dtype}{what} "
           f"(crossover batch {_fmt_x(preds[0].crossover_batch)})",
           ["batch", "latency ms", "host ms", "device ms", "regime", "tax", "launches", "GMACs",
            *(["tokens/s"] if step else [])], rows)
    for w in preds[0].warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def framework_list(text: str) -> list[str]:
    """``--frameworks``: comma-separated names."""
    return [f.strip() for f in text.split(",") if f.strip()]


def cmd_compare(args: argparse.Namespace) -> int:
    from ftmodel.tools.compare import compare_frameworks
    model, inputs = _load_model(args)
    fws = framework_list(args.frameworks) if args.frameworks else None
    cmp = compare_frameworks(model, args.device, _batches(args.batch), frameworks=fws,
                             inputs=inputs, dtype=args.dtype, host=args.host)
    names = list(cmp.predictions)
    rows = [[r["batch"], *(f"{r[f'{fw}_ms']:.3f} ({r[f'{fw}_regime'].split('-')[0]})"
                           for fw in names), r["fastest"]] for r in cmp.rows()]
    _table(f"{args.model} · {cmp.device} · {args.dtype}: predicted ms (regime)",
           ["batch", *names, "fastest"], rows)
    for fw, why in cmp.unavailable.items():
        print(f"{fw}: not predicted: {why}", file=sys.stderr)
    return 0



def cmd_validate(args: argparse.Namespace) -> int:
    from ftmodel.api import Predictor
    from ftmodel.measure import keep_heap, set_threads
    from ftmodel.tools.validation import compare_live
    from ftmodel.tracing.inputs import resolve_inputs
    threads = set_threads(args.threads)
    if not args.default_malloc:
        keep_heap()
    # the prediction models the heap state this process measures in
    predictor = Predictor(args.framework, args.device,
                          heap="plain" if args.default_malloc else "kept")
    model, inputs = _load_model(args)
    make_inputs = inputs if callable(inputs) else (
        lambda b: resolve_inputs(model, inputs, b))
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



def _report_name(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in text).strip("-")


def report_frameworks(device: Any) -> list[str]:
    """The frameworks a report shows by default: every built-in one that runs on the device's
    type and whose packages are installed (the others are named on stderr)."""
    from ftmodel.api import resolve_profile
    from ftmodel.errors import MissingExtraError
    from ftmodel.frameworks.base import framework_names, get_framework
    names = []
    for name in framework_names(resolve_profile(device).device.type):
        fw = get_framework(name)
        try:
            fw.check_installed()
        except MissingExtraError as err:
            print(f"skipped {name}: {err}", file=sys.stderr)
            continue
        names.append(name)
    return names


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ftmodel.tools.report import framework_curves, plot_report, report_markdown
    model, inputs = _load_model(args)
    fws = (framework_list(args.frameworks) if args.frameworks
           else report_frameworks(args.device))
    curves = framework_curves(model, fws, args.device, _batches(args.batch), inputs=inputs,
                              dtype=args.dtype, host=args.host)
    out = Path(args.out or f"report-{_report_name(args.model)}-{_report_name(str(args.device))}")
    device = next((c.predictions[0].device for c in curves if c.predictions), str(args.device))
    title = (args.title
             or f"{args.model} on {device} ({args.dtype}): predicted latency per framework")
    png = plot_report(curves, out.with_suffix(".png"), title)
    command = " ".join([
        f"ftmodel report {args.model} --device {args.device} --frameworks {','.join(fws)}",
        f"--batch {args.batch}",
        *([] if args.input_shape is None else [f"--input-shape {args.input_shape}"]),
        *([] if args.seq_len is None else [f"--seq-len {args.seq_len}"]),
        *([] if args.dtype == "fp32" else [f"--dtype {args.dtype}"]),
        *([] if args.host is None else [f"--host {args.host}"])])
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
    model, inputs = _load_model(args)
    p = predict_latency(model, args.framework, args.device, _batches(args.batch)[0],
                        inputs=inputs, dtype=args.dtype, host=args.host)
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
