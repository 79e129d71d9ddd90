# `make demo` and `make test` work on a fresh Debian machine: they build the venv and install what is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: demo test test-full test-gpu lint venv system clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,rocm]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

system:
	./scripts/ensure-system.sh

demo: venv
	$(VENV)/bin/tunebase demo

test: venv system
	$(PY) -m pytest -q

test-full: venv system
	$(PY) -m pytest -q -m 'not gpu' -p no:cacheprovider

test-gpu: venv
	$(PY) -m pytest -q -m gpu

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy service workers kernels migrations tests $(wildcard bench)

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
