"""examples/nas_distributed.py: workers share one Optuna study; a worker that dies mid-trial
loses no finished trial and its trial is run again by another."""

from __future__ import annotations

import csv
import re
import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("optuna")
ROOT = Path(__file__).resolve().parents[2]


def _example() -> object:
    spec = importlib.util.spec_from_file_location("nas_distributed",
                                                  ROOT / "examples" / "nas_distributed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["nas_distributed"] = module  # spawned workers import it by name
    spec.loader.exec_module(module)
    return module


def test_a_dead_worker_loses_no_finished_trial(tmp_path: Path) -> None:
    example = _example()
    out = tmp_path / "nas"
    rc = example.main(["--device", "a100", "--workers", "2", "--trials", "24",  # type: ignore[attr-defined]
                       "--resolution", "64", "--kill-after", "4", "--grace-s", "3",
                       "--out", str(out)])
    assert rc == 0
    rows = list(csv.DictReader(open(out.with_suffix(".csv"))))
    assert len(rows) >= 24 and all(float(r["latency_ms"]) > 0 for r in rows)
    assert any(r["pareto"] == "1" for r in rows)
    summary = out.with_suffix(".md").read_text()
    assert "Workers that died: 1 of 2." in summary
    # its trial failed and was run again (a busy machine may let a live worker's heartbeat
    # lapse too: at least one of each)
    failed, rerun = map(int, re.search(r"(\d+) failed, (\d+) re-run", summary).groups())  # type: ignore[union-attr]
    assert failed >= 1 and rerun >= 1
