# Developer tasks for mlpe-fast.  Every target runs from a plain checkout:
# the compiled core is built in place (src/mlpe_fast/wire/*.so) and tests
# import the package from src/, so no install step is needed.
#
#   make compile       build the native core in place (-O3)
#   make debug         the same with -O0 -g and assertions (MLPE_FAST_DEBUG)
#   make test          the whole suite (wire tests run on the core and the twins)
#   make test-py       the suite on the pure-Python twins only
#   make test-asan     tests/unit and the endpoint-fault tests against an ASan+UBSan
#                      build (Linux, gcc)
#   make fuzz          every C decoder for FUZZ_SECONDS each, gcc + ASan/UBSan
#   make fuzz-libfuzzer  the same drivers under libFuzzer (needs clang)
#   make stress        the receive thread's stress run (csrc/stress/), gcc + TSan,
#                      then gcc + ASan/UBSan
#   make typecheck     mypy (strict; configuration in pyproject.toml)
#   make lint          ruff check + ruff format --check
#   make format        apply ruff's formatting and safe fixes
#   make bench         pytest-benchmark over bench/ (GC disabled)
#   make clean         remove every build product

PYTHON ?= python3
PYTEST ?= $(PYTHON) -m pytest
# The compiler of the sanitizer build (make's own CC defaults to cc).
ASAN_CC ?= gcc

# Sanitizer build of the extensions, kept out of src/ so that a later
# `make test` does not import an ASan-linked module without the runtime.
ASAN_LIB := build/asan/lib
ASAN_TMP := build/asan/tmp
# The ASan runtime must be the first library of the (uninstrumented) python
# process; UBSan's runtime comes along for the -fsanitize=undefined part.
ASAN_PRELOAD = $(shell $(ASAN_CC) -print-file-name=libasan.so) $(shell $(ASAN_CC) -print-file-name=libubsan.so)

