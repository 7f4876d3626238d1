"""The calibration's guard stage (ftmodel.calibration.guards): its chains counted by inductor's
own lowering, one row of prices per amount of memory written between calls."""

from __future__ import annotations

import shutil

import pytest

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
