# Linear Attention, from Kernels to GPUs: set-up, build and checks.
#   make book    build the HTML book into _build/html (creates .venv, installs everything)
#   make test    run every check CI runs
# See README.md for the other targets.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
HTML   := _build/html
NB     ?= $(sort $(wildcard chapters/*.ipynb))
PORT   ?= 8000
LINTED := linattn_core tests scripts _ext figures $(wildcard chapters/*.ipynb)

.PHONY: help book serve test check lint unit unit-fast book+kernels kernels gpu-compile gpu-check gpu-check-dry nbval nbval-portable \
        nbval+browser \
        build-clean browser notebooks \
        macros lab assets venv chromium constraints clean gpu kernels-report peers

help:
	@sed -n '2,4p' Makefile | sed 's/^# //'; echo "Targets: book serve test check lint unit unit-fast gpu-compile gpu-check gpu-check-dry nbval nbval-portable browser notebooks macros lab gpu kernels-report peers assets clean"

# --- set-up -------------------------------------------------------------------------------
# The environment is installed without byte-compiling every module (--no-compile: about 100 s of
# a clean clone's set-up), and Python writes each module's byte code when it first imports it,
# where PYTHONDONTWRITEBYTECODE would stop it (then every process, each notebook's kernel among
# them, compiled torch anew: a clean clone's unit step took 376 s, not 300).
unexport PYTHONDONTWRITEBYTECODE
venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt constraints.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -r requirements.txt -c constraints.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

# MathJax 3, require.js and the ipywidgets HTML manager, served by the book itself (offline).
assets: _assets/vendor/.installed
_assets/vendor/.installed: package.json scripts/vendor_assets.py | venv
	npm install --no-audit --no-fund --loglevel=error
	$(PY) scripts/vendor_assets.py
	@touch $@

chromium:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "installing Debian's chromium for the browser check"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
	  echo "The browser check needs Debian's Chromium: run 'sudo apt-get install chromium' (never 'playwright install')."; \
	  exit 1; \
	fi

# Re-resolve the full pinned set after editing requirements.txt.
constraints:
	rm -rf /tmp/linattn-constraints && $(PYTHON) -m venv /tmp/linattn-constraints
	/tmp/linattn-constraints/bin/pip install --quiet -r requirements.txt
	{ sed -n '1,2p' constraints.txt; /tmp/linattn-constraints/bin/pip freeze | sed 's/+cpu$$//'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

# --- the book -----------------------------------------------------------------------------
book: venv assets
	rm -rf _build
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going
	@echo
	@echo "The book is in $(HTML)/index.html. Open it with:"
	@echo "    make serve      (then browse http://127.0.0.1:$(PORT)/)"
	@echo "or open file://$(CURDIR)/$(HTML)/index.html in a browser."

serve:
	@test -f $(HTML)/index.html || { echo "no book in $(HTML): run 'make book' first"; exit 1; }
	$(PY) scripts/serve.py --port $(PORT) --directory $(HTML)

# Execute chapter notebooks in place (outputs and widget state are stored and committed).
notebooks: venv
	$(PY) scripts/execute_notebooks.py $(NB)

# The math macros of _config.yml (their one home) into the first cell of every chapter (NB=...
# for some), as the front matter that jupyterlab-myst reads; the book leaves that cell out.
# `python scripts/sync_macros.py --check` changes nothing and fails if one differs.
macros: venv
	$(PY) scripts/sync_macros.py $(NB)

# As root (containers, cloud GPU machines) Jupyter refuses to start without --allow-root.
lab: venv
	$(BIN)/jupyter lab --notebook-dir=chapters $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# On a machine with an NVIDIA GPU: the GPU tests, then the measurements committed under figures/
# (the kernel comparison and a bfloat16 complexity run, named after the device), which the
# scaling chapter reads.
gpu: venv
	@$(PY) -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else \
	  'make gpu needs a CUDA device, and torch.cuda.is_available() is False here')"
	$(BIN)/pytest -m gpu tests
	device=$$($(PY) -c "import re, torch; \
	  print(re.sub('[^a-z0-9]+', '_', torch.cuda.get_device_name().lower()).strip('_'))"); \
	$(PY) -m linattn_core.bench gpu --json figures/bench_gpu_$$device.json && \
	$(PY) -m linattn_core.bench complexity --device cuda --dtype bfloat16 --causal --d 64 \
	  --min-n 256 --max-n 262144 --json figures/bench_gpu_$${device}_complexity.json && \
	$(PY) -m linattn_core.bench plot figures/bench_gpu_$${device}_complexity.json \
	  --out figures/bench_gpu_$${device}_complexity.png

# On a CUDA machine with torch and triton (and fla-core, optionally), from a copy of the
# repository: no virtual environment, no internet (README, "Measuring on a GPU"). It compiles
# every kernel in parallel, checks both operations against float64 in each dtype, times ours,
# FLA's and SDPA's (N = 1k…64k, forward and forward+backward) and writes OUT/gpu_check.json;
# ARGS=--notebooks also executes the scaling chapter on the GPU. About 4 minutes on an H200.
OUT ?= gpu-check
gpu-check:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m linattn_core.bench.gpu_check \
	    --out $(OUT) $(ARGS)

# The same code on the CPU, through the Triton interpreter, at toy sizes (part of `make test`).
gpu-check-dry: venv
	out=$$(mktemp -d) && $(PY) -m linattn_core.bench.gpu_check --dry --out $$out && rm -rf $$out

# The compile reports: every kernel of ours for sm_80, sm_89 and sm_90 (the record `make test`
# checks, which fails until it is re-made after a change to a kernel, a tile, a register budget or
# Triton), and flash-linear-attention's chunked kernels, installed without dependencies into .fla
# (a peer to compare with, never a dependency of the package). Compiled results are cached by what
# decides each binary in ~/.cache/linattn_core/compile, whatever the clone's path: only what
# changed compiles (the whole matrix cold: 9,408 records, 5,760 binaries, about 85 minutes on 2
# cores, 2026-11-29).
FLA := .fla/.installed
kernels-report: venv $(FLA)
	$(PY) -m linattn_core.kernels.compile --arch 80 89 90 --json figures/kernels_compiled.json
	PYTHONPATH=.fla $(PY) -m linattn_core.kernels.compile --peer fla \
	    --json figures/kernels_compiled_fla.json
$(FLA): | venv
	$(BIN)/pip install --quiet --no-deps --target .fla fla-core==0.6.0 einops==0.8.2
	@touch $@

# The CPU comparison with the peer libraries that the scaling chapter shows
# (figures/peers_cpu.json, about 40 minutes on 2 cores). The peers live in an environment of their
# own, .peers/, never as dependencies of the package: pytorch-fast-transformers built for the CPU
# (about 12 minutes; nvcc kept off PATH so that it compiles no CUDA code), fla-core and
# performer-pytorch without their dependencies.
PEERS := .peers/.installed
peers: $(PEERS)
	.peers/bin/python -m linattn_core.bench peers --json figures/peers_cpu.json
$(PEERS): constraints.txt
	@test -x .peers/bin/python || $(PYTHON) -m venv .peers
	.peers/bin/pip install --quiet torch==2.13.0 numpy tqdm setuptools wheel -c constraints.txt
	PATH=$(CURDIR)/.peers/bin:/usr/bin:/bin MAX_JOBS=2 .peers/bin/pip install --quiet \
	    --no-build-isolation pytorch-fast-transformers==0.4.0
	.peers/bin/pip install --quiet --no-deps fla-core==0.6.0 einops==0.8.2 performer-pytorch==1.1.4 \
	    local-attention==1.9.0 axial-positional-embedding==0.3.12
	.peers/bin/pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

# --- checks -------------------------------------------------------------------------------
# Every check CI runs, one step after another, each step's time printed (README, "Two commands").
# The book's build runs in one process, so the kernel checks run beside it, on the other core.
TEST_STEPS := lint unit book+kernels nbval+browser
test: venv assets chromium
	@for step in $(TEST_STEPS); do \
	  start=$$(date +%s); \
	  $(MAKE) --no-print-directory $$step || { echo "make test: step '$$step' failed"; exit 1; }; \
	  echo "make test: $$step passed in $$(( $$(date +%s) - start )) s"; \
	done

book+kernels: venv assets
	$(MAKE) --no-print-directory -j2 --output-sync=target book kernels

# The kernels' checks without a GPU: the compile check, then the GPU check's dry run.
kernels: venv
	$(MAKE) --no-print-directory gpu-compile gpu-check-dry

# The quick tier, before every commit: lint and the package's fast unit tests (under 2 minutes).
check: venv
	@start=$$(date +%s); $(MAKE) --no-print-directory lint unit-fast && \
	  echo "make check: passed in $$(( $$(date +%s) - start )) s"

lint: venv
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

# The package's tests and the book's own (not the browser's), two processes that share the tests
# out as they go (a long test file does not keep one process busy while the other waits), each
# with one thread: torch's two threads in each of two processes on two cores took 100 and 106 s
# on a sixth of the tests where one thread each took 90 and 88 s (2026-11-29).
ONE_THREAD := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
unit: venv
	$(ONE_THREAD) $(BIN)/pytest -q -n 2 --dist worksteal -m "not book" --doctest-modules \
	    linattn_core tests

# The inner loop while editing the package: the package's tests but the slow ones, without the
# book's (tests/book/: chapters, notation, extensions, browser).
unit-fast: venv
	$(ONE_THREAD) $(BIN)/pytest -q -n 2 -m "not book and not slow" --doctest-modules \
	    --ignore=tests/book linattn_core tests

# Two notebooks at a time, one per core, each kernel with one thread (with torch's two threads
# each, the four threads on two cores took 9 min 49 s where one each took 5 min 29 s): the
# processor's own vectorized kernels. nbval-portable runs the generic ones. The interactive
# figures, whose outputs nbval ignores, compute each stop of each control once rather than every
# combination (LINATTN_FRAMES, linattn_core/book/explorable.py): most of the notebooks' time.
NBVAL_JOBS ?= -n 2 --dist loadfile
NBVAL = LINATTN_FRAMES=each-stop $(BIN)/pytest --nbval --nbval-current-env \
	--nbval-sanitize-with tests/nbval_sanitize.cfg $(NBVAL_JOBS)
nbval: venv
	$(ONE_THREAD) $(NBVAL) $(NB)

# nbval again under torch's generic CPU kernels, MKL's compatible code path and one thread: a
# stored output that depends on the processor's order of summation fails here (CONTRIBUTING.md).
# From the last chapter back: beside `make nbval` (make test), the two meet no notebook at once,
# and chapter 11's compiles, cached by the first to reach them, are read by the other.
# Its interactive figures compute their opening frame alone: nbval ignores their outputs, and
# `make nbval` has run each of their stops.
nbval-portable: venv
	ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE $(ONE_THREAD) \
	    $(NBVAL:each-stop=opening) $(shell printf '%s\n' $(NB) | sort -r)

# make test's last step: the three side by side, one process each. The browser check leaves a
# core a third idle (Chromium waits on its pages), and beside the notebooks it takes that share;
# one after the other, the step took 651 s on 2 cores (nbval 393 s, then the browser 245 s).
nbval+browser: venv
	$(MAKE) --no-print-directory -j3 --output-sync=target nbval nbval-portable browser NBVAL_JOBS=

# One Chromium: two in parallel took as long (452 s against 465) and made the layout-shift
# measurements of tests/book/test_pages.py fail on the page that loaded beside another.
browser: venv
	$(BIN)/pytest -m book tests/book

# The compile check of `make test`: fails when a record of the committed compile report
# (figures/kernels_compiled.json, `make kernels-report`) is missing or stale for this checkout's
# kernels, tiles and Triton, then compiles each kernel once per architecture cold (bfloat16, the
# widest tiles) and fails unless the results equal the committed records. About a minute.
gpu-compile: venv
	$(PY) -m linattn_core.kernels.compile --check figures/kernels_compiled.json

clean:
	rm -rf _build _assets node_modules package-lock.json .pytest_cache .ruff_cache .hypothesis .fla .peers
