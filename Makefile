# agentloop: `make help` lists the targets.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV := $(BIN)/uv
# uv itself, pinned: the lock is read by the uv that wrote it (pyproject's required-version).
UV_VERSION := 0.13.9
# uv installs into .venv from uv.lock: the versions every test ran against, so a fresh
# clone tests what CI tested (`make lock` refreshes it; `make test-latest` tries the newest).
# --inexact: each target adds its set and keeps the others (and uv itself, which the lock
# does not name). Several times faster than pip, so `make demo` takes seconds.
# --compile-bytecode: compiled once at install, not by every interpreter that imports a
# package (where PYTHONDONTWRITEBYTECODE is set, each one compiled DBOS and the SDKs again:
# seconds for each test worker's collection and each process a test starts).
SYNC := $(UV) sync --quiet --locked --inexact --compile-bytecode --python $(BIN)/python --no-default-groups
# One stamp per install set, so that `make test` after `make demo` only adds the test tools.
RUN := $(VENV)/.installed-run
TEST := $(VENV)/.installed-test
LINT := $(VENV)/.installed-lint
DOCS := $(VENV)/.installed-docs
BENCH := $(VENV)/.installed-bench

.DEFAULT_GOAL := help

# The virtualenv and uv in it. Without pip when python3 has its own (pip --python
# fills the venv from outside); bootstrapping pip into a venv costs 8 s here.
$(UV):
	@echo "creating $(VENV) with uv in it"
	@if $(PYTHON) -m pip --version >/dev/null 2>&1; then \
		$(PYTHON) -m venv --without-pip $(VENV) && \
		$(PYTHON) -m pip --python $(BIN)/python install --quiet --disable-pip-version-check uv==$(UV_VERSION); \
	else \
		$(PYTHON) -m venv $(VENV) && \
		$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION); \
	fi

# What the demo runs: agentloop and the svg extra (the report draws its diagram). The
# Makefile too: a virtualenv made by an older install command is made again.
$(RUN): pyproject.toml uv.lock Makefile | $(UV)
	$(SYNC) --extra svg
	touch $@

# The test tools: pytest, Hypothesis, the provider SDKs, Playwright.
$(TEST): pyproject.toml uv.lock $(RUN)
	$(SYNC) --extra svg --group test
	touch $@

# The lint tools (mypy --strict checks the tests too, so it needs the test tools).
$(LINT): pyproject.toml uv.lock $(TEST)
	$(SYNC) --extra svg --group test --group lint
	touch $@

# The docs tools: MkDocs, its Material theme, mkdocstrings (the API reference).
$(DOCS): pyproject.toml uv.lock $(RUN)
	$(SYNC) --extra svg --group docs
	touch $@

# The bench's peers: pydantic-ai (its DBOSAgent beside agentloop.dbos), the OpenAI Agents SDK
# and LangGraph (one long run beside agentloop's).
$(BENCH): pyproject.toml uv.lock $(TEST)
	$(SYNC) --extra svg --group test --group bench
	touch $@

.PHONY: help
help: ## Show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

.PHONY: install
install: $(LINT) ## Create .venv and install agentloop with its test and lint tools

# The live page's server (examples/live): Starlette and uvicorn, the live extra.
$(VENV)/.installed-live: pyproject.toml uv.lock $(RUN)
	$(SYNC) --extra svg --extra live
	touch $@

.PHONY: live
live: $(VENV)/.installed-live ## Serve examples/live on http://127.0.0.1:8000: a run streamed to a page (OPENAI_API_KEY or ANTHROPIC_API_KEY: a real model)
	$(BIN)/python examples/live/app.py

.PHONY: demo
demo: $(RUN) ## Run the built-in scenario; save its run, trace diagram and report in demo-output/
	$(BIN)/agentloop demo --out demo-output

# Two tiers (tests/conftest.py): `test` covers every behaviour at small counts, in
# under two minutes; `test-all` adds the long tier (tests marked slow: the report in
# Chromium, DBOS on Postgres; the kill loops' 500 runs; Hypothesis's full counts).
.PHONY: test
test: $(TEST) ## Run the fast tier: every behaviour, small counts (under two minutes)
	AGENTLOOP_TESTS=fast $(BIN)/python -m pytest --numprocesses=auto --maxprocesses=4

.PHONY: test-all
test-all: $(TEST) ## Run every test: adds Chromium, Postgres, 500 kills a driver, Hypothesis in full
	AGENTLOOP_TESTS=all $(BIN)/python -m pytest

# The lock's third-party versions against the newest releases, in a virtualenv of its own:
# a break upstream shows here (and in `.ci/latest`), not on a fresh clone's `make test`.
LATEST := .venv-latest
.PHONY: test-latest
test-latest: $(UV) ## Run the fast tier against the newest release of every dependency, not uv.lock's
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(LATEST)
	$(UV) pip install --quiet --python $(LATEST)/bin/python --upgrade --only-binary pygraphviz \
		-e ".[svg]" --group test
	AGENTLOOP_TESTS=fast $(LATEST)/bin/python -m pytest --numprocesses=auto --maxprocesses=4

.PHONY: lock
lock: $(UV) ## Refresh uv.lock to the newest releases pyproject.toml allows (then make test, and commit it)
	$(UV) lock --upgrade

.PHONY: check
# pyright checks tests/typing ([tool.pyright]) with the Node.js its nodejs extra brings;
# PYRIGHT_PYTHON_IGNORE_WARNINGS: it asks no index for a newer version of itself.
check: $(LINT) ## ruff check, ruff format --check, mypy --strict, pyright (tests/typing) and lint-imports (the layers)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	PYRIGHT_PYTHON_IGNORE_WARNINGS=1 $(BIN)/pyright
	$(BIN)/lint-imports

.PHONY: docs
docs: $(DOCS) ## Build the docs site into site/ (mkdocs build --strict: a broken link fails)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

.PHONY: format
format: $(LINT) ## Apply ruff's fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

.PHONY: diagrams
diagrams: $(RUN) ## Regenerate diagrams/ from the state table
	$(BIN)/agentloop diagram --format mermaid > diagrams/agentloop.mmd
	$(BIN)/agentloop diagram --format dot > diagrams/agentloop.dot

.PHONY: bench
bench: $(BENCH) ## Benchmarks: engine vs hand-written loop, async driver, batches, copier, memory, tool registry, run files, provider adapters, streaming, the ledger, MCP calls, typed output and the loop guard, DBOS beside pydantic-ai (given a Postgres URL), context windows, one long run beside pydantic-ai, the Agents SDK and LangGraph, many runs at once
	@status=0; for bench in core tools async batches runfile providers streaming ledger mcp output dbos context longrun concurrency; do \
		echo "== bench/bench_$$bench.py"; $(BIN)/python bench/bench_$$bench.py || status=1; \
	done; exit $$status

.PHONY: clean
clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) $(LATEST) .pytest_cache .mypy_cache .ruff_cache .hypothesis site
