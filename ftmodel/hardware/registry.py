"""Finding profiles: built-in GPU profiles, the user's calibrated ones, paths and objects.

``load_profile(x)`` accepts a HardwareProfile, a path to a profile JSON, or a name. Names are
case-insensitive and resolved in order: the user's calibrated profiles in
``$FTMODEL_HOME/profiles`` (default ``~/.cache/ftmodel/profiles``), then the built-in profiles
shipped in ``ftmodel/hardware/builtin`` with their aliases. ``"cpu"`` and ``"local"`` name this
machine's calibrated CPU profile (``local-cpu``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ftmodel.errors import ProfileError, UnknownNameError
from ftmodel.hardware.profile import HardwareProfile, read_profile

__all__ = ["load_profile", "default_profile_path", "profile_home", "list_profiles",
           "ProfileEntry"]

BUILTIN_DIR = Path(__file__).parent / "builtin"
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


def list_profiles() -> list[ProfileEntry]:
    return _user_entries() + list(_builtin_entries())


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
        return _read(path)
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
    wanted = _norm(key)
    for entry in _builtin_entries():
        if wanted in {_norm(entry.name), _norm(entry.device), *(_norm(a) for a in entry.aliases)}:
            return _read(entry.path)
    if key == "local-cpu":
        raise ProfileError(
            f"no calibrated profile for this machine at {user}; run "
            "`ftmodel calibrate --device cpu` first (about 3 minutes), or pass a profile path")
    names = [e.name for e in list_profiles()] + [a for e in _builtin_entries() for a in e.aliases]
    raise UnknownNameError("profile", profile, names + list(LOCAL_ALIASES),
                           "Calibrate this machine with `ftmodel calibrate`, or pass a JSON path.")
