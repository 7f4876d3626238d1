"""The local NVIDIA GPU through NVML (nvidia-ml-py), without initialising CUDA."""

from __future__ import annotations

__all__ = ["local_gpu_name", "local_gpu_profile_name"]


def local_gpu_name(index: int = 0) -> str | None:
    """The name of GPU ``index`` as NVML reports it, or None when there is no NVIDIA GPU."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver / no GPU
        return None
    try:
        if pynvml.nvmlDeviceGetCount() <= index:
            return None
        name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
        return name.decode() if isinstance(name, bytes) else str(name)
    finally:
        pynvml.nvmlShutdown()


def local_gpu_profile_name(index: int = 0) -> str | None:
    """A profile name for the local GPU: a calibrated one if present, else its NVML name."""
    from ftmodel.hardware.registry import default_profile_path

    name = local_gpu_name(index)
    if name is None:
        return None
    calibrated = default_profile_path(f"local-cuda{index}")
    return str(calibrated) if calibrated.is_file() else name
