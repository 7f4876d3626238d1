"""The command line: predict, profiles, model specs, the device option, demo, errors."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import pytest

from ftmodel.cli import report_frameworks, build_parser, main
from ftmodel.frameworks.base import FRAMEWORKS
from ftmodel.hardware.profile import HardwareProfile, write_profile

MODEL_COMMANDS = ("predict", "compare", "validate", "report", "explain")


def test_predict_prints_a_table(tiny_profile, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    path = write_profile(tiny_profile, tmp_path / "p.json")
    assert main(["predict", "mlp-deep-narrow", "--device", str(path), "--batch", "1,4"]) == 0
    captured = capsys.readouterr()
    assert "latency ms" in captured.out
    assert "framework-bound" in captured.out or "compute-bound" in captured.out
    assert "deprecated" not in captured.err


def test_predict_a_torchvision_model_at_an_input_shape(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["predict", "torchvision:resnet18", "--device", "a100", "--batch", "1",
                 "--input-shape", "3x64x64"]) == 0
    out = capsys.readouterr().out
    assert "torchvision:resnet18" in out and "a100" in out and "latency ms" in out


def test_predict_a_file_factory_with_seq_len(tiny_profile_path: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    src = tmp_path / "lm.py"
    src.write_text("from torch import nn\n\ndef build():\n"
                   "    return nn.Sequential(nn.Embedding(40, 8), nn.Linear(8, 4))\n")
    assert main(["predict", f"{src}:build", "--device", str(tiny_profile_path), "--batch", "2",
                 "--seq-len", "6"]) == 0
    assert "latency ms" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--gpu", "--profile"])
@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_deprecated_device_spellings_warn_and_work(command: str, option: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args([command, "mlp-deep-narrow", option, "a100"])
    assert args.device == "a100"
    err = capsys.readouterr().err
    assert err == f"warning: {option} is deprecated; use --device\n"


def test_deprecated_gpu_runs_a_prediction(tiny_profile_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "mlp-deep-narrow", "--gpu", str(tiny_profile_path), "-b", "1"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: --gpu is deprecated; use --device") == 1


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_help_documents_the_model_and_device_options(command: str,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    for option in ("--input-shape", "--seq-len", "--device", "torchvision:<arch>", "timm:<name>",
                   "hf:<ConfigClass>", "file.py:factory", "package.module:factory"):
        assert option in out
    assert "--gpu" not in out and "--profile" not in out
    if command != "validate":
        assert all(name in out for name in FRAMEWORKS)  # listed from the registry


def test_calibrate_keeps_its_local_device(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["calibrate", "--device", "cuda"])
    assert args.device == "cuda" and args.frameworks == "eager"
    assert capsys.readouterr().err == ""


def testreport_frameworks_by_default_fit_the_device(tiny_profile_path: Path) -> None:
    names = report_frameworks(str(tiny_profile_path))
    assert "eager" in names
    assert not any(FRAMEWORKS[n].needs_gpu for n in names)
    gpu = report_frameworks("a100")
    assert "cudagraphs" in gpu


def test_unknown_framework_is_a_clean_error(tiny_profile, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = write_profile(tiny_profile, tmp_path / "p.json")
    code = main(["predict", "mlp-deep-narrow", "--device", str(path), "-f", "eagr"])
    assert code == 2
    assert "Did you mean 'eager'" in capsys.readouterr().err


def test_unknown_model_lists_the_zoo(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "resnet181", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "resnet18@112" in err and "torchvision:<arch>" in err


@pytest.mark.parametrize("argv, expected", [
    (["predict", "torchvision:resnet181", "--device", "a100"],
     "did you mean 'torchvision:resnet18'"),
    (["predict", "hf:BertConfg", "--device", "a100"], "did you mean 'hf:BertConfig'"),
    (["explain", "tim:resnet18", "--device", "a100"], "did you mean 'timm:resnet18'"),
    (["predict", "torchvision:resnet18", "--device", "a100", "--input-shape", "3xx"],
     "--input-shape must be"),
    (["compare", "mlp-deep-narrow", "--device", "a100", "--batch", "one"],
     "--batch must be comma-separated integers"),
])
def test_bad_specs_are_one_paragraph_errors(argv: list[str], expected: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ftmodel: error:") and expected in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_extra_is_a_clean_error(monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm now fails
    assert main(["predict", "timm:resnet10t", "--device", "a100"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'ftmodel[zoo]'" in err and err.count("\n") == 1


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


def test_demo_calibrates_only_when_needed(tiny_profile: HardwareProfile, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    import ftmodel.calibration.suite as suite
    import ftmodel.tools.demo as demo
    monkeypatch.setenv("FTMODEL_HOME", str(tmp_path))
    calibrated: list[Any] = []
    shown: list[Any] = []

    def fake_calibrate(device: str, frameworks: Any, out: Any, **kw: Any) -> HardwareProfile:
        calibrated.append((device, tuple(frameworks), Path(out), kw))
        write_profile(tiny_profile, out)
        return tiny_profile

    monkeypatch.setattr(suite, "calibrate", fake_calibrate)
    monkeypatch.setattr(demo, "run_demo", lambda profile: shown.append(profile) or 0)
    path = tmp_path / "profiles" / "local-cpu.json"
    assert main(["demo"]) == 0
    assert calibrated == [("cpu", ("eager",), path, {"quick": True, "threads": 2})]
    assert main(["demo"]) == 0  # cached: not calibrated again
    assert len(calibrated) == 1
    assert main(["demo", "--recalibrate"]) == 0
    assert len(calibrated) == 2
    assert shown == [path, path, path]


def test_only_the_command_line_imports_calibration() -> None:
    """Predicting never needs the calibration suite: only ftmodel/cli.py imports it."""
    root = Path(__file__).resolve().parents[1] / "ftmodel"
    importers = []
    for src in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(src.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "ftmodel.calibration" or n.startswith("ftmodel.calibration.")
                   for n in names):
                importers.append(src.relative_to(root).as_posix())
    assert sorted(set(importers)) == ["cli.py"]
