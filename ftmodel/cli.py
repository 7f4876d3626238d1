"""The ``ftmodel`` command line: predict, compare, calibrate, validate, profiles, demo, report,
explain.

    ftmodel predict resnet50 --device cpu --batch 1,8,32
    ftmodel predict torchvision:resnet18 --device a100 --batch 1 --input-shape 3x64x64
    ftmodel predict hf:BertConfig:num_hidden_layers=2,hidden_size=384,num_attention_heads=6 --device a100 --seq-len 64
    ftmodel compare timm:resnet10t --device rtx8000 --batch 1,8,64
    ftmodel calibrate --device cpu --frameworks eager --out my-cpu.json
    ftmodel calibrate --frameworks inductor --update --out my-cpu.json
    ftmodel validate resnet18@112 --device my-cpu.json
    ftmodel profiles
    ftmodel demo
    ftmodel report my_models.py:build --device a100 --frameworks eager,onnxruntime,cudagraphs
    ftmodel explain bert-base --device a100 --framework eager --batch 1

Every command that takes a model takes a spec (:mod:`ftmodel.tools.user_models`): a zoo name,
``torchvision:<arch>``, ``timm:<name>``, ``hf:<ConfigClass>[:key=value,...]``,
``path/to/file.py:factory`` or ``package.module:factory``, with ``--input-shape`` (one sample's
shape, e.g. 3x224x224) and ``--seq-len`` (token ids) to set its inputs. ``--device`` names the
device profile predicted for (``--gpu`` and ``--profile`` are its deprecated spellings), except
in ``calibrate``, where it is the local device measured (cpu or cuda).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ftmodel.errors import FtmodelError, InvalidArgumentError
from ftmodel.measure import DEFAULT_MALLOC_HELP

if TYPE_CHECKING:
    from torch import nn

    from ftmodel.frameworks.base import Framework
    from ftmodel.tracing.inputs import InputSpec

__all__ = ["main", "build_parser", "report_frameworks"]

DEVICE_HELP = ("the device predicted for: a built-in profile name such as a100 or rtx8000 (see "
               "`ftmodel profiles`), cpu (this machine's calibrated profile) or a profile JSON "
               "path; auto: the local GPU, else cpu (default: %(default)s)")
INPUT_SHAPE_HELP = ("one sample's input shape, e.g. 3x224x224 or 16000 (ftmodel adds the batch "
                    "dimension): random floats replace the model's default inputs")
SEQ_LEN_HELP = "tokens per sample, for text models (default: the model's own, else 128)"


def _batches(text: str) -> list[int]:
    try:
        batches = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        batches = []
    if not batches:
        raise InvalidArgumentError(f"--batch must be comma-separated integers like 1,2,4, got "
                                   f"{text!r}")
    return batches


def _frameworks() -> dict[str, Framework]:
    """The framework registry, built-in frameworks loaded."""
    from ftmodel.frameworks.base import FRAMEWORKS, get_framework
    get_framework("eager")  # loads the built-in frameworks into the registry
    return FRAMEWORKS


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
                            inputs=inputs, dtype=args.dtype, host=args.host, heap=args.heap)
    rows = [(p.batch, f"{p.latency_ms:.3f}", f"{p.overhead_s * 1e3:.3f}",
             f"{p.compute_s * 1e3:.3f}", p.regime, f"{p.framework_tax:.0%}", p.n_launches,
             f"{p.macs / 1e9:.3f}", *([f"{p.tokens_per_s:,.0f}"] if step else []))
            for p in preds]
    what = f" · decode step at context {args.decode_context}" if step else ""
    _table(f"{args.model} · {preds[0].framework} · {preds[0].device} · {preds[0].dtype}{what} "
           f"(crossover batch {_fmt_x(preds[0].crossover_batch)})",
           ["batch", "latency ms", "host ms", "device ms", "regime", "tax", "launches", "GMACs",
            *(["tokens/s"] if step else [])], rows)
    for w in preds[0].warnings:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def _framework_list(text: str) -> list[str]:
    return [f.strip() for f in text.split(",") if f.strip()]


def cmd_compare(args: argparse.Namespace) -> int:
    from ftmodel.tools.compare import compare_frameworks
    model, inputs = _load_model(args)
    fws = _framework_list(args.frameworks) if args.frameworks else None
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


def cmd_calibrate(args: argparse.Namespace) -> int:
    from ftmodel.calibration.suite import calibrate
    try:
        prof = calibrate(args.device, _framework_list(args.frameworks), args.out,
                         threads=args.threads, quick=args.quick, progress=not args.no_progress,
                         update=args.update, default_malloc=args.default_malloc)
    except KeyboardInterrupt:
        print("interrupted: the measurements so far are kept in the profile (marked incomplete)",
              file=sys.stderr)
        return 130
    from ftmodel.hardware.registry import default_profile_path
    path = args.out or default_profile_path(prof.name)
    print(f"wrote {path} ({prof.provenance['duration_s']} s, {len(prof.device.op_classes)} op "
          f"classes, threads={prof.provenance['threads']})")
    from ftmodel.calibration.speed_probe import DRIFT_WARNING
    drift = float(prof.provenance.get("reference_drift", 0.0))
    speed = prof.provenance.get("speed") or {}
    if drift > DRIFT_WARNING and speed.get("normalised"):
        print(f"note: this machine's speed moved by {drift:.0%} while it was measured (a "
              f"reference GEMM timed between the stages; provenance.reference_probe); every "
              f"measurement was scaled to the speed at which the reference took "
              f"{speed['reference_s'] * 1e3:.2f} ms (provenance.speed), and predictions are for "
              f"the machine at that speed")
    elif drift > DRIFT_WARNING:
        print(f"note: this machine's speed moved by {drift:.0%} while it was measured (a "
              f"reference GEMM timed between the stages; provenance.reference_probe); the "
              f"profile may be off by as much: calibrate again when the machine is quiet")
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


def cmd_demo(args: argparse.Namespace) -> int:
    """Calibrate this machine (quick) unless its profile is cached, then predict examples."""
    from ftmodel.errors import ProfileError
    from ftmodel.hardware.registry import default_profile_path, load_profile
    from ftmodel.tools.demo import run_demo
    path = default_profile_path("local-cpu")
    fresh = bool(args.recalibrate)
    if not fresh:
        try:
            load_profile(path)
        except ProfileError:
            fresh = True
    if fresh:
        from ftmodel.calibration.suite import calibrate
        print("calibrating this machine (quick mode, 1-2 min on a 2-core machine) ...")
        calibrate("cpu", ("eager",), path, quick=True, threads=2)
        print(f"wrote {path}")
    else:
        print(f"using this machine's profile {path}")
    return run_demo(path)


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
    fws = (_framework_list(args.frameworks) if args.frameworks
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


class _DeprecatedDevice(argparse.Action):
    """``--gpu`` / ``--profile``: stored as ``--device``, with a one-line warning."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"warning: {option_string} is deprecated; use --device", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _add_model(p: argparse.ArgumentParser) -> None:
    from ftmodel.tools.user_models import SPEC_FORMS
    p.add_argument("model", help=f"the model: {SPEC_FORMS} (factory() returns a module or "
                   "(module, inputs)); random weights, nothing downloaded")
    p.add_argument("--input-shape", default=None, metavar="SHAPE", help=INPUT_SHAPE_HELP)
    p.add_argument("--seq-len", type=int, default=None, metavar="N", help=SEQ_LEN_HELP)


