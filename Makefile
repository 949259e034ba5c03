# oomless - top-level wrapper around CMake + Ninja + ctest.
#   make            build build/oomless, build/liboomless.so, build/liboomless.a; installs nothing:
#                   when a package the build needs is missing, says which and how to install it
#   make demo       install missing packages, build, run `oomless plan` on an embedded default
#   make check      install missing packages, build, run every test but the PyTorch suites
#   make deps       install the missing packages (scripts/install-deps.sh)
#   make install PREFIX=/usr/local
#   make check-sanitize | check-valgrind | fuzz FUZZ_SECONDS=N | bench | format | clean
#   make web | web-serve | check-web   the page in build/web (WebAssembly; web/README.md)
#   make wheel | wheel-aarch64 | check-wheel   the manylinux wheels and the sdist in dist/
#                   (docs/install.md)

BUILD      ?= build
PREFIX     ?= /usr/local
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
# tests ctest runs at once in `make check`: twice the cores, as most of them wait (on the jobs
# they supervise, timeouts, a terminal) more than they compute. No two share a file or a port:
# each works in its own TMPDIR folder.
TEST_JOBS  ?= $(shell echo $$((2 * $(JOBS))))
CMAKE_ARGS ?=
ifneq ($(OOMLESS_WERROR),)
CMAKE_ARGS += -DOOMLESS_WERROR=ON
endif

.PHONY: all deps check-deps compile configure demo check install clean check-sanitize check-valgrind fuzz bench format venv check-trace check-torch check-types bench-trace bench-recovery \
        $(addprefix venv-,$(STACK_VENVS)) \
        web web-serve check-web wheel wheel-aarch64 check-wheel

# A plain `make` changes nothing on the system: it checks the packages the build needs and, when
# one is missing, lists them with the command that installs them and stops. `make demo`, `make
# check` and the other check targets install what is missing first (scripts/install-deps.sh).
# The build itself runs in a sub-make, so that it starts only once the packages are there.
all: check-deps
	@$(MAKE) --no-print-directory compile

deps:
	@scripts/install-deps.sh

check-deps:
	@scripts/install-deps.sh --check --build

compile: configure
	cmake --build $(BUILD) -j $(JOBS)

configure:
	@if [ ! -f $(BUILD)/build.ninja ]; then \
	    cmake -S . -B $(BUILD) -G Ninja -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_ARGS); \
	fi

# The embedded default: Llama-3.1-8B LoRA fine-tune on the detected GPU, or on the default
# profile (RTX 4090) when there is none. The build says one line; its output goes to
# $(BUILD)/demo-build.log, shown in full when it fails.
demo: deps
	@mkdir -p $(BUILD)
	@echo "oomless demo: building $(BUILD)/oomless (output in $(BUILD)/demo-build.log)..."
	@if ! $(MAKE) --no-print-directory compile >$(BUILD)/demo-build.log 2>&1; then \
	    cat $(BUILD)/demo-build.log >&2; \
	    echo "oomless demo: the build failed (its output is above)" >&2; exit 1; \
	fi
	$(BUILD)/oomless plan --model llama-3.1-8b --method lora --seq 2048 --target-effective-batch 32

# The suites that need build/venv (labels trace and torch: minutes of PyTorch; types: mypy) are
# left to check-trace, check-torch and check-types, which CI runs; `make check` stays under 90 s on 2 cores
# (docs/HACKING.md, "Time").
check: deps
	@$(MAKE) --no-print-directory compile
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS) -LE '^(trace|torch|types|wheel)$$'

install: all
	cmake --install $(BUILD) --prefix $(PREFIX)

# The whole suite (unit, CLI, Python, fuzz-corpus replay, fault; the pip install is
# check-wheel's) built with clang, ASan + UBSan + LeakSanitizer, one shared sanitizer runtime
# (see CMakeLists.txt). Any report fails its test.
# verify_asan_link_order=0: tests/cli/test_install.sh links a plain `cc` program against the
# installed (sanitized) library, which then loads the runtime late; the Python tests preload it.
SANITIZE_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:verify_asan_link_order=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 LSAN_OPTIONS=report_objects=1
check-sanitize: deps
	cmake -S . -B build-sanitize -G Ninja -DOOMLESS_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug \
	    -DCMAKE_C_COMPILER=clang $(CMAKE_ARGS)
	cmake --build build-sanitize -j $(JOBS)
	cd build-sanitize && $(SANITIZE_ENV) ctest --output-on-failure -j $(JOBS) -LE '^wheel$$'

