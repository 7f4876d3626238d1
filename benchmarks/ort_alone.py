"""What ``benchmarks/ort_transposes.py`` and ``benchmarks/ort_norms.py`` share: their command
line, a one-op session and its lowered kernels, the interleaved timing of those sessions (scaled
to the profile's nominal speed, as the calibration's samples are) and the markdown they write."""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ftmodel.calibration.speed_probe import speed_meter_for  # noqa: E402
from ftmodel.estimate.kernels import DeviceModel  # noqa: E402
from ftmodel.frameworks import onnxruntime as ort_fw  # noqa: E402
from ftmodel.frameworks.base import get_framework  # noqa: E402
from ftmodel.hardware.profile import HardwareProfile, read_profile  # noqa: E402
from ftmodel.measure import Measurement, measure_interleaved, set_threads  # noqa: E402
from ftmodel.program import Kernel  # noqa: E402
from ftmodel.speed import speed_normalised  # noqa: E402

K = TypeVar("K", bound=Hashable)
SETTLE_S = get_framework("onnxruntime").settle_s  # its pause between two sessions' blocks


def setup(doc: str, rounds: int) -> tuple[argparse.Namespace, HardwareProfile, DeviceModel]:
    """The command line (``--profile``, ``--threads``, ``--rounds``, ``--out``), parsed, with the
    thread count set; the profile and its ONNX Runtime device model."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    set_threads(args.threads)
    profile = read_profile(args.profile)
    return args, profile, DeviceModel(profile.device, "fp32", "onnxruntime")


def session(module: nn.Module, inputs: tuple[torch.Tensor, ...], batch: int
            ) -> tuple[Callable[[], object], list[Kernel]]:
    """An ONNX Runtime session of ``module`` (a callable running it once) and its kernels."""
    run = ort_fw.runner(module, inputs, batch, device="cpu", dtype="fp32")
    prog = ort_fw.lower_model(module, inputs, batch, None, device="cpu", dtype="fp32")
    return run, list(prog.kernels)


def time_sessions(fns: Mapping[K, Callable[[], object]], profile: HardwareProfile,
                  rounds: int) -> dict[K, Measurement]:
    """Each session timed in ``rounds`` interleaved rounds of 0.1 s, a pause between sessions
    (ONNX Runtime's ``settle_s``), scaled to ``profile``'s nominal speed."""
    with torch.no_grad(), speed_normalised(speed_meter_for("cpu", profile)):
        return measure_interleaved(fns, rounds=rounds, round_s=0.1,
                                   settle_s=SETTLE_S)


def emit(script: str, args: Any, tables: Sequence[str]) -> None:
    """Print the run's header line and ``tables`` (markdown lines); with ``--out``, write them."""
    head = (f"`python benchmarks/{script} --profile {args.profile}` "
            f"({datetime.date.today().isoformat()}, {args.threads} threads, {args.rounds} "
            "rounds; times scaled to the profile's nominal speed)")
    text = "\n".join([head, "", *tables]) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
