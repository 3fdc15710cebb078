# Two entry points: `make test` and `make demo`. Both create .venv/ when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup test lint demo clean

setup: $(STAMP)

# torch first and pinned: a bare `torch` requirement resolves to a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[gti,test]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check geodiag gti tests bench
	$(VENV)/bin/ruff format --check geodiag gti tests bench

demo: $(STAMP)
	@echo "make demo: not available yet (needs the gti init/SFT pipeline, issues 4-6)." >&2
	@exit 1

clean:
	rm -rf $(VENV) .pytest_cache
