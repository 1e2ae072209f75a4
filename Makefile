# Every target creates .venv on first use, so each works as the first command on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

DATA    ?= examples/stats.csv
MODELS  ?= models
OUT     ?= out/anomalies.csv
REPORT  ?= report
WORKERS ?=
SLOW    ?=
NAB     ?= ../shared/data/nab

PYTEST_MARK := $(if $(SLOW),,-m "not slow")
# Without WORKERS=N, predict and train run one worker per CPU (their --workers default).
WORKERS_ARG = $(if $(WORKERS),--workers $(WORKERS))

.PHONY: install predict report train test lint wheel-check bench bench-scale soak clean nab

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

predict: $(STAMP)
	$(BIN)/batchpredict predict --data $(DATA) --models $(MODELS) --out $(OUT) $(WORKERS_ARG)

# Renders the last `make predict` output (same DATA and OUT) as $(REPORT)/index.html.
report: $(STAMP)
	$(BIN)/batchpredict report --results $(OUT) --data $(DATA) --out $(REPORT)

# A command-line DATA=... still wins over this target default.
train: DATA = examples/history.csv
train: $(STAMP)
	$(BIN)/batchpredict train --data $(DATA) --models $(MODELS) $(WORKERS_ARG)

# The NAB walkthrough (docs/evaluation.md): train, predict and evaluate on NAB's data into nab/. NAB= is a clone
# of github.com/numenta/NAB (data/, labels/combined_windows.json) or a folder with realAWSCloudwatch/ beside
# combined_windows.json. Every real category found (realAWSCloudwatch, realKnownCause, realTraffic,
# realAdExchange; never realTweets) and AWS resampled to 15 min, 1 h and 1 min each get one store, trained once
# (nab/store, nab/<category>/store) and reused on a rerun. On AWS alone (2 busy cores, 2026-12-02): 29 minutes
# with nab/store already trained (7.5 more to train it), 22 of them training the 1-minute copy; a rerun, 2.
nab: $(STAMP)
	$(BIN)/python scripts/nab_walkthrough.py $(NAB) --out nab

test: $(STAMP)
	$(BIN)/pytest -q $(PYTEST_MARK) $(TESTS)

# The wheel with no extras, in a fresh venv, run from outside the repository (scripts/check_wheel.py).
wheel-check: $(STAMP)
	$(BIN)/python scripts/check_wheel.py

# The layers (import-linter contracts in pyproject.toml, docs/design.md §6), then ruff and mypy on batchpredict/.
lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/ruff check
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py

# A million IPs (N=... for fewer): read+plan, first job, coordinator RSS and CPU per job, CSV and Parquet.
bench-scale: $(STAMP)
	$(BIN)/python benchmarks/scale.py --n $(or $(N),1000000)

clean:
	rm -rf $(VENV) out report .pytest_cache

soak: $(STAMP)
	$(BIN)/python benchmarks/soak.py --n $(or $(N),2000)
