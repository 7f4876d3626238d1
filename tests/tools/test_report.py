"""Reports: framework curves, the figure, the markdown table, the per-layer breakdown, the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from ftmodel.api import predict_latency
from ftmodel.cli import main
from ftmodel.errors import InvalidArgumentError, UnknownNameError
from ftmodel.hardware.profile import HardwareProfile
from ftmodel.tools.report import (
    explain_rows,
    framework_curves,
    layer_breakdown,
    plot_report,
    report_markdown,
)


def _mlp() -> nn.Sequential:
    # 3 Linear blocks of 2 layers each: paths "0.0", "0.1", "1.0", ...
    return nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.ReLU()) for _ in range(3)]).eval()


X = torch.randn(1, 16)


def test_curves_skip_frameworks_the_profile_cannot_price(tiny_profile: HardwareProfile) -> None:
    curves = framework_curves(_mlp(), ["eager", "torchscript"], tiny_profile, [1, 4, 16],
                              inputs=X)
    eager, ts = curves
    assert [p.batch for p in eager.predictions] == [1, 4, 16]
    assert eager.predictions == tuple(predict_latency(_mlp(), "eager", tiny_profile, [1, 4, 16],
                                                      inputs=X))
    assert not ts.predictions and "no costs for framework 'torchscript'" in ts.skipped


def test_curves_reject_unknown_names_and_empty_input(tiny_profile: HardwareProfile) -> None:
    with pytest.raises(UnknownNameError, match="Did you mean 'eager'"):
        framework_curves(_mlp(), ["eagr"], tiny_profile, [1], inputs=X)
    with pytest.raises(InvalidArgumentError, match="batch is empty"):
        framework_curves(_mlp(), ["eager"], tiny_profile, [], inputs=X)
    with pytest.raises(InvalidArgumentError, match="frameworks is empty"):
        framework_curves(_mlp(), [], tiny_profile, [1], inputs=X)


def test_figure_and_markdown(tiny_profile: HardwareProfile, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    curves = framework_curves(_mlp(), ["eager", "torchscript"], tiny_profile, [1, 2, 4, 8],
                              inputs=X)
    png = plot_report(curves, tmp_path / "r.png", "title")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = report_markdown(curves, "title", image="r.png")
    assert "![title](r.png)" in md
    assert md.count("| eager |") == 1 and "skipped" in md  # one header row per framework
    assert sum(("-bound |" in ln) for ln in md.splitlines()) == 4  # a row per batch
    with pytest.raises(InvalidArgumentError, match="nothing to plot"):
        plot_report(curves[1:], tmp_path / "none.png", "t")


def test_layer_breakdown_adds_up(tiny_profile: HardwareProfile) -> None:
    p = predict_latency(_mlp(), "eager", tiny_profile, 4, inputs=X)
    rows = layer_breakdown(p)
    assert sum(r.n_launches for r in rows) == p.n_launches
    assert sum(r.macs for r in rows) == p.macs
    assert sum(r.tax_share for r in rows) == pytest.approx(1.0)
    assert [r.time_s for r in rows] == sorted((r.time_s for r in rows), reverse=True)
    top = layer_breakdown(p, depth=1)  # grouped to the three blocks "0", "1", "2"
    assert sorted(r.module_path for r in top) == ["0", "1", "2"]
    assert sum(r.host_s for r in top) == pytest.approx(sum(r.host_s for r in rows))
    shown, total = explain_rows(p, top=2)
    assert len(shown) == 2 and total.n_launches == p.n_launches
    with pytest.raises(InvalidArgumentError, match="depth must be >= 1"):
        layer_breakdown(p, depth=0)


# -- command line ---------------------------------------------------------------------------
def test_cli_report_writes_png_and_markdown(tiny_profile_path: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "rep"
    code = main(["report", "mlp-deep-narrow", "--device", str(tiny_profile_path), "--frameworks",
                 "eager", "--batch", "1,4,16", "--out", str(out)])
    assert code == 0
    assert (tmp_path / "rep.png").exists()
    md = (tmp_path / "rep.md").read_text()
    assert "crossover batch" in md and "ftmodel report mlp-deep-narrow" in md


def test_cli_explain_prints_the_breakdown(tiny_profile_path: Path,
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["explain", "mlp-deep-narrow", "--device", str(tiny_profile_path), "--top", "5",
                 "--depth", "1"]) == 0
    out = capsys.readouterr().out
    assert "share of tax" in out and "total (all layers)" in out


@pytest.mark.parametrize("command", ["report", "explain"])
def test_cli_unknown_model_or_gpu_is_a_clean_error(command: str, tiny_profile_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "resnet181", "--device", str(tiny_profile_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'resnet181'" in err and "resnet18@112" in err
    assert main([command, "mlp-deep-narrow", "--device", "a1000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ftmodel: error:") and "a1000" in err
