# The two commands of the README. Each installs what it needs on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install demo test bench clean

$(BIN)/tidings: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(BIN)/tidings

install: $(BIN)/tidings

demo: install
	$(BIN)/tidings demo

test: install
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python -m pytest tests

bench: install
	$(BIN)/python -m bench

clean:
	-[ -x $(BIN)/tidings ] && $(BIN)/tidings broker stop
	rm -rf $(VENV) .tidings
