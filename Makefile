# Two entry points for a new user: `make demo` and `make test`. Each creates .venv if missing.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned in the same pip command as everything else (so nothing upgrades it), after a
# first command that takes it from PyTorch's CPU index: PyPI's Linux wheel of torch is the CUDA
# build (several GB of nvidia wheels), and the pin is satisfied by the 2.13.0+cpu installed first.
# Where that index cannot be reached (a machine with PyPI alone) the first command fails in a few
# seconds and the pinned one takes what pip finds. On a CUDA machine: make install TORCH_INDEX=
# (PyPI's build).
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_PIN := torch==2.13.0
TORCH_FIRST = $(if $(TORCH_INDEX),$(BIN)/pip install --quiet --retries 1 --timeout 15 \
	$(TORCH_PIN) --index-url $(TORCH_INDEX) 2>/dev/null || echo "note: $(TORCH_INDEX) not \
	reachable; torch from the other indexes",true)

.PHONY: demo test typecheck test-slow test-gpu bench results teacher-curves scaling reference lint \
	install install-dev \
	clean

# editable_mode=strict: the install is a tree of links to the package's files on sys.path, a
# regular package that a folder named gemkd in the current directory (beside a clone) cannot
# shadow as a namespace package. A new file needs a reinstall, so the install also depends on
# the package's file list (from the repository root, gemkd/__init__.py finds new files itself).
PKG_FILES := $(VENV)/gemkd-files.txt
# the folders pyproject's package-dir maps to gemkd.<folder>
PKG_DIRS := transfer teachers students adapters experiments

$(PKG_FILES): FORCE
	@mkdir -p $(VENV)
	@find gemkd $(PKG_DIRS) \( -name '*.py' -o -name '*.yaml' \) \
		-not -path '*/__pycache__/*' | LC_ALL=C sort > $@.new
	@if cmp -s $@.new $@; then rm $@.new; else mv $@.new $@; fi

FORCE:

# `make install` (what `make demo` needs): gemkd and its runtime dependencies alone.
# `make install-dev` (what `make test` needs) adds the dev extras: pytest, ruff, mypy, and the
# trackers, Ray and moto that the tests exercise.
$(BIN)/gemkd: pyproject.toml $(PKG_FILES)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(TORCH_FIRST)
	$(BIN)/pip install --quiet $(TORCH_PIN) -e . --config-settings editable_mode=strict
	touch $(BIN)/gemkd

DEV_STAMP := $(VENV)/dev-extras.stamp
$(DEV_STAMP): $(BIN)/gemkd
	$(BIN)/pip install --quiet $(TORCH_PIN) -e '.[dev]' --config-settings editable_mode=strict
	touch $@

install: $(BIN)/gemkd

install-dev: $(DEV_STAMP)

# --threads 1: the setting README's and docs/results/RESULTS.md's tables were made at (results depend on
# torch's thread count: docs/guides/experiments.md "Reproducing a table")
demo: install
	$(BIN)/gemkd run --out runs/quickstart --threads 1

# mypy checks the package as installed, gemkd.transfer being transfer/ (a mapping mypy cannot
# read from pyproject): build/mypy/gemkd links to gemkd/__init__.py and to each folder, and is
# [tool.mypy]'s mypy_path. Folder links: a new file is checked without a rebuild. Its incremental
# cache is .mypy_cache.
MYPY_TREE := build/mypy/gemkd

$(MYPY_TREE)/__init__.py:
	mkdir -p $(MYPY_TREE)
	ln -sfn ../../../gemkd/__init__.py $(MYPY_TREE)/__init__.py
	for d in $(PKG_DIRS); do ln -sfn ../../../$$d $(MYPY_TREE)/$$d; done

typecheck: install-dev $(MYPY_TREE)/__init__.py
	$(BIN)/mypy

test: install-dev $(MYPY_TREE)/__init__.py
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

test-slow: install-dev
	$(BIN)/python -m pytest -q -m slow

test-gpu: install-dev
	$(BIN)/python -m pytest -q -m gpu

