# Two entry points for a new user: `make demo` and `make test`. Each creates .venv if missing.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned in the same pip command: without it pip picks a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0

.PHONY: demo test test-slow test-gpu bench lint install clean

$(BIN)/gemkd: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_PIN) -e '.[dev]'
	touch $(BIN)/gemkd

install: $(BIN)/gemkd

demo: install
	$(BIN)/gemkd run --out runs/quickstart

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

test-slow: install
	$(BIN)/python -m pytest -q -m slow

test-gpu: install
	$(BIN)/python -m pytest -q -m gpu

bench: install
	$(BIN)/python benchmarks/bench_data.py --json benchmarks/results/data.json
	$(BIN)/python benchmarks/bench_jagged.py --json benchmarks/results/jagged.json

lint: install
	$(BIN)/ruff check .

clean:
	rm -rf runs .pytest_cache
