"""ftmodel.hardware.registry.load_profile: objects, paths, user-cache names and clear errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ftmodel.errors import ProfileError, UnknownNameError
from ftmodel.hardware.profile import HardwareProfile, write_profile
from ftmodel.hardware.registry import (
    default_profile_path,
    list_profiles,
    load_profile,
    profile_home,
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh, empty FTMODEL_HOME for one test (the session one stays untouched)."""
    monkeypatch.setenv("FTMODEL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_session_home_is_isolated() -> None:
    # conftest points FTMODEL_HOME at a temp dir: no test reads ~/.cache/ftmodel
    assert os.environ.get("FTMODEL_HOME")
    assert profile_home() == Path(os.environ["FTMODEL_HOME"]) / "profiles"
    assert profile_home() != Path.home() / ".cache" / "ftmodel" / "profiles"


def test_profile_home_follows_env(home: Path) -> None:
    assert profile_home() == home / "profiles"
    assert default_profile_path("x") == home / "profiles" / "x.json"


def test_accepts_object(tiny_profile: HardwareProfile) -> None:
    assert load_profile(tiny_profile) is tiny_profile


def test_accepts_str_path(tiny_profile: HardwareProfile, tiny_profile_path: Path) -> None:
    assert load_profile(str(tiny_profile_path)) == tiny_profile


def test_accepts_pathlib(tiny_profile: HardwareProfile, tiny_profile_path: Path) -> None:
    assert load_profile(tiny_profile_path) == tiny_profile


def test_path_without_json_suffix(tiny_profile: HardwareProfile, tmp_path: Path) -> None:
    path = write_profile(tiny_profile, tmp_path / "profile.txt")
    assert load_profile(path) == tiny_profile  # a Path is always a path


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="does not exist") as err:
        load_profile(str(tmp_path / "nope.json"))
    assert "nope.json" in str(err.value)


def test_user_cache_name(profile_factory: Any, home: Path) -> None:
    prof = profile_factory(name="my-box")
    write_profile(prof, home / "profiles" / "my-box.json")
    assert load_profile("my-box") == prof
    assert [e.name for e in list_profiles() if e.source == "user"] == ["my-box"]


def test_cpu_alias_finds_local_cpu(profile_factory: Any, home: Path) -> None:
    prof = profile_factory(name="local-cpu")
    write_profile(prof, default_profile_path("local-cpu"))
    assert load_profile("cpu") == prof
    assert load_profile("local") == prof
    assert load_profile("CPU") == prof


def test_user_cache_name_case_insensitive(profile_factory: Any, home: Path) -> None:
    prof = profile_factory(name="local-cpu")
    write_profile(prof, default_profile_path("local-cpu"))
    assert load_profile("LOCAL-CPU") == prof


def test_reloads_after_rewrite(profile_factory: Any, home: Path) -> None:
    path = default_profile_path("box")
    write_profile(profile_factory(name="box", dtypes=("fp32",)), path)
    assert load_profile("box").device.dtypes == ("fp32",)
    st = path.stat()
    write_profile(profile_factory(name="box", dtypes=("fp32", "fp16")), path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))  # mtime visibly changes
    assert load_profile("box").device.dtypes == ("fp32", "fp16")


def test_unknown_name_lists_and_suggests(profile_factory: Any, home: Path) -> None:
    write_profile(profile_factory(name="local-cpu"), default_profile_path("local-cpu"))
    with pytest.raises(UnknownNameError) as err:
        load_profile("local-cpuu")
    msg = str(err.value)
    assert "'local-cpuu'" in msg
    assert "local-cpu" in err.value.valid
    assert "local-cpu" in msg  # the list of valid names is in the message
    assert "Did you mean 'local-cpu'?" in msg
    assert isinstance(err.value, ValueError)


def test_corrupt_user_profile_skipped_in_listing(profile_factory: Any, home: Path) -> None:
    (home / "profiles").mkdir(parents=True)
    (home / "profiles" / "broken.json").write_text("{", encoding="utf-8")
    write_profile(profile_factory(name="ok"), default_profile_path("ok"))
    assert [e.name for e in list_profiles() if e.source == "user"] == ["ok"]


def test_cpu_without_calibration(home: Path) -> None:
    with pytest.raises(ProfileError, match="ftmodel calibrate") as err:
        load_profile("cpu")
    assert not isinstance(err.value, UnknownNameError)
    assert "--device cpu" in str(err.value)


def test_bad_type() -> None:
    with pytest.raises(TypeError, match="int"):
        load_profile(3)  # type: ignore[arg-type]
