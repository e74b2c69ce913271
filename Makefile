# agentloop: `make help` lists the targets.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"
	$(BIN)/python -m pip install --quiet --only-binary=pygraphviz -e ".[cli,svg]" --group dev
	touch $(STAMP)

.PHONY: help
help: ## Show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

.PHONY: install
install: $(STAMP) ## Create .venv and install agentloop with its test and lint tools

.PHONY: demo
demo: $(STAMP) ## Run the built-in scenario; save its run, trace diagram and report in demo-output/
	$(BIN)/python -m agentloop demo --out demo-output

.PHONY: test
test: $(STAMP) ## Run the test suite
	$(BIN)/python -m pytest

.PHONY: check
check: $(STAMP) ## ruff and mypy --strict
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

.PHONY: format
format: $(STAMP) ## Apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

.PHONY: diagrams
diagrams: $(STAMP) ## Regenerate diagrams/ from the state table
	$(BIN)/python -m agentloop diagram --format mermaid > diagrams/agentloop.mmd
	$(BIN)/python -m agentloop diagram --format dot > diagrams/agentloop.dot

.PHONY: bench
bench: $(STAMP) ## Benchmarks: engine vs hand-written loop, copier, memory, tool registry, async driver
	$(BIN)/python bench/bench_core.py
	$(BIN)/python bench/bench_tools.py
	$(BIN)/python bench/bench_async.py

.PHONY: clean
clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
