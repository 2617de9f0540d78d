# The README's commands. Each target bootstraps what it needs and builds out of tree.
#   make demo      build, start a local runtime, run two turns with the CLI
#   make test      build with warnings as errors and run every test (ctest: unit, integration, kube, chat, c, python)
#   make bench     release build, run the benchmarks side by side with their comparisons
#   make sanitize  address+undefined build, full suite
#   make tsan      thread-sanitizer build, full suite
#   make python    leave an importable `sessionturn` package in build/python

JOBS ?= $(shell nproc)
PYTHON := /usr/bin/python3
CMAKE_COMMON := -DSESSIONTURN_PYTHON=$(PYTHON) -DPYTHON_EXECUTABLE=$(PYTHON)
CTEST_ARGS ?=

.PHONY: all bootstrap build test demo bench sanitize tsan python clean

all: build

bootstrap:
	@scripts/bootstrap

build/CMakeCache.txt: | bootstrap
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSESSIONTURN_WERROR=ON $(CMAKE_COMMON)

build: bootstrap build/CMakeCache.txt
	cmake --build build -j$(JOBS)

test: build
	cd build && ctest -j$(JOBS) --output-on-failure --timeout 600 $(CTEST_ARGS)

demo: build
	scripts/demo build

python: build
	@echo "import path: $(CURDIR)/build/python"

bench: bootstrap
	cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DSESSIONTURN_BUILD_BENCH=ON \
	  -DSESSIONTURN_BUILD_TESTS=OFF $(CMAKE_COMMON)
	cmake --build build-bench -j$(JOBS)
	bench/run build-bench

sanitize: bootstrap
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSESSIONTURN_WERROR=ON \
	  -DSESSIONTURN_SANITIZE=address,undefined $(CMAKE_COMMON)
	cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest -j$(JOBS) --output-on-failure --timeout 900 $(CTEST_ARGS)

tsan: bootstrap
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DSESSIONTURN_WERROR=ON \
	  -DSESSIONTURN_SANITIZE=thread -DSESSIONTURN_BUILD_PYTHON=OFF $(CMAKE_COMMON)
	cmake --build build-tsan -j$(JOBS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest -j$(JOBS) --output-on-failure --timeout 900 -LE python $(CTEST_ARGS)

clean:
	rm -rf build build-bench build-asan build-tsan
