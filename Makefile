# ICLR 2025, Reproduced -- the two commands a reader needs are `make book` and `make test`.
# Both create .venv (Python 3.11) on first use and install the pinned requirements into it.

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
BUILD  := _build
JOBS   ?= 2
# pip prints one warning per package for this machine's local index folders; keep the log readable.
PIPFILTER := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }

SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: help book site book-student assignments test check structure structure-locked notebooks reseed bench worlds worlds-check clean venv check-python

help:
	@echo "make book   build the website into $(BUILD)/html, executing every chapter"
	@echo "make test   unit tests, every chapter notebook under nbval, the website built from that run, the site check"
	@echo "make check  the quick loop: unit tests without the slow ones (CHAPTER=06: and that chapter's notebooks)"
	@echo "make notebooks  refresh the Colab .ipynb copies of the chapter notebooks"
	@echo "make assignments  nbgrader student releases of every chapter's exercises"
	@echo "make book-student  the website with solutions hidden"
	@echo "make reseed CHAPTER=01 SEEDS=\"11 12 13\"  re-run a chapter's reproduce notebook under other seeds"
	@echo "                 (TIMEOUT=3600: seconds a cell may run, default 1800)"
	@echo "make bench  every chapter's notebooks timed one at a time (CHAPTER=07: one chapter), against the budget"
	@echo "make worlds-check  re-train every shipped tiny-VLM world and compare it with its checkpoint"
	@echo "make worlds  re-train the shipped tiny-VLM worlds of chapters 16-17 (companion_lib/tinyvlm/checkpoints)"
	@echo "make colab-check  run the Colab copies in a fresh environment (wheel + declared dependencies only; long)"
	@echo "make course COURSE=path  write or refresh a teacher's nbgrader course in path (outside $(BUILD))"
	@echo "make release  build the wheel and sdist into dist/ and check them with twine"
	@echo "make clean  remove $(BUILD) (keeps .venv)"

