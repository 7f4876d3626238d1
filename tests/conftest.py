"""Shared fixtures: an isolated FTMODEL_HOME and a tiny synthetic calibrated profile.

No test runs the real calibration (minutes); the profile here is built in memory from the
``ftmodel.hardware.profile`` dataclasses and is schema-valid, so it also round-trips through JSON.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ftmodel.hardware.profile import (
    DeviceProfile,
    FrameworkHost,
    HardwareProfile,
    HostProfile,
    OpClassData,
    write_profile,
)

MAC_CLASSES = ("gemm", "conv", "conv_grouped", "bmm", "attention")
BYTE_CLASSES = ("elementwise", "copy", "norm", "pool", "reduction", "softmax", "embedding")
ALL_CLASSES = MAC_CLASSES + BYTE_CLASSES

# Host costs of the synthetic "eager" framework, in seconds per event.
TINY_PER_EVENT_S: dict[str, float] = {
    "module_call": 2e-6,
    "view": 5e-7,
    "alloc": 3e-7,
    **{f"kernel:{c}": 4e-6 for c in ALL_CLASSES},
}
TINY_PER_CALL_S = 1e-5
TINY_PAGE_FAULT_S = 5e-7  # per freshly mapped 4 KiB page
_SESSION_THREADS = torch.get_num_threads()  # see _torch_threads_restored


def lower_with_onnxruntime(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...],
                           batch: int) -> Any:
    """The Program ONNX Runtime's lowering gives ``module`` on ``inputs`` (CPU, fp32); skips
    the calling test where onnxruntime is not installed."""
    pytest.importorskip("onnxruntime")
    from ftmodel.frameworks.base import get_framework

    fw = get_framework("onnxruntime")
    assert fw.lower_model is not None
    return fw.lower_model(module, inputs, batch, None, device="cpu", dtype="fp32")


def mac_rows() -> tuple[tuple[float, float, float, float], ...]:
    # time = (macs + 1e5) / 1e10: throughput rises with size and saturates at 1e10 MAC/s.
    rows = []
    for macs in (1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9):
        nbytes = 4.0 * macs ** (2 / 3)
        rows.append((macs, 2 * nbytes, nbytes, (macs + 1e5) / 1e10))
    return tuple(rows)


def byte_rows() -> tuple[tuple[float, float, float, float], ...]:
    # time = (bytes + 1e4) / 1e10: bandwidth rises with size and saturates at 10 GB/s.
    rows = []
    for nbytes in (1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8):
        rows.append((0.0, nbytes / 2, nbytes / 2, (nbytes + 1e4) / 1e10))
    return tuple(rows)


def build_profile(*, name: str = "tiny-cpu", frameworks: dict[str, FrameworkHost] | None = None,
                  dtypes: tuple[str, ...] = ("fp32",), execution: str = "sync",
                  with_host: bool = True, op_classes: dict[str, OpClassData] | None = None,
                  page_fault_s: float = TINY_PAGE_FAULT_S, **device_kw: Any) -> HardwareProfile:
    """A small, schema-valid, calibrated-looking profile (every op class has samples)."""
    if op_classes is None:
        op_classes = {c: OpClassData("samples", mac_rows()) for c in MAC_CLASSES}
        op_classes.update({c: OpClassData("samples", byte_rows()) for c in BYTE_CLASSES})
    device = DeviceProfile(
        name=f"{name}-device", type="cpu", execution=execution, op_classes=op_classes,
        kernel_floor_s=device_kw.pop("kernel_floor_s", 1e-7), dtypes=dtypes, **device_kw)
    if frameworks is None:
        frameworks = {"eager": FrameworkHost(
            per_event_s=dict(TINY_PER_EVENT_S), per_call_s=TINY_PER_CALL_S,
            samples=({"program": "relu_fn", "time_s": 1.7e-4, "counts": {"kernel:elementwise": 40}},))}
    host = HostProfile(name=f"{name}-host", cpu="synthetic CPU", threads=2,
                       frameworks=frameworks, page_fault_s=page_fault_s) if with_host else None
    return HardwareProfile(
        name=name, kind="calibrated", device=device, host=host,
        provenance={"device": "synthetic", "date": "2024-01-01", "settings": {"threads": 2}},
        aliases=("tiny",))


@pytest.fixture(scope="session", autouse=True)
def _isolated_ftmodel_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """FTMODEL_HOME points at an empty temp dir for the whole session (never the user cache)."""
    home = tmp_path_factory.mktemp("ftmodel_home")
    old = os.environ.get("FTMODEL_HOME")
    os.environ["FTMODEL_HOME"] = str(home)
    try:
        yield home
    finally:
        if old is None:
            os.environ.pop("FTMODEL_HOME", None)
        else:
            os.environ["FTMODEL_HOME"] = old


@pytest.fixture(autouse=True)
def _torch_threads_restored() -> Iterator[None]:
    """Each test leaves torch's intra-op thread count as it found it. Calibration code fixes
    the count (``ftmodel.measure.set_threads``), and what eager PyTorch runs depends on it (a
    1x1 convolution at batch 1 runs on oneDNN with more than one thread, ``slow2d`` with one),
    so a test that left one thread behind changed the traces of the tests after it. Restored
    to the count at the session's start: a module's fixture may have changed it first."""
    yield
    if torch.get_num_threads() != _SESSION_THREADS:
        torch.set_num_threads(_SESSION_THREADS)


@pytest.fixture(scope="session")
def profile_factory() -> Callable[..., HardwareProfile]:
    """``build_profile(**overrides)``: a fresh synthetic profile (see ``build_profile``)."""
    return build_profile


@pytest.fixture(scope="session")
def tiny_profile() -> HardwareProfile:
    """A synthetic calibrated CPU profile: sync execution, all op classes, eager host costs."""
    return build_profile()


@pytest.fixture(scope="session")
def tiny_profile_path(tiny_profile: HardwareProfile,
                      tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tiny_profile`` written as JSON to a temp file."""
    path = tmp_path_factory.mktemp("profiles") / "tiny-cpu.json"
    write_profile(tiny_profile, path)
    return path
