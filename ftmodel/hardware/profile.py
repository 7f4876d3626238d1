"""Hardware profiles: a versioned, pure-JSON description of a host CPU and a device.

A profile has two halves that can be combined:

* **host** — per-framework dispatch costs of a host CPU, in seconds per event
  (``module_call``, ``view``, ``alloc``, ``kernel:<op class>``) plus a fixed
  per-forward ``per_call_s``, with the raw calibration samples they were fitted from.
* **device** — how long kernels take: per op class either measured ``samples``
  (``[macs, bytes_read, bytes_written, time_s]`` rows, and optionally ``cold_s``, the same
  samples timed with cold operands; the curves are rebuilt from them on load) or a spec-derived ``roofline`` (peak rate, bandwidth, efficiency parameters), plus the
  execution mode (``sync`` CPU, ``async`` GPU), launch latency, sync cost and kernel floor.
  Roofline parameters may be specialised per math dtype with a ``:<dtype>`` suffix, e.g.
  ``peak_macs_per_s:fp16`` (tensor cores) next to ``peak_macs_per_s`` (the fp32 default).
  ``launches_per_op`` says how many device kernels one op of a class launches on this device
  under a framework (``{"eager": {"conv": 2.4, "conv:fp16": 4.4, "gemm": 2.0}}``; 1 if absent):
  cuDNN and cuBLAS launch helper kernels that the aten-level trace cannot see.

A **host-only** profile (schema ``ftmodel.host``) holds just a host half: built-in defaults such
as ``paper-host`` and hosts calibrated on their own. It can be passed as ``host=`` but never as a
device.

Loading never executes code (no pickle): every field is type-checked and a bad field raises
:class:`~ftmodel.errors.ProfileError` naming its path, e.g. ``device.op_classes.gemm.samples[3]``.
Files are written atomically (temporary file + ``os.replace``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ftmodel.errors import ProfileError
from ftmodel.hardware.json_file import write_json_atomic
from ftmodel.hardware.profile_fields import field_value, number_rows, seconds_map

__all__ = [
    "SCHEMA", "HOST_SCHEMA", "SCHEMA_VERSION", "DEVICE_TERMS", "KIND_SCALES", "HostProfile",
    "FrameworkHost",
    "DeviceProfile", "OpClassData", "HardwareProfile", "HostOnlyProfile", "profile_from_dict",
    "host_profile_from_dict", "read_profile", "read_any_profile", "write_profile",
    "write_host_profile",
]

SCHEMA = "ftmodel.profile"
HOST_SCHEMA = "ftmodel.host"
SCHEMA_VERSION = 1
_P = TypeVar("_P", "HardwareProfile", "HostOnlyProfile")


@dataclass(frozen=True)
class FrameworkHost:
    """Host-side costs of one framework on one CPU."""

    per_event_s: Mapping[str, float]  # event kind -> seconds per event
    per_call_s: float = 0.0  # fixed cost per forward call (session.run, graph replay ...)
    samples: tuple[Mapping[str, Any], ...] = ()  # raw calibration programs and their times
    # How single-op costs add up inside a whole model (ftmodel.calibration.networks):
    # o_i -> host_scale·o_i + per_kernel_s, k_i -> device_scale·k_i + per_byte_s·bytes_i;
    # per_kernel_s is Python's, so a kernel C++ launched within one call (Kernel.inner) pays none.
    # Where the fit scaled kernels by kind (KIND_SCALES), a convolution's k_i is scaled by
    # device_scale_conv and a kernel of a class without MACs (element-wise, norms, copies,
    # pools) by device_scale_other; device_scale then scales the other MAC kernels (GEMMs).
    # Identity when absent.
    in_model: Mapping[str, float] = field(default_factory=dict)
    # dynamo's guards (inductor; ftmodel.estimate.guards): rows of (bytes written between two
    # calls, seconds per guarded tensor, seconds per guarded module); empty = not measured
    guards: tuple[tuple[float, float, float], ...] = ()


# in-model terms on the device side (FrameworkHost.in_model): fitted against one calibration's
# device curves, so they travel with its device half, not with its host half
DEVICE_TERMS = ("device_scale", "per_byte_s")
# the device scales by kernel kind, when the in-model fit chose them (FrameworkHost.in_model);
# device-side too, and dropped with DEVICE_TERMS from a host half taken from another profile
KIND_SCALES = ("device_scale_conv", "device_scale_other")


@dataclass(frozen=True)
class HostProfile:
    name: str
    cpu: str
    threads: int
    frameworks: Mapping[str, FrameworkHost]
    # seconds per 4 KiB page that malloc maps afresh (page fault, zero-fill, unmap), measured by
    # ftmodel.calibration.allocator; 0 = not measured (predictions then assume the heap is kept)
    page_fault_s: float = 0.0
    # glibc's mmap threshold (bytes) after `import torch`, where the heap simulation starts,
    # measured by ftmodel.calibration.allocator; 0 = not measured (glibc's initial 128 KiB)
    mmap_threshold_bytes: int = 0
    # the device type whose launches the costs above were measured driving: "cpu" or "cuda"
    # ("" = not recorded). A compiled framework's costs measured on a CPU (C++ kernels) do not
    # price its launches on a GPU (Triton kernels, CUDA graph replays)
    drives: str = ""


@dataclass(frozen=True)
class OpClassData:
    """Device time data of one op class: measured samples or a roofline."""

    model: str  # "samples" | "roofline"
    samples: tuple[tuple[float, float, float, float], ...] = ()  # macs, bytes_r, bytes_w, time_s
    params: Mapping[str, float] = field(default_factory=dict)  # roofline parameters
    # time_s of each sample again with cold operands (inputs and weights streamed from memory,
    # not cache); parallel to ``samples``, empty when not measured (see ftmodel.estimate.cache)
    cold_s: tuple[float, ...] = ()


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    type: str  # "cpu" | "cuda"
    execution: str  # "sync" | "async"
    op_classes: Mapping[str, OpClassData]
    launch_latency_s: float = 0.0
    sync_s: float = 0.0
    kernel_floor_s: float = 0.0
    dtypes: tuple[str, ...] = ("fp32",)
    specs: Mapping[str, Any] = field(default_factory=dict)
    # framework -> "<op class>" or "<op class>:<dtype>" -> device kernels per op (default 1)
    launches_per_op: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # the cold/hot operand model's parameters (ftmodel.estimate.cache.CacheModel: lo_bytes,
    # hi_bytes, stream_share, cold_s_per_byte, narrow_bytes, wide_bytes, wide_ratio); empty = no
    # cache model
    cache: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class HostOnlyProfile:
    """A host half on its own (schema ``ftmodel.host``): usable as ``host=``, never as a device."""

    name: str
    kind: str  # "calibrated" | "spec-derived" (fitted on published measurements)
    host: HostProfile
    provenance: Mapping[str, Any] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        return {"schema": HOST_SCHEMA, **d}


@dataclass(frozen=True)
class HardwareProfile:
    """A host half, a device half and where they came from."""

    name: str
    kind: str  # "calibrated" | "spec-derived"
    device: DeviceProfile
    host: HostProfile | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (lists, not tuples): ``profile_from_dict(p.to_dict())`` round-trips."""
        d: dict[str, Any] = json.loads(json.dumps(asdict(self)))
        return {"schema": SCHEMA, **d}


