"""Finding profiles: built-in GPU profiles, the user's calibrated ones, paths and objects.

``load_profile(x)`` accepts a HardwareProfile, a path to a profile JSON, or a name. Names are
case-insensitive and resolved in order: the user's calibrated profiles in
``$FTMODEL_HOME/profiles`` (default ``~/.cache/ftmodel/profiles``), then the built-in profiles
shipped in ``ftmodel/hardware/builtin`` with their aliases. ``"cpu"`` and ``"local"`` name this
machine's calibrated CPU profile (``local-cpu``).

Built-in GPU profiles are spec-derived (``benchmarks/build_gpu_profiles.py``): their device half
comes from ``benchmarks/data/gpu_specs.csv`` plus efficiency parameters fitted on the Framework Tax
measurements, and their host half is a *default*, the dispatch costs of the paper's Xeon hosts
(``paper-host``), not the user's CPU. Host-only profiles (``ftmodel/hardware/builtin/hosts``,
or user files with schema ``ftmodel.host``) are found by :func:`load_host_profile`; passing one
where a device is expected, or a spec-derived GPU profile where a host is expected, is an error
that says which argument it belongs to.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from ftmodel.errors import ProfileError, UnknownNameError
from ftmodel.hardware.profile import (
    HardwareProfile,
    HostOnlyProfile,
    HostProfile,
    read_any_profile,
    read_profile,
)

__all__ = ["load_profile", "load_host_profile", "default_profile_path", "profile_home",
           "list_profiles", "ProfileEntry", "DEFAULT_HOST", "is_default_host",
           "default_host_warning"]

BUILTIN_DIR = Path(__file__).parent / "builtin"
BUILTIN_HOST_DIR = BUILTIN_DIR / "hosts"
DEFAULT_HOST = "paper-host"
LOCAL_ALIASES = {"cpu": "local-cpu", "local": "local-cpu", "this": "local-cpu"}


def profile_home() -> Path:
    root = os.environ.get("FTMODEL_HOME")
    base = Path(root) if root else Path.home() / ".cache" / "ftmodel"
    return base / "profiles"


def default_profile_path(name: str) -> Path:
    return profile_home() / f"{name}.json"


@dataclass(frozen=True)
class ProfileEntry:
    name: str
    path: Path
    kind: str
    device: str
    aliases: tuple[str, ...]
    source: str  # "builtin" | "user"


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


@lru_cache(maxsize=1)
def _builtin_entries() -> tuple[ProfileEntry, ...]:
    out = []
    for p in sorted(BUILTIN_DIR.glob("*.json")):
        prof = read_profile(p)
        out.append(ProfileEntry(prof.name, p, prof.kind, prof.device.name, prof.aliases, "builtin"))
    return tuple(out)


def _user_entries() -> list[ProfileEntry]:
    home = profile_home()
    out = []
    for p in sorted(home.glob("*.json")) if home.is_dir() else []:
        try:
            prof = read_profile(p)
        except ProfileError:
            continue
        out.append(ProfileEntry(p.stem, p, prof.kind, prof.device.name, prof.aliases, "user"))
    return out


@lru_cache(maxsize=1)
def _builtin_host_entries() -> tuple[ProfileEntry, ...]:
    out = []
    for p in sorted(BUILTIN_HOST_DIR.glob("*.json")):
        prof = read_any_profile(p)
        if isinstance(prof, HostOnlyProfile):
            out.append(ProfileEntry(prof.name, p, prof.kind, f"host: {prof.host.cpu}",
                                    prof.aliases, "builtin"))
    return tuple(out)


def list_profiles() -> list[ProfileEntry]:
    return _user_entries() + list(_builtin_entries()) + list(_builtin_host_entries())


def is_default_host(host: HostProfile) -> bool:
    """True for the built-in default host halves (``paper-host`` and its per-machine variants)."""
    return host.name == DEFAULT_HOST or host.name.startswith(DEFAULT_HOST + "-")


def default_host_warning(host: HostProfile, device_name: str) -> str:
    return (f"host costs are the built-in default {host.name!r} ({host.cpu}), fitted on the "
            f"Framework Tax paper's measurements, not measured on your CPU; {device_name!r} is a "
            "spec-derived GPU profile. For your own host run `ftmodel calibrate` and pass "
            "host=<that profile>.")


def _host_entry(key: str) -> ProfileEntry | None:
    wanted = _norm(key)
    for entry in _builtin_host_entries():
        if wanted in {_norm(entry.name), *(_norm(a) for a in entry.aliases)}:
            return entry
    return None


def _not_a_device(name: str) -> ProfileError:
    return ProfileError(
        f"{name!r} is a host-only profile (per-framework dispatch costs of a CPU, no device "
        f"half), so it cannot be the device: pass it as host={name!r} and a GPU name (see "
        "`ftmodel profiles`) or a calibrated profile as device=")


@lru_cache(maxsize=64)
def _read_cached(path: str, mtime: float) -> HardwareProfile:
    return read_profile(path)


def _read(path: Path) -> HardwareProfile:
    return _read_cached(str(path), path.stat().st_mtime)


def load_profile(profile: str | os.PathLike[str] | HardwareProfile) -> HardwareProfile:
    """A HardwareProfile from a profile object, a JSON path or a (case-insensitive) name."""
    if isinstance(profile, HardwareProfile):
        return profile
    if isinstance(profile, os.PathLike) or (isinstance(profile, str) and (
            profile.endswith(".json") or os.sep in profile)):
        path = Path(profile)
        if not path.is_file():
            raise ProfileError(f"profile file {str(path)!r} does not exist; pass a built-in name "
                               "(see `ftmodel profiles`) or a path written by `ftmodel calibrate`")
        found = _read_any(path)
        if isinstance(found, HostOnlyProfile):
            raise _not_a_device(str(path))
        return found
    if isinstance(profile, (HostOnlyProfile, HostProfile)):
        raise _not_a_device(profile.name)
    if not isinstance(profile, str):
        raise TypeError(f"gpu/profile must be a name, a path or a HardwareProfile, "
                        f"got {type(profile).__name__}")
    key = LOCAL_ALIASES.get(profile.strip().lower(), profile.strip())
    user = default_profile_path(key)
    if user.is_file():
        return _read(user)
    home = profile_home()
    for p in sorted(home.glob("*.json")) if home.is_dir() else []:
        if p.stem.lower() == key.lower():
            return _read(p)
    entry = _device_entry(key)
    if entry is not None:
        return _read(entry.path)
    if _host_entry(key) is not None:
        raise _not_a_device(profile)
    if key == "local-cpu":
        raise ProfileError(
            f"no calibrated profile for this machine at {user}; run "
            "`ftmodel calibrate --device cpu` first (about 3 minutes), or pass a profile path")
    raise UnknownNameError("profile", profile, _known_names() + list(LOCAL_ALIASES),
                           "Calibrate this machine with `ftmodel calibrate`, or pass a JSON path.")


def _known_names() -> list[str]:
    return [e.name for e in list_profiles()] + [a for e in _builtin_entries() for a in e.aliases]


def _device_entry(key: str) -> ProfileEntry | None:
    wanted = _norm(key)
    for entry in _builtin_entries():
        if wanted in {_norm(entry.name), _norm(entry.device), *(_norm(a) for a in entry.aliases)}:
            return entry
    return None


@lru_cache(maxsize=64)
def _read_any_cached(path: str, mtime: float) -> HardwareProfile | HostOnlyProfile:
    return read_any_profile(path)


def _read_any(path: Path) -> HardwareProfile | HostOnlyProfile:
    return _read_any_cached(str(path), path.stat().st_mtime)


def _own_host(prof: HardwareProfile, name: str) -> HostProfile:
    if prof.host is None:
        raise ProfileError(f"profile {name!r} has no host half (it describes a device only); "
                           "pass host= a calibrated profile or a host-only profile such as "
                           f"{DEFAULT_HOST!r}")
    if prof.kind == "spec-derived" and is_default_host(prof.host):
        raise ProfileError(
            f"{name!r} is a spec-derived GPU device profile: its host half is only the default "
            f"{prof.host.name!r}, not a host of its own, so it cannot be passed as host=. Pass it "
            f"as device={name!r}; for host= pass a calibrated profile (`ftmodel calibrate`) or "
            f"{DEFAULT_HOST!r}")
    if prof.kind == "calibrated" and not prof.host.drives:
        # calibrated before profiles recorded it: the host drove the profile's own device
        return replace(prof.host, drives=prof.device.type)
    return prof.host


def load_host_profile(host: str | os.PathLike[str] | HardwareProfile | HostOnlyProfile
                      | HostProfile) -> HostProfile:
    """The host half named by ``host``: a host-only profile (name, path or object), or the
    measured host half of a calibrated profile. Spec-derived GPU profiles are rejected: their
    host half is only the default."""
    if isinstance(host, HostProfile):
        return host
    if isinstance(host, HostOnlyProfile):
        return host.host
    if isinstance(host, HardwareProfile):
        return _own_host(host, host.name)
    if isinstance(host, os.PathLike) or (isinstance(host, str) and (
            host.endswith(".json") or os.sep in host)):
        path = Path(host)
        if not path.is_file():
            raise ProfileError(f"host profile file {str(path)!r} does not exist")
        found = _read_any(path)
        return found.host if isinstance(found, HostOnlyProfile) else _own_host(found, str(path))
    if not isinstance(host, str):
        raise TypeError(f"host must be a name, a path or a profile, got {type(host).__name__}")
    key = LOCAL_ALIASES.get(host.strip().lower(), host.strip())
    home = profile_home()
    for p in sorted(home.glob("*.json")) if home.is_dir() else []:
        if p.stem.lower() == key.lower():
            found = _read_any(p)
            return found.host if isinstance(found, HostOnlyProfile) else _own_host(found, p.stem)
    entry = _host_entry(key)
    if entry is not None:
        found = _read_any(entry.path)
        if isinstance(found, HostOnlyProfile):
            return found.host
    return _own_host(load_profile(key), host)
