# Two entry points: `make demo` and `make test`. Each sets up .venv from the lock files itself.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint typecheck docs check clean screenshots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.runtime: requirements.lock pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --require-hashes -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $@

$(VENV)/.dev: requirements-dev.lock $(VENV)/.runtime
	$(BIN)/pip install -q --require-hashes -r requirements-dev.lock
	touch $@

## demo: offline run of the seeds' suites against recorded replies (exit 1-3 is the demo's point)
demo: $(VENV)/.runtime
	@$(BIN)/parallax run --config config/demo.toml; code=$$?; \
	  if [ $$code -gt 3 ]; then exit $$code; fi; \
	  echo "demo finished: exit $$code (0 clean, 1 review, 2 incomplete, 3 both)"

## screenshots: the demo's reports and history pages as PNGs in docs/screenshots/ (needs chromium)
screenshots: $(VENV)/.dev
	rm -f docs/screenshots/*.png
	PARALLAX_ARTIFACTS=docs/screenshots $(BIN)/python tests/screenshots.py

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint --failure-threshold warning Dockerfile

typecheck: $(VENV)/.dev
	$(BIN)/mypy

## docs: the docs site into site/, its reference generated from the code; any warning fails it
docs: $(VENV)/.dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

## test: lint, type check, the docs site, then the whole test suite
test: lint typecheck docs
	$(BIN)/pytest

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
