# A thin layer over CMake: `make demo` and `make test` each do all set-up on a fresh Debian 12 machine.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: deps configure build demo test test-unit bench clean

deps:
	scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The main job: a local cluster (1 scheduler, 2 servers, 2 workers) training an MLP on Fashion-MNIST,
# then its summary drawn as a PNG.
demo: build
	$(BUILD)/bin/pstrain-launch --summary_json=$(BUILD)/demo-summary.json
	$(BUILD)/bin/pstrain-plot $(BUILD)/demo-summary.json -o $(BUILD)/demo-plot.png

# Every test: unit, integration and end to end.
test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 900

test-unit: build
	cd $(BUILD) && ctest --output-on-failure -L unit

bench: build
	bench/run.sh $(BUILD)

clean:
	rm -rf $(BUILD)
