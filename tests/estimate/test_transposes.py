"""A kernel's transposed bytes (Kernel.bytes_transposed) priced on the framework's transpose curve
(``<framework>/copy:transpose``), the rest of it on its class's, and where there is no such
curve."""

from __future__ import annotations

import pytest

from ftmodel.batch_scaling import kernel_at_batch
from ftmodel.estimate.kernels import DeviceModel
from ftmodel.hardware.profile import DeviceProfile, OpClassData
from ftmodel.program import Kernel
from ftmodel.tracing.variants import TRANSPOSE

# the class curves: 10 GB/s over bytes moved; the transpose curve: 2.5 GB/s
SIZES = (1e3, 1e4, 1e5, 1e6, 1e7, 1e8)
NORM_ROWS = tuple((0.0, b, b, 2 * b / 1e10) for b in SIZES)
TRANSPOSE_ROWS = tuple((0.0, b, b, 2 * b / 2.5e9) for b in SIZES)


def _device(transposes: bool = True) -> DeviceProfile:
    classes = {"inductor/norm": OpClassData("samples", NORM_ROWS),
               "inductor/copy": OpClassData("samples", NORM_ROWS)}
    if transposes:
        classes["inductor/copy:transpose"] = OpClassData("samples", TRANSPOSE_ROWS)
    return DeviceProfile("dev", "cpu", "sync", classes)


def _norm(activations: int, weights: int) -> Kernel:
    """A batch norm over ``activations`` bytes (in place) fused with the channels-last copy of
    a convolution's ``weights`` bytes."""
    return Kernel("norm", 0, activations + weights, activations + weights, "bn",
                  ("cpp_fused__native_batch_norm_legit_no_training_convolution_relu_1",),
                  bytes_weights=weights, bytes_transposed=weights)


def test_a_fused_kernels_transposed_bytes_go_on_the_transpose_curve() -> None:
    model = DeviceModel(_device(), framework="inductor")
    act, w = 1_000_000, 4_000_000
    (t,) = model.kernel_times_s([_norm(act, w)])
    assert t == pytest.approx(2 * act / 1e10 + 2 * w / 2.5e9, rel=0.02)
    # a kernel that only transposes is looked up on the transpose curve whole
    pure = Kernel("copy", 0, w, w, "x", ("cpp_fused_clone_0",), variant=TRANSPOSE,
                  bytes_transposed=w)
    assert model.kernel_times_s([pure])[0] == pytest.approx(2 * w / 2.5e9, rel=0.02)


def test_without_a_transpose_curve_or_for_another_framework_the_class_prices_all() -> None:
    act, w = 1_000_000, 4_000_000
    plain = 2 * (act + w) / 1e10
    assert DeviceModel(_device(False), framework="inductor").kernel_times_s(
        [_norm(act, w)])[0] == pytest.approx(plain, rel=0.02)
    # eager's curves are the shared ones; inductor's transpose curve is not among them
    classes = {"norm": OpClassData("samples", NORM_ROWS), **_device().op_classes}
    eager = DeviceModel(DeviceProfile("dev", "cpu", "sync", classes), framework="eager")
    assert eager.kernel_times_s([_norm(act, w)])[0] == pytest.approx(plain, rel=0.02)


def test_transposed_weights_stay_when_a_kernel_is_resized_to_another_batch() -> None:
    k = Kernel("copy", 0, 3_000, 3_000, "x", ("cpp_fused_clone_0",), variant=TRANSPOSE,
               bytes_weights=1_000, bytes_transposed=3_000)  # 1 kB of weights, 2 kB of input
    assert kernel_at_batch(k, 1, 4).bytes_transposed == 1_000 + 4 * 2_000