# Fuzzing: csrc/fuzz/fuzz_<name>.c drives the decoder(s) listed below.
FUZZERS ?= h1 sse oai response h2 sglang pktstamp bpe
FUZZ_SECONDS ?= 30
FUZZ_SEED ?= 0
FUZZ_BUILD ?= csrc/fuzz/build
FUZZ_CC ?= gcc
LIBFUZZER_CC ?= clang
FUZZ_CFLAGS ?= -std=c99 -O1 -g -Wall -Wextra -Wno-unused-parameter -Icsrc
FUZZ_SANITIZE ?= -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# Edge coverage for standalone.c's corpus growth (gcc >= 8 and clang have it).
FUZZ_COVERAGE ?= -fsanitize-coverage=trace-pc
FUZZ_SRC_h1 := csrc/mlpe_h1.c
FUZZ_SRC_sse := csrc/mlpe_sse.c
FUZZ_SRC_oai := csrc/mlpe_oai.c
FUZZ_SRC_response := csrc/mlpe_h1.c csrc/mlpe_sse.c csrc/mlpe_oai.c csrc/mlpe_response.c
FUZZ_SRC_h2 := csrc/mlpe_h2.c $(FUZZ_SRC_response)
FUZZ_SRC_sglang := $(FUZZ_SRC_response)
FUZZ_SRC_pktstamp := csrc/mlpe_pktstamp.c
FUZZ_SRC_bpe := csrc/mlpe_bpe.c
FUZZ_DEPS := csrc/fuzz/fuzz_common.h $(wildcard csrc/*.h)

# Stress: csrc/stress/stress_rxthread.c drives the receive thread over
# loopback TCP.  STRESS_ARGS go to it (-t SECONDS -s SEED -n CONNS -w WRITERS).
STRESS_BUILD ?= csrc/stress/build
STRESS_CC ?= gcc
STRESS_CFLAGS ?= -std=c99 -O1 -g -Wall -Wextra -Wno-unused-parameter -fno-omit-frame-pointer -pthread
STRESS_ARGS ?=
STRESS_SRC := csrc/stress/stress_rxthread.c csrc/mlpe_rxthread.c csrc/mlpe_rxstamp.c
STRESS_DEPS := csrc/mlpe_rxthread.h csrc/mlpe_rxstamp.h csrc/mlpe_clock.h

.PHONY: all compile debug test test-py test-asan fuzz fuzz-build fuzz-libfuzzer \
	stress stress-build typecheck lint format bench clean

all: compile

compile:
	$(PYTHON) setup.py build_ext --inplace

debug:
	MLPE_FAST_DEBUG=1 $(PYTHON) setup.py build_ext --inplace --force

test: compile
	PYTHONPATH=src $(PYTEST)

test-py:
	MLPE_FAST_NO_EXTENSIONS=1 PYTHONPATH=src $(PYTEST)

# Unit tests against extensions built with -fsanitize=address,undefined.
# CPython itself frees some memory only at exit (and some never), so leak
# detection is off for the interpreter; the C core's own leaks are the fuzz
# drivers' job, which run under LeakSanitizer.  PYTHONMALLOC=malloc sends
# every Python allocation through malloc so ASan sees buffer overruns of
# Python objects too.
test-asan:
	MLPE_FAST_SANITIZE=1 CC=$(ASAN_CC) $(PYTHON) setup.py --quiet \
		build_py --build-lib $(ASAN_LIB) \
		build_ext --build-lib $(ASAN_LIB) --build-temp $(ASAN_TMP) --force
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	PYTHONMALLOC=malloc LD_PRELOAD="$(ASAN_PRELOAD)" PYTHONPATH=$(ASAN_LIB) \
		$(PYTEST) tests/unit tests/integration/test_faults.py tests/integration/test_client_h2.py \
			tests/integration/test_kernel_stamps.py -p no:cacheprovider

# --- fuzzing ---------------------------------------------------------------
#
# `make fuzz` builds csrc/fuzz/standalone.c (a coverage-guided mutation loop
# that needs no libFuzzer) around each driver with gcc, ASan and UBSan, and
# runs it over the seed corpus for FUZZ_SECONDS.  A crash leaves its input in
# $(FUZZ_BUILD)/crash-<hash>; replay it with
#   $(FUZZ_BUILD)/standalone_<name> $(FUZZ_BUILD)/crash-<hash>

# The loop itself is not instrumented for coverage: only the code under test.
$(FUZZ_BUILD)/standalone.o: csrc/fuzz/standalone.c
	@mkdir -p $(FUZZ_BUILD)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SANITIZE) -c $< -o $@

define fuzz_rules
$(FUZZ_BUILD)/standalone_$(1): csrc/fuzz/fuzz_$(1).c $(FUZZ_BUILD)/standalone.o $(FUZZ_SRC_$(1)) $(FUZZ_DEPS)
	$$(FUZZ_CC) $$(FUZZ_CFLAGS) $$(FUZZ_SANITIZE) $$(FUZZ_COVERAGE) \
		csrc/fuzz/fuzz_$(1).c $(FUZZ_SRC_$(1)) $(FUZZ_BUILD)/standalone.o -o $$@

$(FUZZ_BUILD)/libfuzzer_$(1): csrc/fuzz/fuzz_$(1).c $(FUZZ_SRC_$(1)) $(FUZZ_DEPS)
	@command -v $$(LIBFUZZER_CC) >/dev/null 2>&1 || { \
		echo "fuzz-libfuzzer: '$$(LIBFUZZER_CC)' not found; libFuzzer needs clang" \
		     "(apt-get install clang).  'make fuzz' runs the same drivers with gcc." >&2; \
		exit 1; }
	@mkdir -p $(FUZZ_BUILD)
	$$(LIBFUZZER_CC) $$(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=all -fno-omit-frame-pointer \
		csrc/fuzz/fuzz_$(1).c $(FUZZ_SRC_$(1)) -o $$@
endef
$(foreach f,$(FUZZERS),$(eval $(call fuzz_rules,$(f))))

fuzz-build: $(FUZZERS:%=$(FUZZ_BUILD)/standalone_%)

# Every driver runs even when an earlier one crashed; the target fails if any did.
fuzz: fuzz-build
	@failed=""; for f in $(FUZZERS); do \
		echo "== fuzz $$f: $(FUZZ_SECONDS) s (gcc, ASan+UBSan)"; \
		$(FUZZ_BUILD)/standalone_$$f -max_total_time=$(FUZZ_SECONDS) -seed=$(FUZZ_SEED) \
			-dict=csrc/fuzz/$$f.dict -artifact_prefix=$(FUZZ_BUILD)/ csrc/fuzz/corpus/$$f \
			|| failed="$$failed $$f"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: crashed:$$failed (inputs in $(FUZZ_BUILD)/)" >&2; exit 1; fi

# New inputs go to $(FUZZ_BUILD)/corpus_<name> (libFuzzer writes to its first
# corpus directory); the seeds in csrc/fuzz/corpus/ are only read.
fuzz-libfuzzer: $(FUZZERS:%=$(FUZZ_BUILD)/libfuzzer_%)
	@failed=""; for f in $(FUZZERS); do \
		echo "== libFuzzer $$f: $(FUZZ_SECONDS) s"; \
		mkdir -p $(FUZZ_BUILD)/corpus_$$f; \
		$(FUZZ_BUILD)/libfuzzer_$$f -max_total_time=$(FUZZ_SECONDS) -seed=$(FUZZ_SEED) \
			-dict=csrc/fuzz/$$f.dict -artifact_prefix=$(FUZZ_BUILD)/ -print_final_stats=1 \
			$(FUZZ_BUILD)/corpus_$$f csrc/fuzz/corpus/$$f \
			|| failed="$$failed $$f"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz-libfuzzer: crashed:$$failed (inputs in $(FUZZ_BUILD)/)" >&2; exit 1; fi

# --- stress ----------------------------------------------------------------
#
# `make stress` builds csrc/stress/stress_rxthread.c with the receive thread
# twice -- ThreadSanitizer, then AddressSanitizer + UBSan -- and runs each
# build (a few seconds).  Both run even when the first fails.

$(STRESS_BUILD)/stress_rxthread_tsan: $(STRESS_SRC) $(STRESS_DEPS)
	@mkdir -p $(STRESS_BUILD)
	$(STRESS_CC) $(STRESS_CFLAGS) -fsanitize=thread $(STRESS_SRC) -o $@

$(STRESS_BUILD)/stress_rxthread_asan: $(STRESS_SRC) $(STRESS_DEPS)
	@mkdir -p $(STRESS_BUILD)
	$(STRESS_CC) $(STRESS_CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=all \
		$(STRESS_SRC) -o $@

stress-build: $(STRESS_BUILD)/stress_rxthread_tsan $(STRESS_BUILD)/stress_rxthread_asan

stress: stress-build
	@failed=""; \
	echo "== stress rxthread (gcc, TSan)"; \
	TSAN_OPTIONS=second_deadlock_stack=1 $(STRESS_BUILD)/stress_rxthread_tsan $(STRESS_ARGS) \
		|| failed="$$failed tsan"; \
	echo "== stress rxthread (gcc, ASan+UBSan)"; \
	ASAN_OPTIONS=abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		$(STRESS_BUILD)/stress_rxthread_asan $(STRESS_ARGS) || failed="$$failed asan"; \
	if [ -n "$$failed" ]; then echo "stress: failed under:$$failed" >&2; exit 1; fi

# --- checks ----------------------------------------------------------------

typecheck:
	$(PYTHON) -m mypy

lint:
	ruff check .
	ruff format --check .

format:
	ruff format .
	ruff check --fix .

# bench/ holds bench_*.py (kept out of the default test collection).
BENCH_ARGS ?=
bench: compile
	PYTHONPATH=src $(PYTEST) bench/ -o python_files='bench_*.py' --benchmark-disable-gc $(BENCH_ARGS)

clean:
	rm -rf build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis \
		.benchmarks $(FUZZ_BUILD) $(STRESS_BUILD)
	find src -name '*.so' -delete -o -name '*.pyd' -delete -o -name '*_c.c' -delete \
		-o -name '*_c.html' -delete -o -name __pycache__ -prune -exec rm -rf {} +
	find tests bench -name __pycache__ -prune -exec rm -rf {} +
