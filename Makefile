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
LINTED := linattn_core tests scripts _ext $(wildcard chapters/*.ipynb)

.PHONY: help book serve test lint unit nbval build-clean browser notebooks lab assets venv \
        chromium constraints clean

help:
	@sed -n '2,4p' Makefile | sed 's/^# //'; echo "Targets: book serve test lint unit nbval browser notebooks lab assets clean"

# --- set-up -------------------------------------------------------------------------------
venv: $(VENV)/.installed
$(VENV)/.installed: requirements.txt constraints.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -c constraints.txt
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
	@echo "Serving $(HTML) on http://127.0.0.1:$(PORT)/ (Ctrl-C to stop)"
	$(PY) -m http.server $(PORT) --bind 127.0.0.1 --directory $(HTML)

# Execute chapter notebooks in place (outputs and widget state are stored and committed).
notebooks: venv
	$(PY) scripts/execute_notebooks.py $(NB)

lab: venv
	$(BIN)/jupyter lab --notebook-dir=chapters

# --- checks -------------------------------------------------------------------------------
test: venv assets chromium
	$(MAKE) --no-print-directory lint unit nbval book browser

lint: venv
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)

unit: venv
	$(BIN)/pytest -m "not book" --doctest-modules linattn_core tests

nbval: venv
	$(BIN)/pytest --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
	    -n 2 --dist loadfile chapters

browser: venv
	$(BIN)/pytest -m book tests/book

clean:
	rm -rf _build _assets node_modules package-lock.json .pytest_cache .ruff_cache .hypothesis
