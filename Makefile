# Thin wrapper over CMake. `make run` and `make test` install what is missing
# (scripts/install-deps), build, and run; `make install PREFIX=P` installs the
# program, libpagedlm (shared and static), pagedlm.h and pagedlm.pc under P.
BUILD ?= build
BUILD_ASAN ?= build-asan
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PAGEDLM_TESTDATA ?= $(abspath ../shared)
export PAGEDLM_TESTDATA
DEFAULT_MODEL ?= $(PAGEDLM_TESTDATA)/models/stories260K/stories260K.gguf
PROMPT ?= Once upon a time
N ?= 64
PREFIX ?= /usr/local

.PHONY: all deps build run test test-asan install clean

all: build

deps:
	@./scripts/install-deps

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	@if [ ! -f "$(DEFAULT_MODEL)" ]; then \
	  echo "default model not found: $(DEFAULT_MODEL)"; \
	  echo "see README.md (Default model) for where to get stories260K"; exit 1; fi
	./$(BUILD)/pagedlm run -m "$(DEFAULT_MODEL)" -p "$(PROMPT)" -n $(N) --temp 0

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: deps
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DPDL_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD_ASAN) -j $(JOBS)
	@cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

install: build
	@cmake --install $(BUILD) --prefix "$(PREFIX)"

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
