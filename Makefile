# `make demo` and `make test` work on a fresh Debian machine: they build the venv and install what is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: demo test test-full test-gpu compose-test lint venv system clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,rocm,nvrtc]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

venv: $(STAMP)

system:
	./scripts/ensure-system.sh

demo: venv
	$(VENV)/bin/tunebase demo

test: venv system
	$(PY) -m pytest -q --durations=30

test-full: venv system compose-test
	$(PY) -m pytest -q -m 'not gpu and not compose' -p no:cacheprovider

# Builds the images and runs a sweep through docker-compose.yml (tests/deploy/test_compose_up.py). Without a
# registry (the default here) the images build on a local debootstrap base; COMPOSE_BASE=registry for the public ones.
COMPOSE_BASE ?= local
compose-test: venv system
	./scripts/container-engine.sh
	if [ "$(COMPOSE_BASE)" = local ]; then ./scripts/local-base-image.sh; fi
	TUNEBASE_COMPOSE_BASE=$(COMPOSE_BASE) $(PY) -m pytest -q -s -m compose tests/deploy -p no:cacheprovider

test-gpu: venv
	$(PY) -m pytest -q -m gpu

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy service workers kernels migrations tests $(wildcard bench)

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache
