"""Set-up shared by the op-level probes (``conv_channels.py``, ``pool_windows.py``): generic
layers timed at a profile's nominal machine speed beside the profile's eager prediction."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ftmodel.api import Predictor  # noqa: E402
from ftmodel.hardware.registry import load_profile  # noqa: E402
from ftmodel.measure import keep_heap  # noqa: E402
from ftmodel.speed import SpeedMeter, nominal_reference_s  # noqa: E402


def probe_setup(profile_path: str, threads: int) -> tuple[Predictor, SpeedMeter | None]:
    """Fixes the thread count, keeps the heap (the steady state the curves hold), and returns
    the profile's eager predictor (heap kept) and a meter that scales each timed round to the
    profile's nominal speed (None where the profile recorded none)."""
    torch.set_num_threads(threads)
    keep_heap()
    profile = load_profile(profile_path)
    nominal_s = nominal_reference_s(profile.provenance)
    meter = SpeedMeter(nominal_s=nominal_s) if nominal_s is not None else None
    return Predictor("eager", profile, heap="kept"), meter
