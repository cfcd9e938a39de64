# Two commands do everything on a fresh machine with Python 3.11+ and make:
#   make book   - set up .venv, build the HTML book strictly into _build/html
#   make test   - set up .venv, run every test
# See README.md for the other targets.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
export PYTHONHASHSEED := 0

.PHONY: book slides test test-fast site-test serve lint release grade measure clean venv test-versions

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed, found " + sys.version' 
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip "setuptools>=77"  # the editable install below builds with it
	$(BIN)/python scripts/venv_install.py  # uv under pip's configuration (every core); pip where uv cannot
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	@# jupyter-events pulls in jsonschema[format-nongpl], whose rfc3987-syntax builds a Lark parser when jsonschema
	@# is imported: 1.1 CPU-seconds in every process that imports nbformat (each nbgrader command of a grading, each
	@# notebook run), for an "iri" format check that nothing here uses. Without it jsonschema skips that format.
	$(BIN)/python -m pip uninstall --quiet -y rfc3987-syntax
	touch $(STAMP)

CACHE := _build/.jupyter_cache

# The course package's bytecode, made where it is checked out before the book or the tests run: where
# PYTHONDONTWRITEBYTECODE is set (the CI machine sets it) no process keeps the bytecode it compiles, so every process
# that imported mlsys compiled its modules again, 0.15-0.2 CPU-s each (hundreds of processes in one test run: kernels,
# nbgrader, the grading servers). compileall skips a module whose bytecode is current, and Python recompiles one
# whose source changed since, so an edit is never run stale.
BYTECODE := $(BIN)/python -m compileall -q mlsys

# The execution cache is keyed on a chapter's code only: when mlsys or a recorded measurement
# changes, clear it so no page shows stale figures.
book: $(STAMP)
	@if [ -d _build/.doctrees ] && { [ ! -f $(CACHE)/.inputs-stamp ] || [ -n "$$(find mlsys data Makefile _config.yml requirements.txt -newer $(CACHE)/.inputs-stamp -not -path "*/__pycache__*" -print -quit)" ]; }; then \
		echo "make book: mlsys, data/ or the build settings changed since the last build; re-executing every page"; rm -rf $(CACHE) _build/.doctrees _build/jupyter_execute; fi
	$(BYTECODE)
	rm -rf _build/html
	env -u MPLBACKEND $(BIN)/jupyter-book build . -W -n --keep-going  # a non-inline backend would drop every figure
	@test -n "$$(ls _build/html/_images 2>/dev/null)" || { echo "make book: no figures in _build/html/_images" >&2; exit 1; }
	$(BIN)/python -m mlsys.book.slides _build/html  # one deck per chapter, cut from the pages just built
	@mkdir -p $(CACHE) && touch $(CACHE)/.inputs-stamp
	@test -s _build/html/index.html || { echo "make book: _build/html/index.html is missing or empty" >&2; exit 1; }
	@echo "Book built: _build/html/index.html"

# Every test once (chapters are executed by tests/test_book.py, or taken from a fresh book build's cache;
# the nbgrader pipeline runs for real; the browser test runs where a built book exists).
# Three pytest-xdist workers (on the CI machine's 2 cores as fast as two: the cores bound it; the tests of the
# fresh-clone CI of 2026-11-26 took 741 s and 1396 CPU-seconds, every process counted in a cgroup; TEST_WORKERS=N
# on a bigger machine): tests that
# share a session's expensive work (a lab's graded course, the Slurm node) stay on one
# worker (--dist loadgroup, groups set in tests/conftest.py), and the longest work units are sent first in the order
# tests/conftest.py gives (LONGEST; without --no-loadscope-reorder xdist sends the groups with the most tests first,
# whatever their length: Lab 3's three tests before Lab 4's two). The 20 slowest tests are listed at the end;
# every test's seconds are in _build/test-report.xml (JUnit XML: `time` of each testcase).
TEST_WORKERS ?= 3
test: $(STAMP)
	$(BIN)/ruff check mlsys tests
	$(BYTECODE)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=20 \
		--junitxml=_build/test-report.xml

# Every test of tests/ but the slow ones (a test that takes over ~2 s of CPU is marked @pytest.mark.slow);
# no test file executes a notebook at import (the labs' kernels are session fixtures in tests/conftest.py).
test-fast: $(STAMP)
	$(BIN)/ruff check mlsys tests
	$(BYTECODE)
	$(BIN)/python -m pytest -m "not slow" tests

# The built site in a real browser (Debian's chromium through Playwright): every page, both widths.
# Screenshots land in _build/screenshots/.
site-test: $(STAMP)
	@test -s _build/html/index.html || $(MAKE) book
	$(BIN)/python -m pytest -q -m site tests/test_site.py

# Slides for every chapter from the built book (_build/html/slides/; `make book` makes them too).
slides: $(STAMP)
	@test -s _build/html/index.html || $(MAKE) book
	$(BIN)/python -m mlsys.book.slides _build/html

lint: $(STAMP)
	$(BIN)/ruff check mlsys tests

serve: book
	$(BIN)/python -m http.server --directory _build/html 8000

clean:
	rm -rf _build .pytest_cache

# Teacher targets (labs/README section of README.md explains them).
release: $(STAMP)
	$(BIN)/python -m mlsys.grader.teach release

# The release notebooks' visible checks, with the instructor's answers, under each Triton/NumPy combination of
# mlsys/labkit/versions.py TESTED (CPU; pip fetches the versions once; 6-10 min per combination on a shared 2-core
# machine). CI runs its subset: scripts/test_versions.py --ci (.ci/run).
test-versions: $(STAMP)
	$(BIN)/python scripts/test_versions.py

# Each submission runs in a bubblewrap sandbox (teach stops with install advice if bwrap is missing).
# Extra options: make grade ARGS="lab1_roofline --timeout 1800" (or ARGS=--no-sandbox, loudly logged).
grade: $(STAMP)
	$(BIN)/python -m mlsys.grader.teach grade $(ARGS)

# Measure this machine's roofs and write data/measurements/<device-slug>/roofs.json.
measure: $(STAMP)
	$(BIN)/python -m mlsys measure
