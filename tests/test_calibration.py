"""The calibration suite on this machine (quick mode): a real profile, interruption-safe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import calibration.suite as suite
from ftmodel.api import predict_latency
from ftmodel.hardware.profile import read_profile
from ftmodel.zoo import mlp


@pytest.fixture(scope="module")
def quick_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cal") / "quick.json"
    suite.calibrate("cpu", ("eager",), path, quick=True, progress=False, threads=1)
    return path


def test_quick_calibration_writes_a_complete_valid_profile(quick_profile: Path) -> None:
    prof = read_profile(quick_profile)
    assert prof.kind == "calibrated"
    assert prof.provenance["complete"] is True
    assert prof.provenance["threads"] == 1
    assert prof.provenance["torch"] == torch.__version__
    for cls in ("gemm", "conv", "conv_grouped", "elementwise", "norm", "softmax", "reduction",
                "pool", "bmm", "attention", "embedding", "copy"):
        assert cls in prof.device.op_classes, cls
        assert all(row[3] > 0 for row in prof.device.op_classes[cls].samples)
    eager = prof.host.frameworks["eager"]  # type: ignore[union-attr]
    assert eager.per_event_s["module_call"] >= 0
    assert any("program" in s for s in eager.samples)  # raw measurements kept
    assert set(eager.in_model) == {"host_scale", "device_scale", "per_byte_s", "per_kernel_s"}


def test_calibrated_profile_predicts_a_model(quick_profile: Path) -> None:
    p = predict_latency(mlp(4, 64), "eager", str(quick_profile), [1, 8],
                        inputs=torch.randn(1, 256))
    assert all(q.latency_s > 0 for q in p)
    assert p[1].compute_s >= p[0].compute_s  # more rows, more work


def test_interrupted_calibration_keeps_what_it_measured(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = suite._class_stage

    def flaky(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(suite, "_class_stage", flaky)
    path = tmp_path / "partial.json"
    with pytest.raises(KeyboardInterrupt):
        suite.calibrate("cpu", ("eager",), path, quick=True, progress=False, threads=1)
    data = json.loads(path.read_text())
    assert data["provenance"]["complete"] is False
    assert len(data["device"]["op_classes"]) == 2  # the two classes measured before the stop
    assert "attention" in data["provenance"]["missing_op_classes"]
    assert read_profile(path).host is not None  # still a valid profile


def test_calibrate_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="onnxruntime"):
        suite.calibrate("cpu", ("onnxruntime",), tmp_path / "x.json", progress=False)
    with pytest.raises(ValueError, match="tpu"):
        suite.calibrate("tpu", ("eager",), tmp_path / "x.json", progress=False)


@pytest.mark.requires_cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_calibration_is_async(tmp_path: Path) -> None:
    prof = suite.calibrate("cuda", ("eager",), tmp_path / "gpu.json", quick=True, progress=False)
    assert prof.device.execution == "async"