# Valgrind memcheck: the C test programs (unit, fault injection, fuzz-corpus replay) through
# `ctest -T memcheck` (options in CMakeLists.txt), then the shell tests with every oomless they
# start under valgrind (tests/fault/valgrind-cli.sh). A memory error or a definite leak fails.
VALGRIND_TESTS ?= ^(unit|fuzz|fault\.c)\.
VALGRIND_CLI_TESTS ?= ^(cli|fault\.sh)\.
# test_watch_tui drives the interactive view through tmux with deadlines valgrind's slowdown misses;
# test_job_control stops oomless with SIGTSTP/SIGTTIN, whose default action (stop) valgrind does
# not carry out for the program it runs (raise(SIGTSTP) under valgrind returns at once);
# test_closed_fds starts oomless with fd 1 or 2 closed, and valgrind's own --log-file takes it
VALGRIND_CLI_EXCLUDE ?= ^(cli\.test_watch_tui|fault\.sh\.test_(job_control|closed_fds))$$
check-valgrind: deps
	@$(MAKE) --no-print-directory compile
	@command -v valgrind >/dev/null || { echo "check-valgrind: valgrind is not installed" >&2; exit 1; }
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -T memcheck -R '$(VALGRIND_TESTS)'
	VALGRIND_CLI_EXCLUDE='$(VALGRIND_CLI_EXCLUDE)' tests/fault/valgrind-cli.sh $(BUILD) '$(VALGRIND_CLI_TESTS)'

# The Python virtual environment of the tracer and the framework tests (torch, transformers, peft,
# trl, accelerate, lightning, pinned in bindings/python/requirements-test.txt). Never needed by the
# C build or by `make demo`; `make check` uses it for the trace tests when it exists.
VENV ?= $(BUILD)/venv
venv: $(VENV)/.installed
$(VENV)/.installed: bindings/python/requirements-test.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check -r bindings/python/requirements-test.txt
	touch $@

# One virtual environment per other training stack (docs/stacks.md), pinned in
# bindings/python/requirements-stack-STACK.txt: build/venv-torchtune, build/venv-torchtitan,
# build/venv-transformers4. The tracer runs each stack's own code there, and the format checks
# of `make check-torch` read torchtitan's and torchtune's configs with them
# (tests/torch/test_plan_formats.py skips each without its environment). The stamp lies beside
# the environment, not in it.
STACK_VENVS = torchtune torchtitan transformers4
.PRECIOUS: $(BUILD)/.venv-%.installed
venv-%: $(BUILD)/.venv-%.installed
	@true
$(BUILD)/.venv-%.installed: bindings/python/requirements-stack-%.txt
	@mkdir -p $(BUILD)
	test -x $(BUILD)/venv-$*/bin/python || python3 -m venv $(BUILD)/venv-$*
	$(BUILD)/venv-$*/bin/python -m pip install -q --disable-pip-version-check -r $<
	touch $@

# The trace suite: the tracker on hand-computed toy programs, real models traced, and the C
# estimator held to the tracer on a small matrix (bench/trace/compare.py --subset); each other
# stack's CI cells traced again against their committed results (bench/trace/stacks.py).
check-trace: deps venv $(addprefix venv-,$(STACK_VENVS))
	@$(MAKE) --no-print-directory compile
	cmake -S . -B $(BUILD) >/dev/null   # registers the trace tests now that the venv exists
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -L trace -j $(JOBS)

# The OOM-recovery suite (oomless.torch, oomless.hf, oomless.lightning): two gloo ranks under
# torchrun, two torchrun "nodes", and tiny HF Trainer and Lightning jobs under `oomless run`.
check-torch: deps venv
	@$(MAKE) --no-print-directory compile
	cmake -S . -B $(BUILD) >/dev/null   # registers the torch tests now that the venv exists
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -L torch -j $(JOBS)

