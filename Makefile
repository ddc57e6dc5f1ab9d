# A thin layer over CMake: `make demo` and `make test` each do all set-up on a fresh Debian 12 machine.
# `make demo` installs and builds only what the demo job runs, so that a newcomer trains within
# minutes; `make test` installs and builds everything else.
BUILD ?= build
JOBS ?= $(shell nproc)
# Tests at a time in make test: two, the longest first (docs/testing.md; a fresh-clone run took
# 18 min 15 s, docs/performance.md). The long test programs run as several ctest tests (their
# PARTS), and the thread-safety pass, two clang jobs, runs alone (PROCESSORS 2), so that no
# cluster test is starved past its timeout on 2 cores.
TEST_JOBS ?= 2
# ccache (when present) keys on paths relative to the checkout, so a clone in another folder (CI's)
# reuses what an earlier build compiled.
export CCACHE_BASEDIR ?= $(CURDIR)

CONFIGURE = cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

.PHONY: deps configure build build-demo demo test test-unit bench clean

deps:
	scripts/install-deps.sh all

configure:
	$(CONFIGURE)

# Each step in order, also under make -j.
build:
	scripts/install-deps.sh all
	$(CONFIGURE)
	cmake --build $(BUILD) -j $(JOBS)

# The demo's binaries only: the four roles' and pstrain-plot (CMake target demo-binaries).
build-demo:
	scripts/install-deps.sh demo
	$(CONFIGURE)
	@echo "make demo: building the scheduler, servers, workers and launcher (about 3 minutes on 2 cores with an empty compiler cache)"
	cmake --build $(BUILD) -j $(JOBS) --target demo-binaries

# The main job: a local cluster (1 scheduler, 2 servers, 2 workers) training an MLP on Fashion-MNIST,
# then its summary drawn as a PNG.
demo: build-demo
	$(BUILD)/bin/pstrain-launch --summary_json=$(BUILD)/demo-summary.json
	$(BUILD)/bin/pstrain-plot $(BUILD)/demo-summary.json -o $(BUILD)/demo-plot.png

# Every test: unit, integration and end to end.
test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 900 -j $(TEST_JOBS)

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -L unit

bench: build
	bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD)
