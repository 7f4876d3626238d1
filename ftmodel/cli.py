"""The ``ftmodel`` command line: predict, compare, calibrate, validate, profiles, demo, report,
explain (this module parses the arguments and runs the two commands that calibrate; the
others are in :mod:`ftmodel.cli_commands`).

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

from ftmodel.cli_commands import (cmd_compare, cmd_explain, cmd_predict, cmd_profiles,
                                  cmd_report, cmd_validate, framework_list, report_frameworks)
from ftmodel.errors import FtmodelError
from ftmodel.measure import DEFAULT_MALLOC_HELP

if TYPE_CHECKING:
    from ftmodel.frameworks.base import Framework

__all__ = ["main", "build_parser", "report_frameworks"]

DEVICE_HELP = ("the device predicted for: a built-in profile name such as a100 or rtx8000 (see "
               "`ftmodel profiles`), cpu (this machine's calibrated profile) or a profile JSON "
               "path; auto: the local GPU, else cpu (default: %(default)s)")
INPUT_SHAPE_HELP = ("one sample's input shape, e.g. 3x224x224 or 16000 (ftmodel adds the batch "
                    "dimension): random floats replace the model's default inputs")
SEQ_LEN_HELP = "tokens per sample, for text models (default: the model's own, else 128)"


def _frameworks() -> dict[str, Framework]:
    """The framework registry, built-in frameworks loaded."""
    from ftmodel.frameworks.base import FRAMEWORKS, get_framework
    get_framework("eager")  # loads the built-in frameworks into the registry
    return FRAMEWORKS


def cmd_calibrate(args: argparse.Namespace) -> int:
    from ftmodel.calibration.suite import calibrate
    try:
        prof = calibrate(args.device, framework_list(args.frameworks), args.out,
                         threads=args.threads, quick=args.quick, progress=not args.no_progress,
                         update=args.update, default_malloc=args.default_malloc,
                         passes=args.passes)
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
    p.add_argument("--speed", choices=("profile", "now"), default="profile",
                   help="the CPU speed priced: profile (the one the calibration recorded; "
                   "default) or now (probe this machine for about a second first; a shared VM "
                   "changes speed)")
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
                        "page-fault price from an older probe, and pools' per-window curves "
                        "where the profile lacks them, are measured, with --frameworks eager "
                        "alone too)")
    c.add_argument("--passes", type=int, default=None,
                   help="time the op sweeps this many times and keep each sample's median "
                        "(default: 3, 1 with --quick; 1 is enough on a quiet machine)")
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
