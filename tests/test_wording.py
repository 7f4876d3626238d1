"""The product speaks only of itself: no words about how its development was organised.

README, docs, CHANGELOG, code, tests, benchmarks and committed results describe machines, dates
and commands. This test fails on wording about who ran what when on which borrowed machine,
ticket numbers, commit hashes in prose, or "target met"-style bookkeeping, and on a file named
after such a thing.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".md", ".sh", ".toml", ".txt", ".cfg", ".yml", ".yaml", ""}
WORDS = [
    r"\blent\b", r"\blease[ds]?\b", r"\bloan(?:ed|s)?\b", r"\bborrowed (?:gpu|machine|h100)",
    r"\b(?:this|next|previous|earlier|later|last|one|a work) session\b", r"\bsessions ago\b",
    r"\bissues? ?#?\d+\b", r"\btickets?\b", r"\bsprint\b",
    r"\btargets? (?:is |are |was |were )?(?:not )?(?:met|missed)\b", r"\bnot met\b",
    r"\bshort of the \S+ target\b", r"\bthe \S+× target\b",
    r"\bsub-?agents?\b", r"\bhelper agents?\b", r"\bclosing note\b",
    r"\bcommit(?:ted)? (?:as |in )?[0-9a-f]{7,40}\b",
]
PATTERN = re.compile("|".join(WORDS), re.IGNORECASE)
NAME_WORDS = re.compile(r"session|lease|loan|issue|ticket|sprint", re.IGNORECASE)


def _tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / p for p in out.stdout.splitlines()]


def test_no_development_history_wording() -> None:
    hits = []
    for path in _tracked_files():
        if path.suffix not in TEXT_SUFFIXES or path == Path(__file__) or not path.is_file():
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = PATTERN.search(line)
            if m:
                hits.append(f"{path.relative_to(ROOT)}:{n}: {m.group(0)!r}")
    assert not hits, "development-history wording:\n" + "\n".join(hits[:50])


def test_no_file_named_after_development_history() -> None:
    named = [str(p.relative_to(ROOT)) for p in _tracked_files()
             if NAME_WORDS.search(p.relative_to(ROOT).as_posix())]
    assert not named, named
