"""The command line: predict, profiles, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftmodel.cli import main
from ftmodel.hardware.profile import write_profile


def test_predict_prints_a_table(tiny_profile, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    path = write_profile(tiny_profile, tmp_path / "p.json")
    assert main(["predict", "mlp-deep-narrow", "--gpu", str(path), "--batch", "1,4"]) == 0
    out = capsys.readouterr().out
    assert "latency ms" in out
    assert "framework-bound" in out or "compute-bound" in out


def test_unknown_framework_is_a_clean_error(tiny_profile, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = write_profile(tiny_profile, tmp_path / "p.json")
    code = main(["predict", "mlp-deep-narrow", "--gpu", str(path), "-f", "eagr"])
    assert code == 2
    assert "Did you mean 'eager'" in capsys.readouterr().err


def test_unknown_model_lists_the_zoo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "resnet181", "--gpu", "cpu"]) == 2
    assert "resnet18@112" in capsys.readouterr().err


def test_profiles_lists_calibrated_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles"]) == 0
    assert "profiles" in capsys.readouterr().out


def test_calibrate_bad_arguments_are_clean_errors(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--frameworks", "cudagraphs", "--out",
                 str(tmp_path / "x.json")]) == 2
    assert "GPU only" in capsys.readouterr().err
    assert main(["calibrate", "--frameworks", "tvm", "--out", str(tmp_path / "x.json")]) == 2
    assert "cannot calibrate framework(s) ['tvm']" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
