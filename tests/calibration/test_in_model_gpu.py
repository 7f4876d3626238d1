"""ftmodel.calibration.in_model_gpu: the max-plus in-model fit of an asynchronous device (GPU).

The fits are pure functions of predicted and measured times, tested here on synthetic rows
whose "measurements" come from a known timeline; the stage itself runs on a GPU
(tests/calibration/test_suite.py::test_cuda_calibration_is_async).
"""

from __future__ import annotations

import numpy as np
import pytest

from ftmodel.calibration.in_model_gpu import (
    HOST_SCALE_GRID,
    NetworkRow,
    fit_device_terms,
    fit_host_scale,
)
from ftmodel.estimate.timeline import run_timeline


def _rows(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray, str]]:
    """(o_i, k_i, network) for 6 networks × 4 batches: host-bound at small, device-bound at
    large batch, as on a GPU."""
    rng = np.random.default_rng(seed)
    rows = []
    for net in range(6):
        n = int(rng.integers(20, 120))
        o = rng.uniform(5e-6, 15e-6, n)
        k1 = rng.uniform(1e-6, 8e-6, n)
        for b in (1, 8, 64, 256):
            rows.append((o, k1 * b ** 0.9, f"net{net}"))
    return rows


def _latency(o: np.ndarray, k: np.ndarray, h: float) -> float:
    return run_timeline(o * h, k, execution="async").latency_s


@pytest.mark.parametrize("true_h", [0.7, 1.0, 1.6])
def test_host_scale_is_recovered_from_max_plus_timelines(true_h: float) -> None:
    rows = _rows()
    rng = np.random.default_rng(1)
    measured = [_latency(o, k, true_h) * rng.uniform(0.98, 1.02) for o, k, _ in rows]
    h, cv = fit_host_scale(lambda i, s: _latency(rows[i][0], rows[i][1], s), measured,
                           [g for *_, g in rows])
    step = HOST_SCALE_GRID[1] / HOST_SCALE_GRID[0]
    assert abs(np.log(h / true_h)) <= np.log(step) + 0.03
    assert cv < 0.05


def test_host_scale_stays_one_when_host_does_not_matter() -> None:
    # every row device-bound: the host scale changes nothing, so no correction is adopted
    rows = [(o * 1e-3, k, g) for o, k, g in _rows()]
    measured = [_latency(o, k, 1.0) for o, k, _ in rows]
    h, _ = fit_host_scale(lambda i, s: _latency(rows[i][0], rows[i][1], s), measured,
                          [g for *_, g in rows])
    assert h == 1.0


def test_device_fit_without_host_terms_recovers_the_scale() -> None:
    # what calibration and benchmarks/refit_gpu_host.py fit on CUDA-graph replays
    rows = [NetworkRow((g, i), o, k, np.full(len(k), 1e6)) for i, (o, k, g) in enumerate(_rows())]
    measured = [0.8 * float(r.device_s.sum()) for r in rows]
    fit = fit_device_terms(rows, measured)
    assert fit["device_scale"] == pytest.approx(0.8, rel=1e-6)
    assert fit["per_kernel_s"] == 0.0  # not a candidate form
    assert fit["cv_median_ape"] == pytest.approx(0.0, abs=1e-9)
