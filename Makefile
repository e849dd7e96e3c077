# Two commands matter: `make run` (the stack, embedded Redis when REDIS_URL is unset) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist processes for `make test` (0: one process). Tests wait on workers and Redis more than they compute:
# on 2 cores, 4 processes finished the integration rooms 20% sooner than 2 (6: no better). worksteal: a process
# that runs dry takes queued tests from a busy one, so the slow tests at the end do not leave one process idle.
TEST_WORKERS ?= 4

.PHONY: run test test-buckets test-cpu test-fast lint typecheck imports check bench chaos clean help chromium screenshots lock

help:
	@echo "make run           start Redis (embedded unless REDIS_URL is set), a worker and the web app; replay examples"
	@echo "make test          set up .venv, make check, then the whole suite; prints how long it took"
	@echo "make test-fast     the unit tests only (tests/unit), one process"
	@echo "make test-buckets  the tests marked buckets, with 4 scope buckets per tenant (make test runs them too)"
	@echo "make test-cpu      the whole suite with each test's CPU counted (its own and its child processes'), then a table per file"
	@echo "make check         lint, typecheck and imports together (make test runs them first)"
	@echo "make lint          ruff check of the code, tests and benchmarks"
	@echo "make typecheck     mypy --strict"
	@echo "make imports       the import-linter contracts (imports point one way, plugins see worker.plugin only)"
	@echo "make bench         benchmarks, as ratios against baselines measured in the same run"
	@echo "make chaos         the fault battery (minutes): 10 scenarios on private Redis servers, a history table"
	@echo "make chromium      install Debian's Chromium with apt when it is missing (the browser tests drive it)"
	@echo "make screenshots   refresh docs/screenshots/ (the UI tour in docs/operations.md) from the browser tests"
	@echo "make lock          regenerate deploy/requirements.lock (the image's pinned, hashed dependencies)"
	@echo "make clean         remove .venv and the tool caches"
	@echo "make help          this list"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# The checkout goes first on PYTHONPATH: the agent-signal launcher does not put it on sys.path, and a plugin
# named in AGENT_SIGNAL_PLUGINS (examples.welcome:plugin) must be importable.
run: $(STAMP)
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(BIN)/agent-signal run

lint: $(STAMP)
	$(BIN)/ruff check worker producers policies sessions tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

# Architecture contracts (pyproject [tool.importlinter]): imports point one way, plugins see worker.plugin only.
imports: $(STAMP)
	$(BIN)/lint-imports

check: lint typecheck imports

# The browser tests drive Debian's Chromium (never a downloaded browser); install it when it is missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || { echo "installing chromium with apt"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The whole suite; the tests marked `buckets` (every store path) run twice in it, with 1 and with 4 scope buckets
# per tenant (tests/conftest.py pytest_generate_tests: ids [1-buckets] and [4-buckets]).
# It prints how long it took, passed or failed (about 9 minutes on a 2-core machine), installation included.
test:
	@start=$$(date +%s); echo "make test started at $$(date -u +%H:%M:%S) UTC"; \
	$(MAKE) --no-print-directory $(STAMP) check chromium && \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal; \
	status=$$?; end=$$(date +%s); \
	echo "make test took $$((end - start))s ($$(( (end - start) / 60 )) min $$(( (end - start) % 60 )) s), ended at $$(date -u +%H:%M:%S) UTC, exit $$status"; \
	exit $$status

# Only the store paths with a tenant's scopes spread over 4 buckets (keys in 4 slots): a missing per-scope key
# builder fails only with more than one bucket (make test runs them as the [4-buckets] variants). The marked tests
# and why: docs/decisions.md, "Scope buckets in make test".
# tests/integration/backends is left out: its Redis Cluster suites import the marked pipeline classes and set
# their own bucket counts (8 in test_redis_cluster_buckets.py), on a cluster and RabbitMQ.
test-buckets: $(STAMP)
	AGENT_SIGNAL_SCOPE_BUCKETS=4 $(BIN)/python -m pytest -n $(TEST_WORKERS) -m buckets --ignore=tests/integration/backends

# The whole suite with each test's CPU counted, its own and its child processes' (tests/support/cpu_per_test.py):
# a table per file, most CPU first, to keep make test within its budget (docs/decisions.md, "make test within ten
# minutes").
test-cpu: $(STAMP) chromium
	@rm -f .cpu-report.jsonl; CPU_REPORT=$(CURDIR)/.cpu-report.jsonl $(BIN)/python -m pytest -n $(TEST_WORKERS) \
		--dist worksteal -q -p tests.support.cpu_per_test; status=$$?; \
	$(BIN)/python -m tests.support.cpu_per_test .cpu-report.jsonl; exit $$status

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/unit

# Refresh the UI screenshots (docs/screenshots/, shown in docs/operations.md) from the browser tests; a plain test
# run never writes them.
screenshots: $(STAMP) chromium
	UPDATE_README_SCREENSHOTS=1 $(BIN)/python -m pytest tests/browser -q

bench: $(STAMP)
	$(BIN)/python -m bench

# The fault battery: minutes long, so not part of `make test`, which runs its short variants instead
# (tests/integration/pipeline/test_chaos_short.py: one child kill, one pause, one Redis restart with AOF).
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos

# The image's dependencies (deploy/Dockerfile installs only these): every [project] dependency and the build
# backend, pinned with the hashes of every file PyPI has for them, resolved for Python 3.11 (the image's).
# Run it after changing pyproject.toml's dependencies (tests/unit/deploy checks the lock still satisfies them).
# The public index only: the machine's own pip configuration (local indexes, find-links) stays out of it.
lock: $(STAMP)
	$(BIN)/python -m pip install --quiet "pip-tools>=7.4"
	env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null CUSTOM_COMPILE_COMMAND="make lock" $(BIN)/pip-compile --quiet \
	  --generate-hashes --strip-extras --allow-unsafe --build-deps-for wheel --no-emit-index-url \
	  --no-emit-find-links --output-file deploy/requirements.lock pyproject.toml

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
