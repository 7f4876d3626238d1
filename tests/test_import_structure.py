"""The package's layering, read from the source with ``ast`` (no module is imported).

* The lowering (``ftmodel.frameworks``, ``ftmodel.tracing``) and the estimate
  (``ftmodel.estimate``) meet only in ``ftmodel.program``: neither imports the other.
* Inside ``ftmodel/`` only the command line imports the calibration suite (``ftmodel.calibration``,
  installed from ``calibration/``); the suite itself may import any of ftmodel.
* No module imports another's private name (``from x import _y``): what a module shares is
  public.

Imports inside functions count as much as those at the top of a module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ftmodel"
CALIBRATION = ROOT / "calibration"
PROJECT_TOP = frozenset({"ftmodel", "calibration", "tests", "benchmarks"})


def _sources(*folders: Path) -> list[Path]:
    return sorted(p for folder in folders for p in folder.rglob("*.py"))


def _module_name(path: Path) -> str:
    """``ftmodel/frameworks/base.py`` -> ``ftmodel.frameworks.base``; ``calibration/suite.py``
    -> ``ftmodel.calibration.suite`` (its installed name)."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] == "calibration":
        parts.insert(0, "ftmodel")
    return ".".join(parts)


def _imports(path: Path) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """(line, imported module, names taken from it) of every import in ``path``; relative
    imports resolved against the module's package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names = tuple(a.name for a in node.names)
            yield node.lineno, module, names
            # ``from ftmodel import estimate`` imports the submodule ftmodel.estimate
            for name in names:
                yield node.lineno, f"{module}.{name}", ()


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _offences(paths: list[Path], forbidden: str) -> list[str]:
    return [f"{p.relative_to(ROOT)}:{line} imports {module}"
            for p in paths for line, module, _ in _imports(p) if _within(module, forbidden)]


@pytest.mark.parametrize("folder", ["frameworks", "tracing"])
def test_lowering_does_not_import_the_estimate(folder: str) -> None:
    assert _offences(_sources(PACKAGE / folder), "ftmodel.estimate") == []


def test_estimate_does_not_import_the_frameworks() -> None:
    assert _offences(_sources(PACKAGE / "estimate"), "ftmodel.frameworks") == []


def test_only_the_command_line_imports_the_calibration_suite() -> None:
    paths = [p for p in _sources(PACKAGE) if p != PACKAGE / "cli.py"]
    offences = _offences(paths, "ftmodel.calibration") + _offences(paths, "calibration")
    assert offences == []


def _project_module(module: str, local: frozenset[str]) -> bool:
    top = module.split(".")[0]
    return top in PROJECT_TOP or top in local


def test_no_private_name_is_imported_from_another_module() -> None:
    # scripts under benchmarks/ import their neighbours by bare name (``from gpu_common import``)
    local = frozenset(p.stem for p in (ROOT / "benchmarks").glob("*.py"))
    offences = [
        f"{p.relative_to(ROOT)}:{line} imports {name} from {module}"
        for p in _sources(PACKAGE, CALIBRATION, ROOT / "tests", ROOT / "benchmarks")
        for line, module, names in _imports(p) if _project_module(module, local)
        for name in names if name.startswith("_") and not name.startswith("__")]
    assert offences == []


def test_the_checks_see_imports() -> None:
    """The walk finds imports in every form: top level, inside functions, relative."""
    found = {(m, n) for _, m, n in _imports(PACKAGE / "frameworks" / "torchscript.py")}
    assert ("ftmodel.frameworks.base", ("Framework", "register")) in found
    lazy = {m for _, m, _ in _imports(PACKAGE / "frameworks" / "torchscript.py")}
    assert "ftmodel.errors" in lazy  # imported inside lower()
    assert _module_name(CALIBRATION / "suite.py") == "ftmodel.calibration.suite"