check-python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { \
	  echo "error: Python 3.11 is required but '$(PYTHON)' was not found on PATH."; \
	  echo "       Install Python 3.11, or point make at it: make PYTHON=/path/to/python3.11 ..."; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' || { \
	  echo "error: '$(PYTHON)' is Python $$($(PYTHON) -c 'import platform; print(platform.python_version())'), but the book needs Python 3.11."; \
	  echo "       Point make at a Python 3.11 interpreter: make PYTHON=/path/to/python3.11 ..."; exit 1; }

$(STAMP): requirements.txt pyproject.toml
	@$(MAKE) --no-print-directory check-python
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing the pinned requirements into $(VENV) (a few minutes on first use)"
	$(PY) -m pip install --quiet --no-compile -r requirements.txt $(PIPFILTER)
	@# bytecode for the installed packages on every core (pip compiles on one; about 25 s saved on two). Like pip,
	@# it ignores the files that do not compile under 3.11 (torch ships one written for 3.12).
	@$(PY) -m compileall -qq -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e . $(PIPFILTER)
	@touch $(STAMP)

venv: $(STAMP)

# The website. The execution cache is keyed on the companion library's source as well as on the
# notebooks' code cells, so a library change re-executes every chapter instead of serving stale output.
book: $(STAMP)
	@$(PY) -m bookkit invalidate-cache --cache $(BUILD)/.jupyter_cache --doctrees $(BUILD)/.doctrees
	@$(MAKE) --no-print-directory site

# Everything CI checks, executing every notebook once:
# 1. unit tests and every chapter notebook under nbval, in place from its .md source, on $(JOBS) workers,
#    each in a fresh kernel of this environment (its working folder is the notebook's, hence absolute
#    paths), with an empty disk cache; each executed notebook is kept with its outputs; a chapter's notebooks
#    run on one worker one after another, and the chapters and test modules start longest first by the
#    seconds in bookkit/schedule.json (`python -m bookkit schedule` refreshes it from a run's report);
# 2. those notebooks fill the book's execution cache (keyed as myst-nb keys them), and the website is
#    built from it with warnings as errors (every page, reference, citation and glued number resolves):
#    nothing is executed twice, and check-served fails if the build had to execute;
# 3. the site check reads the built HTML as a reader would (tests/test_site.py, the Colab and download
#    links of every notebook page included).
# (`make structure`, the build that executes nothing, is the quick check of references while writing; the
# website build of step 2 checks everything it checks, so make test does not run it too.)
test: $(STAMP)
	@rm -rf $(BUILD)/test-cache $(BUILD)/test-claims $(BUILD)/test-executed
	BOOK_CACHE_DIR=$(CURDIR)/$(BUILD)/test-cache BOOK_CLAIMS_DIR=$(CURDIR)/$(BUILD)/test-claims \
	  $(PY) -m pytest -n $(JOBS) --dist loadscope --no-loadscope-reorder --schedule=bookkit/schedule.json \
	  --nbval-lax --nbval-current-env --nbval-cell-timeout=900 --runtime-report=$(BUILD)/runtime.json \
	  -p bookkit.pytest_executed --store-executed=$(BUILD)/test-executed tests chapters
	$(PY) -m bookkit cache-executed --executed $(BUILD)/test-executed --cache $(BUILD)/.jupyter_cache
	@$(MAKE) --no-print-directory site SITEFLAGS=--all
	$(PY) -m bookkit check-served --cache $(BUILD)/.jupyter_cache
	BOOK_REQUIRE_SITE=1 BOOK_SITE_CLAIMS=$(CURDIR)/$(BUILD)/test-claims $(PY) -m pytest -p no:cacheprovider -q tests/test_site.py

# The quick loop while editing: the unit tests not marked slow (no shipped-world re-training, wheel, course or
# book builds), in a minute or two; CHAPTER=06 also runs that chapter's notebooks under nbval.
check: $(STAMP)
	$(PY) -m pytest -n $(JOBS) -m "not slow" tests
	@if [ -n "$(CHAPTER)" ]; then \
	  BOOK_CACHE_DIR=$(CURDIR)/$(BUILD)/check-cache $(PY) -m pytest -n $(JOBS) --dist loadscope --nbval-lax \
	    --nbval-current-env --nbval-cell-timeout=900 chapters/$(CHAPTER)*/; fi

# The website from the execution cache as it stands (`make book` without emptying it first). A notebook
# that errors stops the build with the page's path and the failing cell's source and traceback.
site: $(STAMP)
	$(VENV)/bin/jupyter-book build . --path-output . --warningiserror --keep-going $(SITEFLAGS)
	@echo "website: $(BUILD)/html/index.html"

# A structure-only build of the book: every page, cross-reference and citation must resolve,
# warnings are errors, nothing is executed.
structure: $(STAMP)
	@mkdir -p $(BUILD)
	@flock $(BUILD)/.structure.lock $(MAKE) --no-print-directory structure-locked

# (serialised with flock: the generated conf.py must sit in the book root while Sphinx runs;
# conf.py does not put local_extensions (bookkit) on the path, so PYTHONPATH does; glued numbers exist only
# in executed notebooks, so their warnings are not errors here: the executed build checks them)
structure-locked:
	@rm -rf $(BUILD)/structure conf.py
	@$(VENV)/bin/jupyter-book config sphinx . >/dev/null
	PYTHONPATH=. $(VENV)/bin/sphinx-build -b html -W --keep-going -q -D nb_execution_mode=off \
	  -D suppress_warnings=mystnb.glue,mystnb.glue_ref . $(BUILD)/structure; \
	  status=$$?; rm -f conf.py; exit $$status
	@echo "structure build: OK"

# The Colab copies: one .ipynb (no outputs) beside every chapter notebook, plus the one setup cell
# (repository URL from _config.yml, version from pyproject.toml) at the top of every notebook.
notebooks: $(STAMP)
	$(PY) -m bookkit sync-notebooks

# Course assignments: nbgrader releases every chapter's exercises (solutions replaced by stubs,
# hidden tests removed) under $(BUILD)/assignments/release/<chapter>/.
assignments: $(STAMP)
	$(PY) -m bookkit assignments --out $(BUILD)/assignments
	@echo "student notebooks: $(BUILD)/assignments/release/"

# The student edition of the website: solutions hidden, exercises not executed, other chapters
# served from the main build's execution cache when `make book` ran before.
book-student: $(STAMP)
	@$(PY) -m bookkit invalidate-cache --cache $(BUILD)/.jupyter_cache --doctrees $(BUILD)/.doctrees
	$(PY) -m bookkit student-source --out $(BUILD)/student-src --cache $(BUILD)/.jupyter_cache
	$(VENV)/bin/jupyter-book build $(BUILD)/student-src --path-output $(BUILD)/student --warningiserror --keep-going
	@echo "student edition: $(BUILD)/student/_build/html/index.html"

# Re-run a chapter's reproduce notebook(s) under other seeds (papermill, through the `parameters`
# cell) and print its claims table: make reseed CHAPTER=01 SEEDS="11 12 13"
reseed: $(STAMP)
	@test -n "$(CHAPTER)" -a -n "$(SEEDS)" || { echo 'usage: make reseed CHAPTER=01 SEEDS="11 12 13"'; exit 2; }
	$(PY) -m bookkit reseed --chapter "$(CHAPTER)" --seeds "$(SEEDS)" $(if $(TIMEOUT),--timeout "$(TIMEOUT)")

# A benchmark, not a test: the chapters' notebooks under nbval one at a time (-n 0, so one chapter never
# slows another), each chapter's wall and CPU seconds and peak memory printed against the budget
# (150 s, 3 GiB); CHAPTER=07 times one chapter. make test writes the same report for its parallel run.
bench: $(STAMP)
	@rm -rf $(BUILD)/bench-cache
	BOOK_CACHE_DIR=$(CURDIR)/$(BUILD)/bench-cache BOOK_CLAIMS_DIR=$(CURDIR)/$(BUILD)/bench-claims \
	  $(PY) -m pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env --nbval-cell-timeout=1800 \
	  --runtime-report=$(BUILD)/bench.json $(if $(CHAPTER),chapters/$(CHAPTER)*/,chapters)
	$(PY) -m bookkit bench $(BUILD)/bench.json

# Every shipped world re-trained and compared with its checkpoint (make test re-trains one and checks the
# recipe of all five): about a minute per world.
worlds-check: $(STAMP)
	$(PY) -m companion_lib.tinyvlm.checkpoint check

# The tiny-VLM worlds that chapters 16 and 17 load for their default seeds, re-trained from scratch and
# written to companion_lib/tinyvlm/checkpoints/ (byte-for-byte reproducible on the same machine and versions;
# tests/test_tinyvlm_checkpoint.py checks every recipe and re-trains one in make test). About a minute per world.
worlds: $(STAMP)
	$(PY) -m companion_lib.tinyvlm.checkpoint regenerate

# The Colab copies as a Colab reader runs them: the wheel and its declared dependencies (every chapter extra)
# in a fresh virtual environment under $(BUILD)/colab-env, without the book's toolchain (no jupyter-book,
# myst-nb, papermill, nbval); every derive, implement and exercises copy, the reproduce copies listed in
# bookkit/colabcheck.py at reduced parameters (FULL=1: every reproduce copy at book scale; all 76 copies took
# 18 min on two AVX512 cores, the fresh environment's install included). Not part of `make test` (it downloads the
# declared dependencies once, and runs each copy alone, without the disk cache the notebooks of a chapter
# share). Report: $(BUILD)/colab-check/report.md.
colab-check: $(STAMP)
	$(PY) -m bookkit colab-check --jobs $(JOBS) $(if $(FULL),--full) $(NOTEBOOKS)

# A teacher's nbgrader course, in a folder no build target deletes: make course COURSE=~/teaching/iclr25
course: $(STAMP)
	@test -n "$(COURSE)" || { echo 'usage: make course COURSE=path/to/course (outside $(BUILD))'; exit 2; }
	$(PY) -m bookkit course --out "$(COURSE)"

# The companion library's distributions (wheel and sdist) in dist/, built by the environment's setuptools (no build
# isolation: nothing downloaded) and checked with twine (metadata, README rendering).
release: $(STAMP)
	@rm -rf dist
	$(PY) -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist . $(PIPFILTER)
	$(PY) -c 'from setuptools import build_meta; print("sdist:", build_meta.build_sdist("dist"))'
	$(PY) -m twine check --strict dist/*

clean:
	rm -rf $(BUILD) conf.py
