# Two commands on a fresh machine: `make demo` and `make test`. Each bootstraps .venv itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench bench-ray bench-peers eval eval-bfcl eval-report venv clean docs-screenshot dist

# BFCL's data and checker (docs/evaluation.md), without its declared dependencies (torch,
# vendor SDKs...): grading needs none of them. The harness's tests use it too.
BFCL_EVAL := bfcl-eval==2026.3.23

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps $(BFCL_EVAL)
	@touch $(STAMP)

# The main job: the quickstart on a scripted model, then the agents on a real one (a local
# model, set up on first use, unless SUBAGENT_LLM / OPENAI_BASE_URL point elsewhere), then
# one run through the command line. A small model may fail the run: exit status 1 is shown,
# not an error of the demo; bad usage (2) is.
demo: $(STAMP)
	$(BIN)/python examples/quickstart.py
	$(BIN)/python examples/demo.py
	@echo "== the quickstart agent through the command line (docs/cli.md)"
	@status=0; $(BIN)/subagent run examples/quickstart.py:agent --max-turns 3 \
		--return-retries 1 --local-model qwen --context '{"question": "17 + 25, using the add tool"}' \
		|| status=$$?; echo "exit status: $$status (0 done, 1 failed)"; test $$status -le 1

# The end-to-end tests need a local model server and an OTLP receiver (Phoenix, in its own
# venv). Both are set up before pytest so their progress (a ~5 minute build and a 570 MB
# download, once per machine) is visible; the e2e fixtures would do it silently otherwise.
test: $(STAMP)
	$(BIN)/python -m subagent.local_model setup
	$(BIN)/python scripts/phoenix_server.py install
	$(BIN)/python -m pytest

# The suite without the end-to-end tests (tests/e2e, marked e2e): no local model server and
# no Phoenix to set up first. `make test` stays the whole suite.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not e2e"

# The wheel and the sdist, in dist/ (or DIST=...): built by hatchling, the build backend,
# which the dev extras install (no network, no isolated build environment). Until a release
# is on the index, install the wheel from here: pip install dist/subagent_runtime-*.whl
DIST ?= dist
dist: $(STAMP)
	rm -rf $(DIST)
	$(BIN)/hatchling build --directory $(DIST)

lint: $(STAMP)
	$(BIN)/ruff check subagent tests examples bench scripts eval conftest.py
	$(BIN)/ruff format --check subagent tests examples bench scripts eval conftest.py
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python bench/run.py

# A batch on Ray's local workers versus run_many in one process (starts a Ray runtime; the
# figures are in docs/performance.md). Options: make bench-ray ARGS="--runs 2000".
bench-ray: $(STAMP)
	$(BIN)/python bench/ray_scale.py $(ARGS)

# What correction budgets buy on the local models (docs/evaluation.md), on subagent.evals:
# every task in every configuration, resumable (finished runs are skipped), then the table
# and the plot. eval-report regenerates both pages' tables (make eval's and BFCL's) from
# the committed records alone, without the models.
EVAL_STAMP := $(VENV)/.installed-eval

$(EVAL_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev,eval]"
	@touch $@

eval: $(EVAL_STAMP)
	$(BIN)/python -m subagent.local_model setup
	$(BIN)/python eval/run_eval.py $(ARGS)
	$(BIN)/python eval/eval_report.py

eval-report: $(EVAL_STAMP)
	$(BIN)/python eval/eval_report.py
	$(BIN)/python eval/bfcl_report.py

# BFCL's single-turn categories (a fixed sample of 50 cases each) through a raw call,
# subagent's configurations and the peers, on the local model, on subagent.evals; resumable
# (recorded cases are skipped). Options: make eval-bfcl ARGS="--categories simple_python
# --systems raw".
eval-bfcl: $(EVAL_STAMP) $(PEERS_STAMP)
	$(BIN)/python -m subagent.local_model setup --model qwen
	$(BIN)/python eval/run_bfcl.py $(ARGS)
	$(PEERS_VENV)/bin/python eval/run_bfcl.py --systems pydantic-ai,openai-agents,openai-agents-auto $(ARGS)
	$(BIN)/python eval/bfcl_report.py

# Framework overhead side by side with pydantic-ai, instructor and the OpenAI Agents SDK, in
# their own venv (pinned in bench/peers/requirements.txt; never a dependency of the library).
# Writes bench/peers/results.md and results.json. Options: make bench-peers ARGS="--runs 20".
PEERS_VENV := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed

$(PEERS_STAMP): bench/peers/requirements.txt pyproject.toml
	@test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install --quiet -r bench/peers/requirements.txt -e .
	$(PEERS_VENV)/bin/python -m pip install --quiet --no-deps $(BFCL_EVAL)
	@touch $@

bench-peers: $(PEERS_STAMP)
	$(PEERS_VENV)/bin/python bench/peers/run.py --command "make bench-peers$(if $(ARGS), ARGS='$(ARGS)')" $(ARGS)

# Re-take docs/images/phoenix-trace.png from a real run (needs Debian's chromium).
docs-screenshot: $(STAMP)
	$(BIN)/python scripts/phoenix_server.py screenshot

clean:
	rm -rf $(VENV) $(PEERS_VENV) build dist .pytest_cache .mypy_cache .ruff_cache
