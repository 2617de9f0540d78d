# The README's commands. Each target bootstraps what it needs and builds out of tree.
#   make demo      build, start a local runtime, run two turns with the CLI, then both bridges against their fakes
#   make test      build with warnings as errors and run every test (ctest: unit, integration, kube, chat, c, python)
#   make bench     release build, run the benchmarks side by side with their comparisons
#   make sanitize  address+undefined build, full suite
#   make tsan      thread-sanitizer build, full suite
#   make fuzz      libFuzzer targets (clang), FUZZ_SECONDS each
#   make fuzz-smoke  the same, a few seconds each from the seed corpora (CI runs it after make test)
#   make python    leave an importable `sessionturn` package in build/python

JOBS ?= $(shell nproc)
PYTHON := /usr/bin/python3
CMAKE_COMMON := -DSESSIONTURN_PYTHON=$(PYTHON) -DPYTHON_EXECUTABLE=$(PYTHON)
CTEST_ARGS ?=

.PHONY: all bootstrap build test demo bench sanitize tsan fuzz-build fuzz fuzz-smoke python clean

all: build

bootstrap:
	@scripts/bootstrap

build/CMakeCache.txt: | bootstrap
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSESSIONTURN_WERROR=ON $(CMAKE_COMMON)

build: bootstrap build/CMakeCache.txt
	cmake --build build -j$(JOBS)

test: build
	@scripts/npm-tools
	cd build && ctest -j$(JOBS) --output-on-failure --timeout 600 $(CTEST_ARGS)

# Only what the demo runs (not the test suite), so a first `make demo` is quick.
demo: bootstrap build/CMakeCache.txt
	cmake --build build -j$(JOBS) --target sessionturn_cli sessionturn-local-runtime sessionturn-telegram sessionturn-slack
	scripts/demo build

python: build
	@echo "import path: $(CURDIR)/build/python"

bench:
	SESSIONTURN_BOOTSTRAP_EXTRA="python3-kubernetes" scripts/bootstrap
	cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DSESSIONTURN_BUILD_BENCH=ON \
	  -DSESSIONTURN_BUILD_TESTS=OFF $(CMAKE_COMMON)
	cmake --build build-bench -j$(JOBS)
	bench/run build-bench

sanitize: bootstrap
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSESSIONTURN_WERROR=ON \
	  -DSESSIONTURN_SANITIZE=address,undefined $(CMAKE_COMMON)
	cmake --build build-asan -j$(JOBS)
	@scripts/npm-tools
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest -j$(JOBS) --output-on-failure --timeout 900 $(CTEST_ARGS)

tsan: bootstrap
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSESSIONTURN_WERROR=ON \
	  -DSESSIONTURN_SANITIZE=thread -DSESSIONTURN_BUILD_PYTHON=OFF $(CMAKE_COMMON)
	cmake --build build-tsan -j$(JOBS)
	@scripts/npm-tools
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest -j$(JOBS) --output-on-failure --timeout 900 -LE python $(CTEST_ARGS)

# libFuzzer over every parser of untrusted bytes (clang, ASan+UBSan) in build-fuzz: the library and
# the fuzz targets only (no tests, examples, bindings or C library), so CI can afford it next to `make
# test`. `make fuzz` runs each target FUZZ_SECONDS and keeps what it finds in build-fuzz/corpus;
# `make fuzz-smoke` (CI) runs each FUZZ_SMOKE_SECONDS from its seed corpus alone (fuzz/run says how).
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 5
# clang, its fuzzer and sanitizer runtimes, and llvm-symbolizer for readable reports.
FUZZ_PACKAGES := clang libclang-rt-dev llvm
fuzz-build:
	SESSIONTURN_BOOTSTRAP_EXTRA="$(FUZZ_PACKAGES)" scripts/bootstrap
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DSESSIONTURN_WERROR=ON \
	  -DSESSIONTURN_BUILD_FUZZ=ON -DSESSIONTURN_BUILD_TESTS=OFF -DSESSIONTURN_BUILD_EXAMPLES=OFF \
	  -DSESSIONTURN_BUILD_PYTHON=OFF -DSESSIONTURN_SANITIZE=address,undefined $(CMAKE_COMMON)
	cmake --build build-fuzz -j$(JOBS) --target sessionturn_fuzz

fuzz: fuzz-build
	fuzz/run build-fuzz $(FUZZ_SECONDS)

fuzz-smoke: fuzz-build
	fuzz/run --smoke build-fuzz $(FUZZ_SMOKE_SECONDS)

clean:
	rm -rf build build-bench build-asan build-tsan build-fuzz