# Every benchmark writes benchmarks/results/<name>.json; the last step renders docs/results/PERFORMANCE.md.
# Smoke run: make bench BENCH_ARGS="--quick --threads 1". GPU machine: make bench BENCH_DEVICE=cuda.
BENCH_ARGS ?=
BENCH_DEVICE ?= cpu
RESULTS := benchmarks/results
bench: install
	rm -f $(RESULTS)/*.json
	$(BIN)/python -m benchmarks.bench_data --json $(RESULTS)/data.json $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_import_thin --json $(RESULTS)/import_thin.json $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_loader --json $(RESULTS)/loader.json $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_jagged --json $(RESULTS)/jagged.json --device $(BENCH_DEVICE) $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_store --json $(RESULTS)/store.json $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_teacher --json $(RESULTS)/teacher.json --device $(BENCH_DEVICE) $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_step_ops --json $(RESULTS)/step_ops.json --device $(BENCH_DEVICE) $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_teacher_stream --json $(RESULTS)/teacher_stream.json $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_transfer --json $(RESULTS)/transfer.json --device $(BENCH_DEVICE) $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_serving --json $(RESULTS)/serving.json --device $(BENCH_DEVICE) $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_artifact --json $(RESULTS)/artifact.json $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_packs --json $(RESULTS)/packs.json $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_scale --json $(RESULTS)/scale.json $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.bench_student_phase --run runs/quickstart --json $(RESULTS)/student_phase.json
	$(BIN)/python -m benchmarks.bench_sweep --run runs/benchmark --json $(RESULTS)/sweep.json
	$(BIN)/python -m benchmarks.render_performance --results $(RESULTS) --out docs/results/PERFORMANCE.md \
		--gpu-results $(RESULTS)/gpu \
		--command "make bench BENCH_ARGS='$(BENCH_ARGS)' BENCH_DEVICE=$(BENCH_DEVICE)"

# docs/results/RESULTS.md (and RESULTS_knobs.md): the synthetic benchmark (eight worlds; its teachers two at a time on
# the two workers, then every world's students), MovieLens and KuaiRand (both read datasets/),
# side by side. Finished steps are cached: a rerun only reports. Wall times: docs/results/README.md.
results: install
	$(BIN)/gemkd run experiments/benchmark.yaml --out runs/benchmark --threads 1 --workers 2
	$(BIN)/gemkd run experiments/movielens.yaml --out runs/movielens --threads 1 --workers 2
	$(BIN)/gemkd run experiments/kuairand.yaml --out runs/kuairand --threads 1 --workers 2
	$(BIN)/gemkd report --markdown docs/results/RESULTS.md runs/benchmark runs/movielens runs/kuairand

# docs/results/TEACHER.md's curves, from the benchmark's streaming teachers (run `make results` first):
# scaling and headroom against the days seen (GEM and an MLP streamed over the same days), then
# KD's and full's gain against the teacher's days of data at equal age (world 0, lag 0).
TEACHER_DAYS := 5 10 20
teacher-curves: install
	$(BIN)/python -m studies.teacher_scaling --run runs/benchmark --every 3 \
		--json $(RESULTS)/teacher_scaling.json --markdown $(RESULTS)/teacher_scaling.md \
		--plots $(RESULTS)
	for d in $(TEACHER_DAYS); do $(BIN)/gemkd run experiments/benchmark.yaml \
		--set 'data.seeds=[0]' --set teacher_lag_days=0 --set teacher_stream_start=$$((22 - d)) \
		--set 'variants=[baseline,kd,full]' --out runs/teacher_days_$$d || exit 1; done
	$(BIN)/python -m studies.teacher_days_grid --world 0 \
		--runs $(foreach d,$(TEACHER_DAYS),runs/teacher_days_$(d)) runs/benchmark \
		--markdown $(RESULTS)/teacher_days_grid.md --plot $(RESULTS)/teacher_days_grid.png

# docs/results/SCALING.md and its plots: how transfer changes as the teacher knows more (the
# student's data fixed, the teacher's days of every domain grown 1, 4, 16: 1.3x, 5.3x, 21.4x its
# rows on average; one `gemkd run` per point under runs/scaling/, then the report's intervals,
# the curves and the rank agreement of the methods between the smallest and the largest point).
# Cached: a rerun only reports. 15-55 min on 2 cores from nothing (by the machine's load), ~3 min
# a point with its steps cached; a bigger study on a GPU machine: studies/scaling_gpu.sh.
SCALING_CONFIG ?= studies/scaling.yaml
SCALING_ARGS ?=
scaling: install
	$(BIN)/python -m studies.scaling_study --config $(SCALING_CONFIG) --threads 1 --workers 2 \
		--command "make scaling$(if $(filter studies/scaling.yaml,$(SCALING_CONFIG)),, \
		SCALING_CONFIG=$(SCALING_CONFIG))$(if $(SCALING_ARGS), SCALING_ARGS='$(SCALING_ARGS)')" \
		$(SCALING_ARGS)

# docs/reference/{cli,spec,teacher}.md, generated from the parser and the config dataclasses
# (tests/experiments/cli/test_reference.py fails while the committed pages differ)
reference: install
	$(BIN)/python -m gemkd.experiments.cli.reference

lint: install-dev
	$(BIN)/ruff check .

clean:
	rm -rf runs .pytest_cache .mypy_cache
