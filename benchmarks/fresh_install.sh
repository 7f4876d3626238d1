#!/usr/bin/env bash
# A core install as a new user makes it: `pip install .` (no extras) into a fresh virtual
# environment outside the repository, then a prediction for eager on a built-in GPU, and the
# error that asking for onnxruntime without its extra gives. Prints what it finds; exit 0 when
# both behave as documented.
#
#   bash benchmarks/fresh_install.sh [VENV_DIR]      (default: a temporary folder)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${1:-$(mktemp -d)/venv}
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q "$ROOT" 2>&1 | grep -v "^WARNING: Location" || true
cd "$(dirname "$VENV")"   # away from the source tree, so the installed package is imported
"$VENV/bin/python" - <<'PY'
import importlib.util

import torch
from torch import nn

import ftmodel

model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
p = ftmodel.predict_latency(model, "eager", "a100", batch=8, inputs=torch.randn(1, 64))
print(f"eager on a100, batch 8: {p.latency_ms:.3f} ms ({p.regime})")
try:
    ftmodel.predict_latency(model, "onnxruntime", "a100", batch=8, inputs=torch.randn(1, 64))
    raise SystemExit("onnxruntime predicted without its extra installed")
except ftmodel.MissingExtraError as err:
    print(f"onnxruntime without its extra: {err}")
assert importlib.util.find_spec("calibration") is None, "a top-level 'calibration' is installed"
print("installed packages: ftmodel (ftmodel.calibration inside it), no top-level calibration")
PY
