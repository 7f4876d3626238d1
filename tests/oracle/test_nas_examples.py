"""The distributed NAS examples: a worker that dies mid-trial loses no finished trial and its
trial is run again. One file, so that the two searches (each using every core) never run at
once under pytest-xdist's per-file distribution."""

from __future__ import annotations

import csv
import re
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _example() -> object:
    spec = importlib.util.spec_from_file_location("nas_distributed",
                                                  ROOT / "examples" / "nas_distributed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["nas_distributed"] = module  # spawned workers import it by name
    spec.loader.exec_module(module)
    return module


def test_optuna_storage_search_loses_no_finished_trial(tmp_path: Path) -> None:
    pytest.importorskip("optuna")
    example: Any = _example()
    out = tmp_path / "nas"
    rc = example.main(["--device", "a100", "--workers", "2", "--trials", "40",
                       "--resolution", "64", "--kill-after", "4", "--grace-s", "3",
                       "--out", str(out)])
    assert rc == 0
    rows = list(csv.DictReader(open(out.with_suffix(".csv"))))
    assert len(rows) >= 40 and all(float(r["latency_ms"]) > 0 for r in rows)
    assert any(r["pareto"] == "1" for r in rows)
    summary = out.with_suffix(".md").read_text()
    assert "Workers that died: 1 of 2." in summary
    # its trial failed and was run again (a busy machine may let a live worker's heartbeat
    # lapse too: at least one of each)
    found = re.search(r"(\d+) failed, (\d+) re-run", summary)
    assert found is not None
    failed, rerun = map(int, found.groups())
    assert failed >= 1 and rerun >= 1


def test_ray_search_reruns_the_trial_of_a_dead_worker(tmp_path: Path) -> None:
    pytest.importorskip("ray.tune")
    pytest.importorskip("optuna")
    spec = importlib.util.spec_from_file_location("nas_ray", ROOT / "examples" / "nas_ray.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    sys.modules["nas_ray"] = example  # Ray's workers import the trainable by name
    spec.loader.exec_module(example)
    out = tmp_path / "ray"
    rc = example.main(["--device", "a100", "--trials", "12", "--resolution", "64",
                       "--kill-trial", "3", "--out", str(out)])
    assert rc == 0
    rows = list(csv.DictReader(open(out.with_suffix(".csv"))))
    assert sorted(int(r["trial"]) for r in rows) == list(range(12))
    assert "killed on its first attempt" in out.with_suffix(".md").read_text()
