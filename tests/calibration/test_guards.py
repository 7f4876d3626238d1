"""The calibration's guard stage (ftmodel.calibration.guards): its chains counted by inductor's
own lowering, one row of prices per amount of memory written between calls."""

from __future__ import annotations

import shutil

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    shutil.which("g++") is None and shutil.which("c++") is None,
    reason="inductor on the CPU needs a C++ compiler")]


def test_quick_guard_stage_counts_its_chains_and_gives_a_row_per_flush_size() -> None:
    from ftmodel.calibration.guards import measure_guards
    from ftmodel.frameworks.inductor import keep_runners_compiled

    keep_runners_compiled()
    rows, raw = measure_guards(quick=True, rounds=1)
    assert [r[0] for r in rows] == [0.0, float(32 << 20)]
    assert all(t >= 0.0 and m >= 0.0 for _, t, m in rows)
    counts = {(s["chain"], s["k"]): (s["tensors"], s["modules"]) for s in raw}
    # K batch norms: four graph inputs each and the input; K+1 modules. K nested ReLUs: the
    # input; 2K+1 modules
    assert counts == {("batchnorm", 4): (17, 5), ("batchnorm", 32): (129, 33),
                      ("nested", 4): (1, 9), ("nested", 32): (1, 65)}
    assert len(raw) == 4 * len(rows) and all(s["guard_s"] > 0.0 for s in raw)


def test_in_model_guard_scale_times_each_networks_guards_against_their_price() -> None:
    from torch import nn

    from ftmodel.calibration.guards import in_model_guard_scale
    from ftmodel.frameworks.base import get_framework
    from ftmodel.frameworks.inductor import keep_runners_compiled
    from ftmodel.tracing.dispatch import trace

    keep_runners_compiled()
    fw = get_framework("inductor")
    assert fw.runner is not None
    runs, programs = {}, {}
    for k in (2, 16):
        model = nn.Sequential(*[nn.BatchNorm1d(8) for _ in range(k)]).eval()
        x = (torch.randn(4, 8),)
        runs[k] = fw.runner(model, x, 4, device="cpu", dtype="fp32")
        programs[k] = fw.program(model, x, 4, trace(model, x), device="cpu", dtype="fp32")
    assert in_model_guard_scale(runs, programs, ()) == (1.0, {})  # no rows: nothing timed
    rows = ((0.0, 0.2e-6, 0.2e-6), (float(64 << 20), 1e-6, 1e-6))
    scale, record = in_model_guard_scale(runs, programs, rows)
    assert scale > 0.0 and record["scale"] == scale
    by_net = {n["network"]: n for n in record["networks"]}
    assert set(by_net) == {"2", "16"}
    # 16 batch norms: 65 tensors and 17 modules against 2's 9 and 3
    assert by_net["16"]["priced_s"] > 5 * by_net["2"]["priced_s"] > 0.0
    assert all(n["measured_s"] > 0.0 for n in by_net.values())
