# Two entry points: `make test` and `make demo`. Both create .venv/ when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup test lint demo clean deepspeed

setup: $(STAMP)

# torch first and pinned: a bare `torch` requirement resolves to a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[gti,test]'
	$(MAKE) --no-print-directory deepspeed
	touch $(STAMP)

# tests/geodiag/io/formats/test_zero.py writes real DeepSpeed ZeRO checkpoints. PyPI has only its
# sdist, whose setup.py imports torch: built against the venv's torch (an isolated build
# would pull a CUDA torch), no ops compiled (DS_BUILD_OPS=0); 19 s without pip's cache on
# 2 cores. Not an extra for the same reason (pyproject.toml).
DEEPSPEED := deepspeed==0.19.8
deepspeed:
	DS_BUILD_OPS=0 $(PY) -m pip install -q --no-build-isolation '$(DEEPSPEED)'

# The equivalence checks (-m numerics) run a second time under ATEN_CPU_CAPABILITY=default
# (torch's non-SIMD kernels): a tolerance tuned to one CPU's kernels fails here on any
# machine, not only on the CPU that differs. Costs ~25 s of CPU.
test: $(STAMP)
	$(PY) -m pytest -q
	ATEN_CPU_CAPABILITY=default $(PY) -m pytest -q -m numerics -p no:cacheprovider

lint: $(STAMP)
	$(VENV)/bin/ruff check geodiag gti tests bench tools
	$(VENV)/bin/ruff format --check geodiag gti tests bench tools

# Fetches MovieLens-100k and SmolLM2-135M once (later runs find them in the cache),
# then runs configs/demo.toml (< 15 min on 2 CPU cores); a re-run skips finished stages.
DEMO_OUT := runs/demo
demo: $(STAMP)
	$(VENV)/bin/gti data fetch movielens-100k
	$(VENV)/bin/gti experiment configs/demo.toml --out $(DEMO_OUT)
	@echo "geodiag report comparing mean, random and gti (init and SFT): $(DEMO_OUT)/report.html"

clean:
	rm -rf $(VENV) .pytest_cache
