"""Pools priced by the bytes their windows read (Kernel.bytes_window_reads) on a profile's
per-window curves (``pool@<op>:windows``), and where they are not."""

from __future__ import annotations

import pytest

from ftmodel.api import kernel_at_batch
from ftmodel.estimate.kernels import DeviceModel, measured_peaks
from ftmodel.hardware.profile import DeviceProfile, OpClassData
from ftmodel.program import Kernel

MAX2D = "aten.max_pool2d_with_indices.default"
# the bytes curve: 10 GB/s over bytes moved; the per-window curve: 1 ns per byte the windows
# read (an axis of its own, in bytes read through windows, with outputs as bytes written)
BYTES_ROWS = tuple((0.0, b, b / 4, 1.25 * b / 1e10) for b in (1e3, 1e4, 1e5, 1e6, 1e7))
WINDOW_ROWS = tuple((0.0, w, o, w * 1e-9) for w in (1e3, 1e4, 1e5, 1e6, 1e7, 1e8)
                    for o in (w / 25, w / 4))


def _device(windows: bool = True) -> DeviceProfile:
    classes = {"pool": OpClassData("samples", BYTES_ROWS),
               "pool@max_pool2d_with_indices": OpClassData("samples", BYTES_ROWS)}
    if windows:
        classes["pool@max_pool2d_with_indices:windows"] = OpClassData("samples", WINDOW_ROWS)
    return DeviceProfile("dev", "cpu", "sync", classes)


def _pool(window_bytes: int, variant: str = "", nbytes: int = 400_000) -> Kernel:
    return Kernel("pool", 0, nbytes, nbytes // 4, "pool", (MAX2D,), variant=variant,
                  bytes_window_reads=window_bytes)


def test_a_pool_is_priced_by_the_bytes_its_windows_read() -> None:
    # the same input and output, windows of 4 and 25 elements per output: 6.25x the reads
    model = DeviceModel(_device())
    small, large = model.kernel_times_s([_pool(400_000), _pool(2_500_000)])
    assert small == pytest.approx(400_000e-9, rel=0.05)
    assert large == pytest.approx(2_500_000e-9, rel=0.05)
    # without the curve, or without counted windows, the bytes moved price it: both alike
    bytes_only = DeviceModel(_device(windows=False))
    t = bytes_only.kernel_times_s([_pool(400_000), _pool(2_500_000)])
    assert t[0] == t[1] == pytest.approx(500_000 / 1e10, rel=0.05)
    assert model.kernel_times_s([_pool(0)])[0] == pytest.approx(t[0], rel=1e-9)


def test_a_pool_run_by_another_library_keeps_its_bytes_price() -> None:
    # the per-window curves time aten's pools on plain tensors; a variant (oneDNN's pooling on
    # a blocked tensor) is not priced there
    model = DeviceModel(_device())
    blocked = _pool(2_500_000, variant="mkldnn_layout")
    plain = DeviceModel(_device(windows=False)).kernel_times_s([blocked])[0]
    assert model.kernel_times_s([blocked])[0] == pytest.approx(plain, rel=1e-9)


def test_window_bytes_set_no_peak_byte_rate_and_the_floor_stays_on_bytes_moved() -> None:
    # window reads count an input element once per window it lies in: not bytes moved
    assert measured_peaks(_device()) == measured_peaks(_device(windows=False))
    fast = tuple((0.0, w, o, w * 1e-12) for (_, w, o, _) in WINDOW_ROWS)  # 1 TB/s of windows
    classes = {"pool": OpClassData("samples", BYTES_ROWS),
               "pool@max_pool2d_with_indices:windows": OpClassData("samples", fast)}
    model = DeviceModel(DeviceProfile("dev", "cpu", "sync", classes))
    t = model.kernel_times_s([_pool(2_500_000)])[0]
    peak_bytes = measured_peaks(model.device)[1]
    assert peak_bytes > 0 and t >= 500_000 / peak_bytes  # never below bytes ÷ fastest rate


def test_kernel_at_batch_scales_window_reads() -> None:
    assert kernel_at_batch(_pool(1000), 2, 8).bytes_window_reads == 4000
