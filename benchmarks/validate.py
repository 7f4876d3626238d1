"""Live validation on this machine: calibrate, then measure and predict a model zoo, in one run.

    python benchmarks/validate.py --framework eager            # calibrate + validate (~10 min)
    python benchmarks/validate.py --profile P.json --models resnet18@112 --batches 1,8
    python benchmarks/validate.py --profile P.json --frameworks onnxruntime,torchscript,inductor
    # on a GPU machine, with a profile from `ftmodel calibrate --device cuda --out G.json`:
    python benchmarks/validate.py --profile G.json --frameworks eager,cudagraphs,torchscript
    # the spec-sheet device half, with this machine's measured host half:
    python benchmarks/validate.py --profile h100-sxm5 --host G.json --tag h100-spec

Non-eager frameworks are measured with their own runner (the ORT session, the frozen TorchScript
module, the torch.compile'd module) and predicted from the Program their lowering counts; models a
framework cannot run are listed as skipped with the FrameworkUnsupported reason.

Writes, in ``--out-dir`` (default benchmarks/results/local; committed results live in one folder
per machine, benchmarks/results/<machine>/), <tag>-<framework>.csv (one row per model × batch),
<tag>-<framework>-summary.md (median / P90 APE, share within ±20%, Spearman ρ, for ftmodel and the
MACs-proxy baseline fitted on the same points), <tag>-<framework>.png (predicted vs measured) and,
when it calibrates, the profile used, cpu-profile.json. <tag> is "cpu" for a CPU profile and
"gpu-<device>" for a GPU one unless --tag names it. A GPU profile is measured on that GPU.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.frameworks.base import canonical_framework  # noqa: E402
from ftmodel.hardware.registry import load_profile  # noqa: E402
from ftmodel.measure import (DEFAULT_MALLOC_HELP, allocator_setting, cpu_name,  # noqa: E402
                             keep_heap, set_threads)
from ftmodel.tools.validation import (LiveModel, LivePoint, compare_live_many, macs_proxy,  # noqa: E402
                                summarize)
from ftmodel.tools.zoo import VALIDATION_SET, get_model  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def _plot(points: list[LivePoint], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = macs_proxy(points)
    fig, axes = plt.subplots(1, 2, figsize=(11, 5), sharex=True, sharey=True)
    meas = [p.measured_s * 1e3 for p in points]
    for ax, pred, label in ((axes[0], [p.predicted_s * 1e3 for p in points], "ftmodel"),
                            (axes[1], list(base * 1e3), "MACs proxy (a + b·MACs)")):
        models = sorted({p.model for p in points})
        cmap = plt.get_cmap("tab20")
        for i, m in enumerate(models):
            xs = [x for x, p in zip(meas, points) if p.model == m]
            ys = [y for y, p in zip(pred, points) if p.model == m]
            ax.scatter(xs, ys, s=18, color=cmap(i % 20), label=m)
        lo, hi = min(meas + pred) * 0.8, max(meas + pred) * 1.25
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.fill_between([lo, hi], [lo * 0.8, hi * 0.8], [lo * 1.2, hi * 1.2], color="0.9")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured latency (ms)")
        ax.set_title(label)
    axes[0].set_ylabel("predicted latency (ms)")
    axes[0].legend(fontsize=6, loc="upper left")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _write_summary(points: list[LivePoint], path: Path, args: argparse.Namespace,
                   profile_path: Path, elapsed_s: float, threads: int, framework: str,
                   skipped: dict[str, str], device: str,
                   host: str | None) -> dict[str, dict[str, float]]:
    s = summarize(points)
    f, b = s["ftmodel"], s["macs_proxy"]
    shown = (profile_path.relative_to(ROOT) if profile_path.is_relative_to(ROOT)
             else profile_path)
    lines = [
        f"# Live validation: {framework} on {device}",
        "",
        f"- machine: {device}; host {cpu_name()}, {threads} "
        f"threads, allocator: {allocator_setting()}, torch {torch.__version__}",
        f"- profile: `{shown}`" + (f", host half from `{host}`" if host else ""),
        f"- points: {len(points)} ({len({p.model for p in points})} models × batches "
        f"{sorted({p.batch for p in points})}); run took {elapsed_s:.0f} s",
        f"- command: `python benchmarks/validate.py {' '.join(sys.argv[1:])}`",
        f"- noise: median round spread {f['median_spread']:.1%}, max "
        f"{max(p.spread for p in points):.1%} (slowest round / fastest round − 1)",
        "",
        "| predictor | median APE | P90 APE | within ±20% | Spearman ρ |",
        "|---|---|---|---|---|",
        f"| ftmodel | {f['median_ape']:.1%} | {f['p90_ape']:.1%} | {f['within_20pct']:.0%} | "
        f"{f['spearman']:.3f} |",
        f"| MACs proxy (a + b·MACs, fitted on these points) | {b['median_ape']:.1%} | "
        f"{b['p90_ape']:.1%} | {b['within_20pct']:.0%} | {b['spearman']:.3f} |",
        "",
        "## Per model (median APE over batches)",
        "",
        "| model | median APE | batch-1 measured ms | batch-1 predicted ms | regime at batch 1 |",
        "|---|---|---|---|---|",
    ]
    for m in dict.fromkeys(p.model for p in points):
        pts = [p for p in points if p.model == m]
        apes = sorted(p.ape for p in pts)
        first = min(pts, key=lambda p: p.batch)
        lines.append(f"| {m} | {apes[len(apes) // 2]:.1%} | {first.measured_s * 1e3:.2f} | "
                     f"{first.predicted_s * 1e3:.2f} | {first.regime} |")
    if skipped:
        lines += ["", "## Skipped (the framework cannot run them)", ""]
        lines += [f"- {m}: {why}" for m, why in skipped.items()]
    path.write_text("\n".join(lines) + "\n")
    return s


def _device_label(profile: Any) -> str:
    """The device measured: this CPU, or the GPU's own name (a GPU profile runs on the GPU)."""
    if profile.device.type == "cpu":
        return "this CPU"
    return torch.cuda.get_device_name() if torch.cuda.is_available() else profile.device.name