def _add_device(p: argparse.ArgumentParser, default: str = "auto",
                help_text: str = DEVICE_HELP) -> None:
    p.add_argument("--device", default=default, help=help_text)
    p.add_argument("--gpu", "--profile", dest="device", action=_DeprecatedDevice,
                   help=argparse.SUPPRESS)


def _add_framework(p: argparse.ArgumentParser, names: Sequence[str]) -> None:
    p.add_argument("--framework", "-f", default="eager",
                   help=f"one of {', '.join(names)} (default: %(default)s)")


def _add_prediction_options(p: argparse.ArgumentParser, dtypes: Sequence[str]) -> None:
    p.add_argument("--dtype", default="fp32", help=f"one of {', '.join(dtypes)} "
                   "(default: %(default)s)")
    p.add_argument("--host", default=None, help="host profile (name or path; default: the "
                   "device profile's own)")


def build_parser() -> argparse.ArgumentParser:
    from ftmodel.api import DTYPES
    frameworks = _frameworks()
    names = list(frameworks)
    gpu_only = [n for n, fw in frameworks.items() if fw.needs_gpu]
    # eager is measured as the module itself; the others through the runner they predict
    measurable = [n for n, fw in frameworks.items() if n == "eager" or fw.runner is not None]
    per_device = (f"every framework that runs on the device ({', '.join(gpu_only)} on a GPU "
                  "only)")
    dtypes = list(DTYPES)

    ap = argparse.ArgumentParser(prog="ftmodel", description="Predict inference latency, "
                                 "framework tax included.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("predict", help="predict latency per batch size")
    _add_model(p)
    _add_framework(p, names)
    _add_device(p)
    p.add_argument("--batch", "-b", default="1,2,4,8,16,32", help="comma-separated batch "
                   "sizes (default: %(default)s)")
    _add_prediction_options(p, dtypes)
    p.add_argument("--heap", choices=("plain", "kept"), default="plain",
                   help="CPU malloc state: plain (glibc's defaults, simulated page faults "
                   "counted; default) or kept (freed memory stays mapped, as with jemalloc or "
                   "tcmalloc)")
    p.add_argument("--decode-context", type=int, default=None, metavar="N",
                   help="predict one decode step of a Hugging Face causal LM with N tokens "
                   "already in each sequence's KV cache (batch = concurrent sequences; adds "
                   "tokens/s)")
    p.add_argument("--cache", choices=("dynamic", "static"), default="dynamic",
                   help="the KV cache of --decode-context: dynamic (DynamicCache, default) or "
                   "static (StaticCache)")
    p.set_defaults(fn=cmd_predict)

    cm = sub.add_parser("compare", help="each framework's predicted latency per batch, and "
                        "the fastest")
    _add_model(cm)
    _add_device(cm)
    cm.add_argument("--batch", "-b", default="1,2,4,8,16,32", help="comma-separated batch "
                    "sizes (default: %(default)s)")
    cm.add_argument("--frameworks", default=None,
                    help=f"comma-separated, of {', '.join(names)} (default: {per_device})")
    _add_prediction_options(cm, dtypes)
    cm.set_defaults(fn=cmd_compare)

    c = sub.add_parser("calibrate", help="measure this machine and write a profile")
    c.add_argument("--device", default="cpu", help="the local device measured: cpu or cuda[:N] "
                   "(default: %(default)s)")
    c.add_argument("--frameworks", default="eager",
                   help=f"comma-separated, of {', '.join(measurable)} ("
                        f"{', '.join(n for n in measurable if n in gpu_only)} on a GPU only; "
                        "eager's sweeps give the shared device half, so eager is always "
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
    _add_model(v)
    _add_framework(v, names)
    _add_device(v, "cpu", "the profile predicting the live run: cpu (this machine's calibrated "
                "profile; default), a profile JSON path, or a GPU's profile on that GPU")
    v.add_argument("--batch", "-b", default="1,2,4,8,16,32", help="comma-separated batch "
                   "sizes (default: %(default)s)")
    v.add_argument("--threads", type=int, default=None)
    v.add_argument("--default-malloc", action="store_true", help=DEFAULT_MALLOC_HELP)
    v.set_defaults(fn=cmd_validate)

    pr = sub.add_parser("profiles", help="list built-in and calibrated profiles")
    pr.set_defaults(fn=cmd_profiles)

    d = sub.add_parser("demo", help="short calibration of this machine + example predictions")
    d.add_argument("--recalibrate", action="store_true",
                   help="calibrate again even if this machine's profile is cached")
    d.set_defaults(fn=cmd_demo)

    rp = sub.add_parser("report", help="figure + markdown: latency vs batch per framework")
    _add_model(rp)
    _add_device(rp)
    rp.add_argument("--frameworks", default=None,
                    help=f"comma-separated, of {', '.join(names)} (default: {per_device} and "
                         "is installed)")
    rp.add_argument("--batch", "-b", default="1,2,4,8,16,32,64,128,256",
                    help="comma-separated batch sizes (default: %(default)s)")
    _add_prediction_options(rp, dtypes)
    rp.add_argument("--out", default=None,
                    help="output path without suffix (default report-<model>-<device>); "
                         "writes .png and .md")
    rp.add_argument("--title", default=None)
    rp.set_defaults(fn=cmd_report)

    ex = sub.add_parser("explain", help="per-layer breakdown of one prediction")
    _add_model(ex)
    _add_device(ex)
    _add_framework(ex, names)
    ex.add_argument("--batch", "-b", default="1", help="one batch size (default: %(default)s)")
    _add_prediction_options(ex, dtypes)
    ex.add_argument("--top", type=int, default=15, help="layers shown")
    ex.add_argument("--depth", type=int, default=None,
                    help="group module paths to this many components (default: innermost)")
    ex.set_defaults(fn=cmd_explain)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except (FtmodelError, NotImplementedError) as err:  # MissingExtraError included
        # one paragraph: what was wrong, what was expected, how to fix it; no traceback
        print(f"ftmodel: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
