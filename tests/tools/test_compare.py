"""Framework comparison (prediction only): per batch, each framework and the fastest; a
framework that cannot run the model is listed with its reason while the others still predict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ftmodel.cli import main
from ftmodel.tools.compare import compare_frameworks, default_frameworks
from ftmodel.errors import FrameworkUnsupported, UnknownNameError
from ftmodel.hardware.profile import FrameworkHost, HardwareProfile, write_profile


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()


class _Eigen(nn.Module):  # neither ONNX exporter converts eigvalsh
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.eigvalsh(x[:, :, None] * x[:, None, :])


def test_gpu_only_framework_listed_not_fatal(tiny_profile: HardwareProfile) -> None:
    cmp = compare_frameworks(_mlp(), tiny_profile, [1, 4], frameworks=["eager", "cudagraphs"],
                             inputs=torch.randn(1, 16))
    assert list(cmp.predictions) == ["eager"]
    assert "GPU profile" in cmp.unavailable["cudagraphs"]
    assert cmp.fastest(1) == "eager"
    rows = cmp.rows()
    assert [r["batch"] for r in rows] == [1, 4]
    assert rows[0]["eager_ms"] > 0 and rows[0]["eager_regime"].endswith("-bound")


def test_model_a_framework_cannot_run(profile_factory: Any) -> None:
    pytest.importorskip("onnxruntime")
    host = FrameworkHost(per_event_s={"kernel": 5e-6}, per_call_s=2e-5)
    prof = profile_factory(frameworks={"eager": FrameworkHost(per_event_s={"kernel": 5e-6}),
                                       "onnxruntime": host})
    cmp = compare_frameworks(_Eigen(), prof, 1, frameworks=["eager", "onnxruntime"],
                             inputs=torch.randn(1, 16))
    assert "eager" in cmp.predictions
    assert "eigvalsh" in cmp.unavailable["onnxruntime"].lower()
    with pytest.raises(FrameworkUnsupported):  # nothing at all can predict it
        compare_frameworks(_Eigen(), prof, 1, frameworks=["onnxruntime"],
                           inputs=torch.randn(1, 16))


def test_framework_missing_from_a_calibrated_profile_is_listed(
        tiny_profile: HardwareProfile) -> None:
    cmp = compare_frameworks(_mlp(), tiny_profile, 1, frameworks=["eager", "onnxruntime"],
                             inputs=torch.randn(1, 16))
    assert "eager" in cmp.predictions
    assert "onnxruntime" in cmp.unavailable


def test_bad_names_and_batches(tiny_profile: HardwareProfile) -> None:
    with pytest.raises(UnknownNameError, match="eager"):
        compare_frameworks(_mlp(), tiny_profile, 1, frameworks=["eagr"],
                           inputs=torch.randn(1, 16))
    with pytest.raises(ValueError, match="batch"):
        compare_frameworks(_mlp(), tiny_profile, [], inputs=torch.randn(1, 16))
    cmp = compare_frameworks(_mlp(), tiny_profile, 1, frameworks=["eager"],
                             inputs=torch.randn(1, 16))
    with pytest.raises(ValueError, match="compared batches"):
        cmp.fastest(8)


def test_defaults_follow_the_device_type() -> None:
    assert "cudagraphs" not in default_frameworks("cpu")
    assert {"eager", "onnxruntime", "cudagraphs"} <= set(default_frameworks("cuda"))


def test_cli_compare_prints_fastest(tiny_profile: HardwareProfile, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    path = write_profile(tiny_profile, tmp_path / "p.json")
    assert main(["compare", "mlp-deep-narrow", "--device", str(path), "--batch", "1,4",
                 "--frameworks", "eager,cudagraphs"]) == 0
    out = capsys.readouterr()
    assert "fastest" in out.out and "eager" in out.out
    assert "cudagraphs: not predicted" in out.err