# The Python package's types: mypy (pinned in requirements-test.txt, installed by `make venv`)
# over bindings/python with its mypy.ini, the frameworks' own types from build/venv.
check-types: deps venv
	@$(MAKE) --no-print-directory compile
	cmake -S . -B $(BUILD) >/dev/null
	cd $(BUILD) && ctest --output-on-failure -L types

# Time lost to one OOM: in-loop recovery against a relaunch (bench/recovery/README.md).
bench-recovery: all venv
	$(VENV)/bin/python bench/recovery/run.py --bin $(BUILD)/oomless

# The whole trace matrix (a benchmark: minutes), written to bench/trace/RESULTS.md; with
# STACK=torchtune|torchtitan|transformers-4 that stack's, to bench/trace/STACK/.
STACK ?=
STACK_VENV = $(subst transformers-4,transformers4,$(STACK))
ifeq ($(STACK),)
bench-trace: all venv
	$(VENV)/bin/python bench/trace/compare.py --bin $(BUILD)/oomless --jobs $(JOBS) --out bench/trace/RESULTS.md --json bench/trace/results.json
else
bench-trace: all venv-$(STACK_VENV)
	$(BUILD)/venv-$(STACK_VENV)/bin/python bench/trace/stacks.py --stack $(STACK) --bin $(BUILD)/oomless --jobs $(JOBS)
endif

FUZZ_SECONDS ?= 20
fuzz: deps
	cmake -S . -B build-fuzz -G Ninja -DOOMLESS_FUZZ=ON -DOOMLESS_TESTS=OFF \
	    -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug
	cmake --build build-fuzz -j $(JOBS)
	tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

bench: all
	bench/run.sh $(BUILD)

# The page: liboomless compiled to WebAssembly with emscripten, and web/ (not part of make/check).
WEB_PORT ?= 8000
web: all
	@scripts/install-deps.sh --web
	scripts/web-build.sh $(BUILD)

web-serve: web
	@echo "oomless web: http://127.0.0.1:$(WEB_PORT)/"
	python3 -m http.server --bind 127.0.0.1 --directory $(BUILD)/web $(WEB_PORT)

# The wheels a package index takes (manylinux, x86_64 and aarch64: json-c, libyaml and ncursesw
# linked in statically, tagged by auditwheel) and the sdist, into $(DIST) (docs/install.md).
DIST ?= dist
wheel: deps
	scripts/wheel-build.sh $(shell uname -m) $(DIST)
	scripts/wheel-build.sh sdist $(DIST)

wheel-aarch64: deps
	@scripts/install-deps.sh --wheel
	scripts/wheel-build.sh aarch64 $(DIST)

# the wheels and the sdist built afresh, then installed and run as a user would
# (tests/wheel/check.sh: a fresh venv with the wheel only, the system's libraries hidden)
check-wheel: deps
	@scripts/install-deps.sh --wheel
	rm -f $(DIST)/oomless-*.whl $(DIST)/oomless-*.tar.gz
	scripts/wheel-build.sh x86_64 $(DIST)
	scripts/wheel-build.sh aarch64 $(DIST)
	scripts/wheel-build.sh sdist $(DIST)
	tests/wheel/check.sh $(DIST)
	@$(MAKE) --no-print-directory compile
	cd $(BUILD) && ctest --output-on-failure -L wheel   # pip install ./bindings/python, offline

# the page in headless Chromium against the CLI (tests/web/test_web.py), and the documentation's
# examples that show the page (its size: docs/web.md)
check-web: web
	python3 tests/web/test_web.py $(BUILD)
	OOMLESS_BIN=$(BUILD)/oomless python3 scripts/examples.py check --setups web

format:
	clang-format -i include/*.h lib/*/*.c lib/*/*.h cli/*.c cli/*.h tests/unit/*.c tests/fake/*.c web/api/*.c

clean:
	rm -rf $(BUILD) build-sanitize build-fuzz build-wheel-x86_64 build-wheel-aarch64 build-wheel-deps-arm64
