"""examples/nas_ray.py on a local Ray: every trial priced, a killed worker's trial run again."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray.tune")
pytest.importorskip("optuna")
ROOT = Path(__file__).resolve().parents[2]


def test_ray_search_reruns_the_trial_of_a_dead_worker(tmp_path: Path) -> None:
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
