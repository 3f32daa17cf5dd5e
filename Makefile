# The README's two commands: `make run` (the main job on the default pipeline) and `make test`.
# Both create .venv when it is missing and install every package with constraints.txt.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PACKAGES := packages/moe-core packages/router packages/rl-algos packages/sandbox packages/serving packages/evals
PLUGINS := $(wildcard plugins/*/pyproject.toml)
STAMP := $(VENV)/.codemoe-installed
PIPELINE ?= quickstart
PYTEST_ARGS ?=

SGLANG_VENV ?= .venv-sglang
SGLANG_STAMP := $(SGLANG_VENV)/.codemoe-sglang-installed
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.codemoe-vllm-installed

.PHONY: install run test lint clean engines engines-vllm

$(STAMP): pyproject.toml constraints.txt $(foreach p,$(PACKAGES),$(p)/pyproject.toml) $(PLUGINS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt $(foreach p,$(PACKAGES),-e $(p)[test]) \
		$(foreach p,$(PLUGINS),-e $(dir $(p))) --group dev
	touch $@

install: $(STAMP)

run: $(STAMP)
	$(BIN)/codemoe run $(PIPELINE)

test: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

# A real SGLang server's virtualenv (its own torch), for the `sglang` test suite and benchmarks:
# about 5-9 minutes and 6 GB from the package registry. Tests find it at .venv-sglang.
$(SGLANG_STAMP): engines/sglang/install.sh engines/sglang/requirements.txt
	engines/sglang/install.sh $(SGLANG_VENV)

engines: $(SGLANG_STAMP)

# A real vLLM server's virtualenv (its CPU build, its own torch), for benchmarks and evals: about
# 2-5 minutes and 3.4 GB. `make test` does not need it; benchmarks find it at .venv-vllm.
$(VLLM_STAMP): engines/vllm/install.sh
	engines/vllm/install.sh $(VLLM_VENV)

engines-vllm: $(VLLM_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) $(SGLANG_VENV) .tox .pytest_cache runs
