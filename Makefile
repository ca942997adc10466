# Thin wrapper over CMake. `make run` installs what building and running
# need (scripts/install-deps), builds only the pagedlm program and generates
# text; `make test` also installs the test extras (scripts/install-deps
# --test), builds everything and runs CTest; `make install PREFIX=P`
# installs the program, libpagedlm (shared and static), pagedlm.h and
# pagedlm.pc under P.
BUILD ?= build
BUILD_ASAN ?= build-asan
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PAGEDLM_TESTDATA ?= $(abspath ../shared)
export PAGEDLM_TESTDATA
DEFAULT_MODEL ?= $(PAGEDLM_TESTDATA)/models/stories260K/stories260K.gguf
PROMPT ?= Once upon a time
N ?= 64
PREFIX ?= /usr/local

.PHONY: all deps test-deps configure bin build run test test-asan install clean

# One target at a time: deps and test-deps both call apt, which takes a
# lock; the parallelism is inside cmake --build (-j $(JOBS)).
.NOTPARALLEL:

all: build

# runtime packages only (compiler, CMake, the -dev libraries the binary links)
deps:
	@./scripts/install-deps

# runtime packages + Node.js, HAProxy, Python's numpy and PIL, the aarch64
# cross compiler and qemu-user (the tests' extras)
test-deps:
	@./scripts/install-deps --test

configure:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null

# the pagedlm program alone (CMake target pagedlm_cli -> $(BUILD)/pagedlm)
bin: deps configure
	@cmake --build $(BUILD) -j $(JOBS) --target pagedlm_cli

# the program, the library and every test executable
build: deps configure
	@cmake --build $(BUILD) -j $(JOBS)

run: bin
	@if [ ! -f "$(DEFAULT_MODEL)" ]; then \
	  echo "default model not found: $(DEFAULT_MODEL)"; \
	  echo "see README.md (Default model) for where to get stories260K"; exit 1; fi
	./$(BUILD)/pagedlm run -m "$(DEFAULT_MODEL)" -p "$(PROMPT)" -n $(N) --temp 0

test: test-deps build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: test-deps
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DPDL_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD_ASAN) -j $(JOBS)
	@cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

# what cmake --install takes: the program and both libraries (no tests)
install: deps configure
	@cmake --build $(BUILD) -j $(JOBS) --target pagedlm_cli pagedlm pagedlm_shared
	@cmake --install $(BUILD) --prefix "$(PREFIX)"

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