# ---- validation helpers -------------------------------------------------------------------------

def _framework_host(d: Any, path: str) -> FrameworkHost:
    samples = field_value(d, "samples", list, path, [])
    for i, s in enumerate(samples):
        if not isinstance(s, Mapping):
            raise ProfileError(f"profile field '{path}.samples[{i}]' must be an object")
    return FrameworkHost(
        per_event_s=seconds_map(field_value(d, "per_event_s", dict, path), f"{path}.per_event_s"),
        per_call_s=field_value(d, "per_call_s", float, path, 0.0),
        samples=tuple(samples),
        in_model=seconds_map(field_value(d, "in_model", dict, path, {}), f"{path}.in_model"),
        guards=_guard_rows(field_value(d, "guards", list, path, []), f"{path}.guards"),
    )


def _guard_rows(rows: list[Any], path: str) -> tuple[tuple[float, float, float], ...]:
    return tuple((b, t, m) for b, t, m in number_rows(
        rows, 3, path, "bytes written between calls, seconds per tensor, seconds per module"))


def _host(d: Any, path: str) -> HostProfile:
    fws = field_value(d, "frameworks", dict, path)
    threads = field_value(d, "threads", int, path, 1)
    if threads < 1:
        raise ProfileError(f"profile field '{path}.threads' must be >= 1, got {threads}")
    return HostProfile(
        name=field_value(d, "name", str, path),
        cpu=field_value(d, "cpu", str, path, "unknown"),
        threads=threads,
        frameworks={k: _framework_host(v, f"{path}.frameworks.{k}") for k, v in fws.items()},
        page_fault_s=field_value(d, "page_fault_s", float, path, 0.0),
        mmap_threshold_bytes=_mmap_threshold(
            field_value(d, "mmap_threshold_bytes", int, path, 0), path),
        drives=_drives(field_value(d, "drives", str, path, ""), path),
    )