def _validate_one(framework: str, profile: Any, profile_path: Path, args: argparse.Namespace,
                  batches: list[int], out: Path, threads: int, tag: str
                  ) -> dict[str, dict[str, float]]:
    started = time.time()
    predictor = Predictor(framework, profile, host=args.host,
                          heap="plain" if args.default_malloc else "kept")
    device = _device_label(profile)
    skipped: dict[str, str] = {}

    def skip(name: str, err: Exception) -> None:
        skipped[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
        print(f"{name:<24} skipped: {skipped[name]}", flush=True)

    models = []
    for name in args.models.split(","):
        zm = get_model(name)
        torch.manual_seed(0)
        models.append(LiveModel(zm.name, zm.build(), zm.make_inputs))
    print(f"{framework}: predicting and measuring {len(models)} models x {len(batches)} batches "
          f"in {args.rounds} interleaved rounds ...", flush=True)
    points = compare_live_many(models, batches, predictor, rounds=args.rounds, on_skip=skip)
    for m in dict.fromkeys(p.model for p in points):
        pts = [p for p in points if p.model == m]
        worst = max(pts, key=lambda p: p.ape)
        print(f"{m:<24} " + "  ".join(
            f"b{p.batch}:{p.measured_s * 1e3:.1f}/{p.predicted_s * 1e3:.1f}" for p in pts)
            + f"  worst APE {worst.ape:.0%}", flush=True)
    stem = f"{tag}-{framework}"
    with open(out / f"{stem}.csv", "w", newline="") as f:
        rows = [asdict(p) | {"ape": p.ape} for p in points]
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    s = _write_summary(points, out / f"{stem}-summary.md", args, profile_path,
                       time.time() - started, threads, framework, skipped, device, args.host)
    _plot(points, out / f"{stem}.png", f"{framework} on {device}: predicted vs measured")
    print((out / f"{stem}-summary.md").read_text(), flush=True)
    return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--framework", default=None, help="one framework (default eager)")
    ap.add_argument("--frameworks", default=None, help="comma-separated, e.g. eager,onnxruntime")
    ap.add_argument("--profile", help="use this profile (a path or a built-in name) instead of "
                    "calibrating now")
    ap.add_argument("--host", default=None, help="take the host half from this calibrated "
                    "profile (e.g. a built-in GPU's device half with this machine's host)")
    ap.add_argument("--tag", default=None, help="output file prefix (default: cpu, or "
                    "gpu-<device> for a GPU profile)")
    ap.add_argument("--models", default=",".join(VALIDATION_SET))
    ap.add_argument("--batches", default="1,2,4,8,16,32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--default-malloc", action="store_true", help=DEFAULT_MALLOC_HELP)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--quick-calibration", action="store_true")
    ap.add_argument("--out-dir", default=str(RESULTS / "local"))
    args = ap.parse_args(argv)

    names = [n for n in (args.frameworks or args.framework or "eager").split(",") if n.strip()]
    frameworks = list(dict.fromkeys(canonical_framework(n) for n in names))
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    threads = set_threads(args.threads)
    if not args.default_malloc:
        keep_heap()
    if args.profile:
        profile_path = Path(args.profile)
        profile = load_profile(args.profile)  # a path or a built-in name
        had = profile.provenance.get("allocator", "default")
        if profile.kind == "calibrated" and had != allocator_setting():
            print(f"warning: {args.profile} was calibrated with allocator setting {had!r} and "
                  f"this run measures with {allocator_setting()!r}; pass the same "
                  "--default-malloc choice to both", file=sys.stderr)
    else:
        from ftmodel.calibration.suite import calibrate
        profile_path = out / "cpu-profile.json"
        profile = calibrate("cpu", frameworks, profile_path, threads=threads,
                            default_malloc=args.default_malloc,
                            quick=args.quick_calibration, progress=sys.stderr.isatty())
        print(f"calibrated in {profile.provenance['duration_s']} s -> {profile_path}", flush=True)
    batches = [int(b) for b in args.batches.split(",")]
    worst = 0.0
    tag = args.tag or ("cpu" if profile.device.type == "cpu" else "gpu-" + "".join(
        c if c.isalnum() else "-" for c in _device_label(profile).lower()).strip("-"))
    for fw in frameworks:
        s = _validate_one(fw, profile, profile_path, args, batches, out, threads, tag)
        worst = max(worst, s["ftmodel"]["median_ape"])
    return 0 if worst <= 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
