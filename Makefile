# Two entry points that work on a fresh machine (Python 3.11+):
#   make run   install, then serve on the embedded store with the demo handbook loaded (http://127.0.0.1:8000/docs)
#   make test  install, then lint, type-check and run the test suite (what .ci/run does)
#   make test-fast  the tests that start no server, engine process, browser or database (no lint: `make lint`)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000
DATA   ?= data
export HF_HUB_OFFLINE = 1
export TRANSFORMERS_OFFLINE = 1

.PHONY: setup run test test-fast lint deploy-check llm-venv bench-quality bench-speed bench-memory eval-gate demo-embeddings screenshots clean

$(BIN)/plumbline: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# the CPU build of torch first: a package that pulls torch unpinned would fetch a multi-GB CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

setup: $(BIN)/plumbline

# the demo replays the handbook set every hour (the first run about 30 s after start-up), for the gauges; it runs
# with auth off (a local demo: the start-up log and every response's X-Plumbline-Auth header say so)
run: export PLUMBLINE_EVAL_SCHEDULE ?= {"handbook": 3600}
run: export PLUMBLINE_AUTH ?= off
# the handbook's chunk embeddings, so the first start ingests it through the real path in seconds (make demo-embeddings)
run: export PLUMBLINE_EMBEDDING_SEED ?= demo/handbook.embeddings.npz
run: setup
	$(BIN)/plumbline serve --data-dir $(DATA) --host $(HOST) --port $(PORT) --ingest demo/handbook

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# three workers (pytest-xdist) on two cores, because the tests spend part of their time waiting on fsyncs, servers,
# browsers and subprocesses and a third worker fills some of it; TEST_WORKERS=0 runs them in this process (a debugger)
TEST_WORKERS ?= 3
test: lint
	$(BIN)/pytest -q -n $(TEST_WORKERS)

# The layer to run while changing code: the markers of tests/conftest.py leave out what starts processes, and
# PLUMBLINE_TEST_FAST fails a test that starts one anyway, so that the layer stays fast (`make test` runs it all).
# Its tests wait mostly on fsync, and none of them checks what survives a crash (the process tests do), so it runs
# under eatmydata where that is installed (Debian: apt-get install eatmydata), on two workers (one a core), a file
# to a worker (fewer workers load the models).
FAST_TESTS := not slow and not process and not engine and not browser and not database
FAST_WORKERS ?= 2
NO_FSYNC := $(shell command -v eatmydata)
test-fast: setup
	PLUMBLINE_TEST_FAST=1 $(NO_FSYNC) $(BIN)/pytest -q -n $(FAST_WORKERS) --dist loadfile -m '$(FAST_TESTS)'

# The deployment files, checked without Docker or a cluster: hadolint, the Compose schema, and the Helm chart rendered,
# linted and schema-validated with both value sets (tests/deploy/test_helm.py; `make test` runs it too).
deploy-check: setup
	$(BIN)/hadolint Dockerfile
	$(BIN)/check-jsonschema --builtin-schema vendor.compose-spec deploy/docker-compose.yml
	$(BIN)/pytest -q -p no:cacheprovider tests/deploy/test_helm.py tests/deploy/test_helm_day_one.py

# The real LLM server's venv (llama-cpp-python's server and SmolLM2-135M) for tests/service/evaluation/test_real_llm.py,
# which skips without it: about 7 minutes the first time (a compile), seconds after (pip's wheel cache).
llm-venv:
	scripts/llm-venv.sh

# The regression gate CI can run against the committed baseline (exit 1 on a regression).
eval-gate: setup
	$(BIN)/plumbline eval run --data-dir $(DATA)/gate --ingest demo/handbook --set handbook --baseline handbook

# Rebuild demo/handbook.embeddings.npz after the handbook, the chunker or the model changes (a test says when).
demo-embeddings: setup
	$(BIN)/python demo/seed_embeddings.py

# The README's screenshots of the web page, taken by its end-to-end tests (tests/web) in headless Chromium
# (Debian: apt-get install chromium chromium-driver).
screenshots: setup
	PLUMBLINE_SCREENSHOTS=docs/screenshots $(BIN)/pytest -q -p no:cacheprovider tests/web

bench-quality: setup
	$(BIN)/python benchmarks/quality.py

bench-speed: setup
	$(BIN)/python benchmarks/speed.py

bench-memory: setup
	$(BIN)/python benchmarks/memory.py

clean:
	rm -rf $(VENV) $(DATA) .mypy_cache .ruff_cache .pytest_cache *.egg-info