def _mmap_threshold(value: int, path: str) -> int:
    if not 0 <= value <= 1 << 40:
        raise ProfileError(f"profile field '{path}.mmap_threshold_bytes' must be a byte count "
                           f"between 0 (not measured) and 2**40, got {value}; re-run `ftmodel "
                           "calibrate` to measure it")
    return value


def _drives(value: str, path: str) -> str:
    if value not in ("", "cpu", "cuda"):
        raise ProfileError(f"profile field '{path}.drives' must be 'cpu', 'cuda' or '', got "
                           f"{value!r}")
    return value


def _op_class(d: Any, path: str) -> OpClassData:
    model = field_value(d, "model", str, path)
    if model not in ("samples", "roofline"):
        raise ProfileError(f"profile field '{path}.model' must be 'samples' or 'roofline', "
                           f"got {model!r}")
    samples = number_rows(field_value(d, "samples", list, path, []), 4, f"{path}.samples",
                          "macs, bytes_read, bytes_written, time_s")
    if model == "samples" and not samples:
        raise ProfileError(f"profile field '{path}.samples' is empty; a 'samples' curve needs data")
    params = seconds_map(field_value(d, "params", dict, path, {}), f"{path}.params")
    if model == "roofline" and "bandwidth_Bps" not in params:
        raise ProfileError(f"profile field '{path}.params.bandwidth_Bps' is missing; a roofline "
                           "needs the memory bandwidth")
    cold = field_value(d, "cold_s", list, path, [])
    for i, v in enumerate(cold):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v < 0:
            raise ProfileError(f"profile field '{path}.cold_s[{i}]' must be seconds >= 0, "
                               f"got {v!r:.80}")
    if cold and len(cold) != len(samples):
        raise ProfileError(f"profile field '{path}.cold_s' has {len(cold)} entries but "
                           f"'{path}.samples' has {len(samples)}; they must be parallel")
    return OpClassData(model=model, samples=tuple(samples), params=params,  # type: ignore[arg-type]
                       cold_s=tuple(float(v) for v in cold))


def _device(d: Any, path: str) -> DeviceProfile:
    execution = field_value(d, "execution", str, path)
    if execution not in ("sync", "async"):
        raise ProfileError(f"profile field '{path}.execution' must be 'sync' or 'async', "
                           f"got {execution!r}")
    classes = field_value(d, "op_classes", dict, path)
    dtypes = field_value(d, "dtypes", list, path, ["fp32"])
    if not all(isinstance(x, str) for x in dtypes):
        raise ProfileError(f"profile field '{path}.dtypes' must be a list of names such as "
                           f"'fp32', got {dtypes!r:.80}")
    return DeviceProfile(
        name=field_value(d, "name", str, path),
        type=field_value(d, "type", str, path),
        execution=execution,
        op_classes={k: _op_class(v, f"{path}.op_classes.{k}") for k, v in classes.items()},
        launch_latency_s=field_value(d, "launch_latency_s", float, path, 0.0),
        sync_s=field_value(d, "sync_s", float, path, 0.0),
        kernel_floor_s=field_value(d, "kernel_floor_s", float, path, 0.0),
        dtypes=tuple(dtypes),
        specs=dict(field_value(d, "specs", dict, path, {})),
        launches_per_op=_launches(field_value(d, "launches_per_op", dict, path, {}),
                                  f"{path}.launches_per_op"),
        cache=seconds_map(field_value(d, "cache", dict, path, {}), f"{path}.cache"),
    )


