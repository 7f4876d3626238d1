"""ftmodel.hardware.profile: JSON round trip, validation that names the bad field, atomic writes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from dataclasses import replace
from typing import Any

import pytest

from ftmodel.errors import ProfileError
from ftmodel.hardware import profile as profile_mod
from ftmodel.hardware.profile import (
    SCHEMA_VERSION,
    HardwareProfile,
    profile_from_dict,
    read_profile,
    write_profile,
)
from ftmodel.hardware.registry import load_host_profile


def _as_json(profile: HardwareProfile) -> dict[str, Any]:
    return json.loads(json.dumps(profile.to_dict()))


def _write_raw(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_round_trip_equal(tiny_profile: HardwareProfile, tmp_path: Path) -> None:
    path = write_profile(tiny_profile, tmp_path / "p.json")
    assert path == tmp_path / "p.json"
    loaded = read_profile(path)
    assert loaded == tiny_profile
    # and a second trip is byte-identical
    write_profile(loaded, tmp_path / "q.json")
    assert (tmp_path / "p.json").read_bytes() == (tmp_path / "q.json").read_bytes()


def test_a_calibrated_host_half_drives_its_own_device(tiny_profile: HardwareProfile,
                                                       tmp_path: Path) -> None:
    # profiles written before HostProfile.drives was recorded: taken as host=, the host half
    # of a calibrated profile drove that profile's device; a recorded value round-trips
    assert tiny_profile.host is not None and tiny_profile.host.drives == ""
    path = write_profile(tiny_profile, tmp_path / "p.json")
    assert load_host_profile(path).drives == tiny_profile.device.type
    marked = replace(tiny_profile, host=replace(tiny_profile.host, drives="cuda"))
    assert read_profile(write_profile(marked, tmp_path / "q.json")) == marked


def test_round_trip_without_host(profile_factory: Any, tmp_path: Path) -> None:
    prof = profile_factory(with_host=False)
    assert read_profile(write_profile(prof, tmp_path / "p.json")) == prof


def test_write_creates_parent_dirs(tiny_profile: HardwareProfile, tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "p.json"
    write_profile(tiny_profile, path)
    assert read_profile(path) == tiny_profile


def test_corrupt_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"schema": "ftmodel.profile", ', encoding="utf-8")
    with pytest.raises(ProfileError, match="not valid JSON") as err:
        read_profile(path)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read profile"):
        read_profile(tmp_path / "nope.json")


def test_not_an_object(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="JSON object"):
        read_profile(_write_raw(tmp_path / "p.json", [1, 2, 3]))


def test_wrong_schema_name(tiny_profile: HardwareProfile, tmp_path: Path) -> None:
    d = _as_json(tiny_profile)
    d["schema"] = "something.else"
    with pytest.raises(ProfileError, match="'schema'"):
        read_profile(_write_raw(tmp_path / "p.json", d))


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 0, None, "1"])
def test_wrong_schema_version(tiny_profile: HardwareProfile, tmp_path: Path,
                              version: Any) -> None:
    d = _as_json(tiny_profile)
    d["schema_version"] = version
    with pytest.raises(ProfileError, match="'schema_version'") as err:
        read_profile(_write_raw(tmp_path / "p.json", d))
    assert str(tmp_path / "p.json") in str(err.value)


def test_bad_sample_row_names_field(tiny_profile: HardwareProfile, tmp_path: Path) -> None:
    d = _as_json(tiny_profile)
    d["device"]["op_classes"]["gemm"]["samples"][1] = [1, 2]
    with pytest.raises(ProfileError) as err:
        read_profile(_write_raw(tmp_path / "p.json", d))
    msg = str(err.value)
    assert "device.op_classes.gemm.samples[1]" in msg
    assert str(tmp_path / "p.json") in msg  # the file is named too


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["device"].__setitem__("launch_latency_s", -1.0), "device.launch_latency_s"),
    (lambda d: d["device"].__setitem__("kernel_floor_s", -1), "device.kernel_floor_s"),
    (lambda d: d["device"]["op_classes"]["norm"]["samples"][0].__setitem__(3, -1e-6),
     "device.op_classes.norm.samples[0]"),
    (lambda d: d["host"]["frameworks"]["eager"]["per_event_s"].__setitem__("view", -5e-7),
     "host.frameworks.eager.per_event_s.view"),
    (lambda d: d["host"]["frameworks"]["eager"].__setitem__("per_call_s", -1.0),
     "host.frameworks.eager.per_call_s"),
])
def test_negative_number_rejected(tiny_profile: HardwareProfile, mutate: Any, field: str) -> None:
    d = _as_json(tiny_profile)
    mutate(d)
    with pytest.raises(ProfileError) as err:
        profile_from_dict(d)
    assert field in str(err.value)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["device"].__setitem__("execution", "sometimes"), "device.execution"),
    (lambda d: d["device"]["op_classes"]["gemm"].__setitem__("model", "magic"),
     "device.op_classes.gemm.model"),
    (lambda d: d["device"]["op_classes"]["gemm"].__setitem__("samples", []),
     "device.op_classes.gemm.samples"),
    (lambda d: d["device"].__setitem__("sync_s", "fast"), "device.sync_s"),
    (lambda d: d["device"].__setitem__("sync_s", True), "device.sync_s"),
    (lambda d: d["device"]["op_classes"]["gemm"]["samples"][0].__setitem__(0, float("nan")),
     "device.op_classes.gemm.samples[0]"),
    (lambda d: d["host"]["frameworks"]["eager"].__setitem__("per_event_s", [1.0]),
     "host.frameworks.eager.per_event_s"),
    (lambda d: d.__setitem__("kind", "guessed"), "kind"),
    (lambda d: d["host"].__setitem__("drives", "tpu"), "host.drives"),
    (lambda d: d["host"].__setitem__("mmap_threshold_bytes", -1), "host.mmap_threshold_bytes"),
    (lambda d: d["host"].__setitem__("mmap_threshold_bytes", 1.5), "host.mmap_threshold_bytes"),
])
def test_bad_field_names_itself(tiny_profile: HardwareProfile, mutate: Any, field: str) -> None:
    d = _as_json(tiny_profile)
    mutate(d)
    with pytest.raises(ProfileError) as err:
        profile_from_dict(d)
    assert field in str(err.value)


def test_mmap_threshold_round_trips_and_defaults_to_unmeasured(tiny_profile: HardwareProfile,
                                                              tmp_path: Path) -> None:
    assert tiny_profile.host is not None
    d = _as_json(tiny_profile)
    del d["host"]["mmap_threshold_bytes"]  # a profile calibrated before it was measured
    assert profile_from_dict(d).host.mmap_threshold_bytes == 0  # type: ignore[union-attr]
    probed = replace(tiny_profile, host=replace(tiny_profile.host, mmap_threshold_bytes=1_052_672))
    loaded = read_profile(write_profile(probed, tmp_path / "p.json"))
    assert loaded.host is not None and loaded.host.mmap_threshold_bytes == 1_052_672


def test_missing_device_named(tiny_profile: HardwareProfile, tmp_path: Path) -> None:
    d = _as_json(tiny_profile)
    del d["device"]
    with pytest.raises(ProfileError, match="'device'") as err:
        read_profile(_write_raw(tmp_path / "p.json", d))
    assert "missing" in str(err.value)


def test_missing_nested_field_named(tiny_profile: HardwareProfile) -> None:
    d = _as_json(tiny_profile)
    del d["device"]["execution"]
    with pytest.raises(ProfileError, match="device.execution"):
        profile_from_dict(d)


def test_negative_threads_rejected(tiny_profile: HardwareProfile) -> None:
    d = _as_json(tiny_profile)
    d["host"]["threads"] = -3
    with pytest.raises(ProfileError, match="host.threads"):
        profile_from_dict(d)


def test_bad_dtypes_rejected(tiny_profile: HardwareProfile) -> None:
    d = _as_json(tiny_profile)
    d["device"]["dtypes"] = [1, None]
    with pytest.raises(ProfileError, match="device.dtypes"):
        profile_from_dict(d)


def test_roofline_missing_bandwidth_rejected(tiny_profile: HardwareProfile) -> None:
    d = _as_json(tiny_profile)
    d["device"]["op_classes"]["gemm"] = {"model": "roofline",
                                         "params": {"peak_macs_per_s": 1e9}}
    with pytest.raises(ProfileError, match="device.op_classes.gemm"):
        profile_from_dict(d)


def test_profile_from_to_dict_round_trip(tiny_profile: HardwareProfile) -> None:
    assert profile_from_dict(tiny_profile.to_dict()) == tiny_profile


def test_atomic_write_leaves_no_tmp(tiny_profile: HardwareProfile, tmp_path: Path) -> None:
    write_profile(tiny_profile, tmp_path / "p.json")
    write_profile(tiny_profile, tmp_path / "p.json")  # overwrite too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]


def test_atomic_write_gives_the_file_the_umasks_permissions(tiny_profile: HardwareProfile,
                                                             tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        path = write_profile(tiny_profile, tmp_path / "p.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # not the temporary file's 0o600


def test_failed_write_keeps_previous_file(tiny_profile: HardwareProfile, profile_factory: Any,
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    path = write_profile(tiny_profile, tmp_path / "p.json")
    before = path.read_bytes()

    def boom(*args: Any, **kwargs: Any) -> None:
        fp = args[1]
        fp.write('{"schema": "ftmodel.profile", "half-writ')  # a partial write, then a crash
        raise OSError("disk full")

    monkeypatch.setattr(profile_mod.json, "dump", boom)
    with pytest.raises(OSError, match="disk full"):
        write_profile(profile_factory(name="other"), path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert read_profile(path) == tiny_profile
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]  # temp file cleaned up
