"""Per-kernel ramps of GPU generations (benchmarks/gpu_generations.json, build_gpu_profiles.py).

A generation's ramp measured on live CUDA-graph replays (``kernel_ramp``, with the GPU it was
measured on) replaces the ramps fitted on the paper's GPUs in its profiles. A GPU predicted with
nothing measured on it (``build(..., left_out=name)``: the H100 of ``benchmarks/h100_logo.py``)
takes the ramp its generation's other GPUs measured (``kernel_ramp_left_out``), never its own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import build_gpu_profiles as bgp  # noqa: E402
from gpu_common import gpu_specs  # noqa: E402

PARAMS: dict[str, Any] = json.loads((BENCH / "gpu_efficiency.json").read_text())
TABLE: dict[str, Any] = json.loads((BENCH / "gpu_generations.json").read_text())


def _spec(profile: str) -> Any:
    return next(s for s in gpu_specs() if bgp.NAMES[(s.gpu, s.variant)][0] == profile)


def _ramp_s(profile: Any) -> float:
    """The per-kernel ramp a built profile prices: a bytes-bound kernel's half-work size over
    its bandwidth."""
    p = profile.device.op_classes["elementwise"].params
    return float(p["half_bytes"] / p["bandwidth_Bps"])


def test_every_measured_ramp_names_its_gpu_and_no_stand_in_was_measured_on_the_left_out_one(
) -> None:
    for name, entry in [*TABLE["generations"].items(), *TABLE.get("chips", {}).items()]:
        ramp = entry.get("kernel_ramp")
        if not ramp:
            assert "kernel_ramp_left_out" not in entry, name
            continue
        assert 0.0 < ramp["seconds"] < 1e-5 and ramp["gpu"] and ramp["source"], name
        for left_out, other in entry.get("kernel_ramp_left_out", {}).items():
            assert left_out == ramp["gpu"], (name, left_out)
            assert other["gpu"] != left_out and other["source"], (name, left_out)
            assert 0.0 < other["seconds"] < 1e-5, (name, left_out)


def test_built_in_hopper_profiles_keep_the_h100_ramp() -> None:
    hopper = TABLE["generations"]["Hopper"]
    for name in ("h100-sxm5", "h200"):
        ramp = bgp.generation_ramp(_spec(name))
        assert ramp is not None and ramp["seconds"] == hopper["kernel_ramp"]["seconds"]
    profiles, _ = bgp.build(PARAMS, [_spec("h100-sxm5")])
    assert _ramp_s(profiles[0]) == pytest.approx(hopper["kernel_ramp"]["seconds"])


def test_the_left_out_h100_takes_the_ramp_measured_on_another_hopper_gpu() -> None:
    hopper = TABLE["generations"]["Hopper"]
    other = hopper["kernel_ramp_left_out"]["h100-sxm5"]
    ramp = bgp.generation_ramp(_spec("h100-sxm5"), left_out="h100-sxm5")
    assert ramp is not None and ramp["gpu"] == other["gpu"] != "h100-sxm5"
    profiles, _ = bgp.build(PARAMS, [_spec("h100-sxm5")], left_out="h100-sxm5")
    prof = profiles[0]
    assert _ramp_s(prof) == pytest.approx(other["seconds"])
    assert _ramp_s(prof) != pytest.approx(hopper["kernel_ramp"]["seconds"])
    gemm = prof.device.op_classes["gemm"].params
    assert gemm["half_macs"] / gemm["peak_macs_per_s"] == pytest.approx(other["seconds"])
    assert prof.provenance["generation_efficiency"]["kernel_ramp"]["gpu"] == other["gpu"]
    # leaving out another GPU changes nothing for the H100
    same, _ = bgp.build(PARAMS, [_spec("h100-sxm5")], left_out="h200")
    assert _ramp_s(same[0]) == pytest.approx(hopper["kernel_ramp"]["seconds"])


def test_a_generation_without_a_measured_ramp_keeps_the_fitted_ramps() -> None:
    for name in ("rtx8000", "titanx"):
        assert bgp.generation_ramp(_spec(name)) is None
        assert bgp.generation_ramp(_spec(name), left_out=name) is None
        profiles, _ = bgp.build(PARAMS, [_spec(name)], left_out=name)
        assert _ramp_s(profiles[0]) == pytest.approx(PARAMS["device"]["ramp_byte_s"])


def _conv_ramp_s(profile: Any, cls: str = "conv", dtype: str = "") -> float:
    p = profile.device.op_classes[cls].params
    sfx = f":{dtype}" if dtype else ""
    return float(p[f"half_macs{sfx}"] / p[f"peak_macs_per_s{sfx}"])


def test_hopper_convolutions_and_their_helpers_take_the_convolution_ramp() -> None:
    conv = TABLE["generations"]["Hopper"]["conv_ramp"]
    assert conv["gpu"] != "h100-sxm5" and conv["source"] and 0.0 < conv["seconds"] < 1e-5
    for left_out in (None, "h100-sxm5"):  # measured on the H200: the H100 left out keeps it
        prof = bgp.build(PARAMS, [_spec("h100-sxm5")], left_out=left_out)[0][0]
        for cls in ("conv", "conv_grouped"):
            assert _conv_ramp_s(prof, cls) == pytest.approx(conv["seconds"])
        assert _conv_ramp_s(prof, "conv", "fp16") == pytest.approx(conv["seconds"])
        for op in bgp.CONV_OP_NAMES:
            assert prof.device.op_classes[f"aux@{op}"].params["floor_s"] == conv["seconds"]
        # every other kernel keeps the generation's ramp, other helpers the kernel floor
        assert _conv_ramp_s(prof, "gemm") == pytest.approx(_ramp_s(prof))
        assert _conv_ramp_s(prof, "gemm") != pytest.approx(conv["seconds"])
        assert prof.device.op_classes["aux"].params["floor_s"] == 0.0
        assert prof.provenance["generation_efficiency"]["conv_ramp"]["gpu"] == conv["gpu"]
    # left out, the GPU it was measured on gets none
    h200 = bgp.build(PARAMS, [_spec("h200")], left_out="h200")[0][0]
    assert "aux@convolution" not in h200.device.op_classes
    assert _conv_ramp_s(h200) == pytest.approx(_ramp_s(h200))


def test_a_generation_without_a_convolution_ramp_prices_convolutions_like_other_kernels() -> None:
    for name in ("rtx8000", "a100-sxm4-40gb"):
        prof = bgp.build(PARAMS, [_spec(name)])[0][0]
        assert bgp.generation_conv_ramp(_spec(name)) is None
        assert not any(c.startswith("aux@") for c in prof.device.op_classes)
        assert _conv_ramp_s(prof) == pytest.approx(_conv_ramp_s(prof, "gemm"))


def test_a_convolution_helper_kernel_costs_the_convolution_ramp_when_predicted() -> None:
    """The helper kernels ``launches_per_op`` adds after a convolution are priced by the
    ``aux@convolution`` class on Hopper (the kernel floor elsewhere)."""
    import torch
    from torch import nn

    from ftmodel.api import Predictor
    from ftmodel.estimate.launches import AUX_CLASS

    def make(batch: int) -> torch.Tensor:
        return torch.randn(batch, 8, 16, 16)

    conv = TABLE["generations"]["Hopper"]["conv_ramp"]["seconds"]
    model = nn.Sequential(*[nn.Conv2d(8, 8, 3, padding=1) for _ in range(4)]).eval()
    times = {}
    for name in ("h100-sxm5", "rtx8000"):
        pred = Predictor("cudagraphs", name)
        prog = pred.lower(model, make, 1, pred.trace(model, make, 1))
        t = pred.kernel_arrays(prog.kernels).device_s
        times[name] = [float(s) for k, s in zip(prog.kernels, t) if k.op_class == AUX_CLASS]
    assert times["h100-sxm5"] and all(s == pytest.approx(conv) for s in times["h100-sxm5"])
    assert times["rtx8000"] and all(s < conv / 2 for s in times["rtx8000"])