def _launches(d: Mapping[str, Any], path: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for fw, table in d.items():
        where = f"{path}.{fw}"
        if not isinstance(table, Mapping):
            raise ProfileError(f"profile field {where!r} must be an object of kernels per op")
        out[str(fw)] = {str(k): field_value(table, k, float, where) for k in table}
        for k, v in out[str(fw)].items():
            if v < 1.0:
                raise ProfileError(f"profile field '{where}.{k}' must be >= 1 kernel per op, "
                                   f"got {v!r}")
    return out


def _check_header(d: Any, source: str, schema: str) -> str:
    """Check the schema and its version; the profile's kind."""
    if not isinstance(d, Mapping):
        raise ProfileError(f"{source}: a profile must be a JSON object, got {type(d).__name__}")
    if d.get("schema") != schema:
        other = {SCHEMA: "a device profile", HOST_SCHEMA: "a host-only profile"}.get(
            str(d.get("schema")))
        if other:
            raise ProfileError(f"{source}: this is {other} (schema {d.get('schema')!r}), "
                               f"expected schema {schema!r}")
        raise ProfileError(f"{source}: field 'schema' must be {schema!r}, got "
                           f"{d.get('schema')!r}; this is not an ftmodel profile")
    version = d.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ProfileError(
            f"{source}: field 'schema_version' is {version!r} but this ftmodel reads version "
            f"{SCHEMA_VERSION}; re-run `ftmodel calibrate` or upgrade ftmodel")
    kind = field_value(d, "kind", str, "")
    if kind not in ("calibrated", "spec-derived"):
        raise ProfileError(f"{source}: field 'kind' must be 'calibrated' or 'spec-derived', "
                           f"got {kind!r}")
    return str(kind)


def profile_from_dict(d: Any, source: str = "<dict>") -> HardwareProfile:
    """Validate a decoded JSON object and build a HardwareProfile; errors name the field."""
    kind = _check_header(d, source, SCHEMA)
    host = d.get("host")
    return HardwareProfile(
        name=field_value(d, "name", str, ""),
        kind=kind,
        device=_device(field_value(d, "device", dict, ""), "device"),
        host=None if host is None else _host(host, "host"),
        provenance=dict(field_value(d, "provenance", dict, "", {})),
        aliases=tuple(str(a) for a in field_value(d, "aliases", list, "", [])),
    )


def host_profile_from_dict(d: Any, source: str = "<dict>") -> HostOnlyProfile:
    """Validate a decoded ``ftmodel.host`` JSON object; errors name the field."""
    kind = _check_header(d, source, HOST_SCHEMA)
    return HostOnlyProfile(
        name=field_value(d, "name", str, ""),
        kind=kind,
        host=_host(field_value(d, "host", dict, ""), "host"),
        provenance=dict(field_value(d, "provenance", dict, "", {})),
        aliases=tuple(str(a) for a in field_value(d, "aliases", list, "", [])),
    )


def read_any_profile(path: str | os.PathLike[str]) -> HardwareProfile | HostOnlyProfile:
    """A device profile or a host-only profile, whichever the file's ``schema`` says."""
    p = Path(path)
    data = _read_json(p)
    if isinstance(data, Mapping) and data.get("schema") == HOST_SCHEMA:
        return _built(host_profile_from_dict, data, p)
    return _built(profile_from_dict, data, p)


def _built(build: Callable[[Any, str], _P], data: Any, p: Path) -> _P:
    """``build(data)``, its errors naming the file ``p``."""
    try:
        return build(data, str(p))
    except ProfileError as err:
        msg = str(err)
        raise ProfileError(msg if msg.startswith(str(p)) else f"{p}: {msg}") from None


def _read_json(p: Path) -> Any:
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise ProfileError(f"cannot read profile {str(p)!r}: {err.strerror}") from err
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ProfileError(f"{p}: not valid JSON ({err.msg} at line {err.lineno}); the file is "
                           "corrupt — re-run `ftmodel calibrate` to rebuild it") from err
    return data


def read_profile(path: str | os.PathLike[str]) -> HardwareProfile:
    p = Path(path)
    return _built(profile_from_dict, _read_json(p), p)


def write_profile(profile: HardwareProfile, path: str | os.PathLike[str]) -> Path:
    return write_json_atomic(path, profile.to_dict())


def write_host_profile(profile: HostOnlyProfile, path: str | os.PathLike[str]) -> Path:
    return write_json_atomic(path, profile.to_dict())
