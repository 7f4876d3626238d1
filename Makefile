# Quick start: `make demo` and `make test` each create .venv and install what they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export OMP_NUM_THREADS ?= 2

.PHONY: demo test venv lint typecheck validate clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev,nas]"
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(PY) -m ftmodel demo

test: venv
	$(PY) -m pytest -q -n 2 --dist loadfile

lint: venv
	$(VENV)/bin/ruff check ftmodel calibration benchmarks tests

typecheck: venv
	$(VENV)/bin/mypy

validate: venv
	$(PY) benchmarks/validate.py --framework eager

clean:
	rm -rf $(VENV) build *.egg-info
