"""How far fresh calibrations of one machine disagree, expressed at one common speed.

    python benchmarks/profile_agreement.py A.json B.json [C.json ...] > agreement.md

Every profile is re-expressed (``ftmodel.hardware.rescale.at_speed``) at the first one's
reference times (GEMM, host and, for profiles scaled by it, memory), so that what remains
between two profiles is what their calibrations measured differently, not the speed the
machine had. For each pair and each op-curve class measured by both with the same samples, the
median over samples of |log(time B / time A)| (0.05 ≈ 5%); per pair, the median and maximum
of those over classes, and the same for the eager host costs per event. Nothing is timed.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.hardware.rescale import at_speed  # noqa: E402
from ftmodel.hardware.profile import HardwareProfile, read_profile  # noqa: E402
from ftmodel.speed import (Reference, memory_normalised, nominal_host_reference_s,  # noqa: E402
                           nominal_memory_reference_s, nominal_reference_s)

sys.path.insert(0, str(ROOT / "benchmarks"))
from corpus_speed import toward  # noqa: E402


def _common(profiles: list[HardwareProfile], exponent: float = 1.0) -> list[HardwareProfile]:
    """Each profile re-expressed at the first one's reference times, each reference moved
    ``(first / own) ** exponent`` of the way (1: all of it; ``corpus_speed.toward``)."""
    first = profiles[0].provenance
    gemm_s = nominal_reference_s(first)
    if gemm_s is None:
        raise SystemExit(f"{profiles[0].name}: no nominal speed recorded")
    target = Reference(gemm_s, nominal_host_reference_s(first), nominal_memory_reference_s(first))
    out = []
    for p in profiles:
        ref = toward(p, target, exponent)
        out.append(at_speed(p, ref.gemm_s, ref.host_s, ref.memory_s))
    return out


def _class_disagreement(a: HardwareProfile, b: HardwareProfile) -> dict[str, float]:
    out = {}
    for name, ca in a.device.op_classes.items():
        cb = b.device.op_classes.get(name)
        if cb is None or ca.model != "samples" or cb.model != "samples":
            continue
        ta = np.array([s[3] for s in ca.samples])
        tb = np.array([s[3] for s in cb.samples])
        if ta.shape != tb.shape or not len(ta) or (ta <= 0).any() or (tb <= 0).any():
            continue
        out[name] = float(np.median(np.abs(np.log(tb / ta))))
    return out


def _host_disagreement(a: HardwareProfile, b: HardwareProfile) -> float:
    if a.host is None or b.host is None:
        return float("nan")
    ea, eb = a.host.frameworks.get("eager"), b.host.frameworks.get("eager")
    if ea is None or eb is None:
        return float("nan")
    logs = [abs(np.log(eb.per_event_s[k] / v)) for k, v in ea.per_event_s.items()
            if v > 0 and eb.per_event_s.get(k, 0) > 0]
    return float(np.median(logs)) if logs else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="+", help="CPU profiles of one machine")
    ap.add_argument("--classes", action="store_true", help="also a table per op class")
    ap.add_argument("--exponent", type=float, default=1.0,
                    help="move each profile's reference times only this part of the way (in "
                         "log) to the first one's: kernels that follow the references less "
                         "than in proportion (an experiment; default 1)")
    args = ap.parse_args(argv)
    if len(args.profiles) < 2:
        ap.error("give at least two profiles")
    paths = [Path(p) for p in args.profiles]
    profiles = _common([read_profile(p) for p in paths], args.exponent)
    lines = ["# Disagreement between calibrations at one common speed", "",
             f"`python benchmarks/profile_agreement.py {' '.join(args.profiles)}`: each "
             f"profile re-expressed at {paths[0].name}'s reference times"
             + (f" (each reference moved to the power {args.exponent:g})"
                if args.exponent != 1.0 else "") + "; median over samples "
             "of |log ratio| per op class (0.05 ≈ 5%).", "",
             "| pair | memory-scaled | classes | median over classes | max (class) | "
             "eager host per event |", "|---|---|---|---|---|---|"]
    per_class: dict[str, dict[str, float]] = {}
    for (pa, a), (pb, b) in itertools.combinations(zip(paths, profiles), 2):
        d = _class_disagreement(a, b)
        pair = f"{pa.stem} / {pb.stem}"
        per_class[pair] = d
        scaled = "both" if memory_normalised(a.provenance) and memory_normalised(
            b.provenance) else "no"
        worst = max(d, key=lambda k: d[k]) if d else "–"
        lines.append(f"| {pair} | {scaled} | {len(d)} | {np.median(list(d.values())):.3f} | "
                     f"{d.get(worst, float('nan')):.3f} ({worst}) | "
                     f"{_host_disagreement(a, b):.3f} |")
    if args.classes:
        pairs = list(per_class)
        names = sorted({k for d in per_class.values() for k in d})
        lines += ["", "| op class | " + " | ".join(pairs) + " |",
                  "|---|" + "---|" * len(pairs)]
        for n in names:
            lines.append(f"| {n} | " + " | ".join(
                f"{per_class[p][n]:.3f}" if n in per_class[p] else "–" for p in pairs) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
