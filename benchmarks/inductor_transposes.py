"""Inductor's channels-last copies on a CPU: timed as the calibration times inductor's curves, set
beside a contiguous loop over the same bytes, and written into a copy of a profile as its
transpose curve (``inductor/copy:transpose``) for study.

    python benchmarks/inductor_transposes.py --profile P.json --out P-transpose.json \\
        --table benchmarks/results/cpu-epyc/inductor-transposes.md
    python benchmarks/refit_in_model.py P-transpose.json --against-curves --out P-refit.json
    python benchmarks/repredict.py <corpus CSV> --profile P-refit.json --points

Without freezing, inductor copies every convolution's k x k weights into channels-last on every
call, the graph's NCHW input likewise, and its channels-last result back to NCHW
(``Kernel.bytes_transposed``, counted by the lowering). Each sample is one such copy, compiled
by inductor and timed by :func:`ftmodel.calibration.framework_ops.framework_curve` (interleaved
rounds, a floor of a few elements subtracted): 3x3 weights and RGB images from 1 kB to 16 MB.
Beside each, a contiguous scale of the same tensor, timed the same way. The written profile
carries the samples as its ``inductor/copy:transpose`` curve, on which a prediction prices every
kernel's transposed bytes (:mod:`ftmodel.estimate.transposes`); a calibration does not time
this curve.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.calibration.framework_ops import framework_curve  # noqa: E402
from ftmodel.calibration.op_sample import OpSample  # noqa: E402
from ftmodel.estimate.transposes import transpose_curve_name  # noqa: E402
from ftmodel.hardware.profile import read_profile  # noqa: E402
from ftmodel.measure import keep_heap  # noqa: E402

EXPONENTS = (8, 13, 16, 18, 20, 22)  # elements: 1 kB to 16 MB of fp32


class _Apply(nn.Module):
    def __init__(self, nhwc: bool) -> None:
        super().__init__()
        self.nhwc = nhwc

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return t.contiguous(memory_format=torch.channels_last) if self.nhwc else t * 0.5


def _weights(n: int) -> torch.Tensor:
    c = max(2, round((n / 9) ** 0.5))
    return torch.randn(c, c, 3, 3)


def _image(n: int) -> torch.Tensor:
    hw = max(2, round((n / 3) ** 0.5))
    return torch.randn(1, 3, hw, hw)


def samples(nhwc: bool) -> list[OpSample]:
    """Both families (weights, images) of channels-last copies, or of contiguous scales of the
    same tensors; each family floored at a contiguous scale of 4 elements."""
    out = []
    for family, make in (("weights3x3", _weights), ("image", _image)):
        out.append(OpSample("copy", family, f"{family} floor", _Apply(False),
                            (torch.randn(4),), is_floor=True))
        out += [OpSample("copy", family, f"{family} n{2**e}", _Apply(nhwc), (make(2**e),))
                for e in EXPONENTS]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", required=True, help="a CPU profile with inductor's curves")
    ap.add_argument("--out", required=True, help="the profile copy to write, with the curve")
    ap.add_argument("--table", default=None, help="a markdown table of the samples to write")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(2)
    keep_heap()
    prof = read_profile(args.profile)
    rows = {}
    for nhwc in (True, False):
        data, raw, _ = framework_curve("inductor", samples(nhwc), "cpu", prof.device,
                                       rounds=args.rounds, round_s=0.05)
        if data is None:
            sys.exit("inductor could not run the samples; nothing written")
        timed = [r for r in raw if "total_s" in r]
        rows[nhwc] = [(r["label"], s[1], s[3], r.get("variant", "")) for r, s in
                      zip(timed, data.samples)]
        if nhwc:
            curve = {"model": "samples", "samples": [list(s) for s in data.samples],
                     "params": {}, "cold_s": []}
    doc = json.loads(Path(args.profile).read_text())
    doc["device"]["op_classes"][transpose_curve_name("inductor")] = curve
    doc["name"] = f"{doc['name']}+inductor-transposes"
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    lines = ["| sample | bytes read | channels-last copy µs | variant | contiguous scale µs "
             "| copy / scale |", "|---|---|---|---|---|---|"]
    for (label, nbytes, t, variant), (_, _, c, _) in zip(rows[True], rows[False]):
        ratio = f"{t / c:.2f}" if c > 1e-8 else ""
        lines.append(f"| {label} | {nbytes:,.0f} | {t * 1e6:.1f} | {variant} | {c * 1e6:.1f} "
                     f"| {ratio} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.table:
        Path(args.table).write_text(
            f"`python benchmarks/inductor_transposes.py --profile {args.profile} --out "
            f"{args.out}`\n\n{text}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
