"""What this machine's CPU is: its name and the identity that tells two CPUs of one name apart;
and how much memory it has free.

Calibration records both in a profile's provenance; ``ftmodel calibrate --update`` checks them.
:mod:`ftmodel.measure` re-exports these names.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

__all__ = ["available_memory_bytes", "cpu_identity", "cpu_name"]


def cpu_name() -> str:
    """This machine's CPU model as Linux names it (``/proc/cpuinfo``), else the platform's."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_identity() -> dict[str, str]:
    """What tells two CPUs of one marketing name apart (a VM's "AMD EPYC" has been two machines
    whose speed differed 1.7x): vendor, family, model and stepping as ``/proc/cpuinfo`` gives
    them for the first processor, and the logical CPU count; empty where Linux does not say."""
    fields = {"vendor_id": "vendor", "cpu family": "family", "model": "model",
              "stepping": "stepping"}
    out: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break  # the first processor's block only
            key, _, value = line.partition(":")
            if key.strip() in fields:
                out[fields[key.strip()]] = value.strip()
    except OSError:
        return {}
    if out:
        out["cpus"] = str(os.cpu_count() or 0)
    return out


def available_memory_bytes() -> int | None:
    """Memory the kernel says can be given to processes now without swapping (Linux's
    ``MemAvailable`` in ``/proc/meminfo``), or None where it does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None
