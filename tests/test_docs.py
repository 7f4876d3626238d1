"""The documentation runs: every ```python block of README.md and docs/*.md is executed.

Blocks of one file share a namespace and run in order, as a reader would type them; a block whose
first line is ``# not run`` is skipped (GPU-only or very slow examples). Blocks run from the
repository root (examples may name committed profiles under benchmarks/results/) with an empty
user profile folder, so that no calibrated profile of the machine running the tests is used.

Also checked: relative links in those files and in the READMEs of benchmarks/results/ point at
files that exist, docs/index.md lists every page, and the README stays a short guide.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ftmodel.errors import MissingExtraError

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RESULT_READMES = sorted((ROOT / "benchmarks" / "results").glob("**/README.md"))
LINKED = DOCS + RESULT_READMES
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)\)")
SKIP_MARK = "# not run"


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """(line number, code) of each ```python block of ``path``, in order."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        if m.group(1) == "python":
            out.append((text.count("\n", 0, m.start()) + 1, m.group(2)))
    return out


def test_blocks_are_found() -> None:
    assert python_blocks(ROOT / "README.md"), "README.md has no ```python example"
    assert (ROOT / "docs" / "index.md").is_file()


@pytest.mark.parametrize("path", DOCS, ids=[p.relative_to(ROOT).as_posix() for p in DOCS])
def test_python_examples_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                             ) -> None:
    blocks = python_blocks(path)
    if not blocks:
        pytest.skip(f"{path.name} has no python examples")
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("FTMODEL_HOME", str(tmp_path / "ftmodel-home"))
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem}"}
    for line, code in blocks:
        if code.lstrip().startswith(SKIP_MARK):
            continue
        where = f"{path.relative_to(ROOT)}:{line}"
        try:
            exec(compile(code, where, "exec"), namespace)  # noqa: S102 - our own docs
        except MissingExtraError as err:
            pytest.skip(f"{where} needs an optional extra: {err}")


@pytest.mark.parametrize("path", LINKED, ids=[p.relative_to(ROOT).as_posix() for p in LINKED])
def test_relative_links_resolve(path: Path) -> None:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))  # links, not code
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        file = target.split("#", 1)[0]
        if not (path.parent / file).exists():
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)} links to missing files: {broken}"


def test_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    missing = [p.name for p in DOCS[1:] if p.name != "index.md" and f"({p.name})" not in index]
    assert not missing, f"docs/index.md does not link to {missing}"


def test_readme_is_a_short_guide() -> None:
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n < 150, f"README.md has {n} lines; move details to docs/"
