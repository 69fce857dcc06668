# bagpipe build.  `make` builds build/bagpipe and the library; `make test` runs every test;
# `make SANITIZE=address,undefined test` does the same under sanitizers (in build-san/).
CC       ?= mpicc
ifeq ($(origin CC),default)
CC       := mpicc
endif
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes \
            -fno-strict-aliasing -pthread -Isrc
LDLIBS   += -lopenblas -lz -lm -pthread

BUILD    ?= build
ifneq ($(SANITIZE),)
BUILD    := build-san
CFLAGS   += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=$(SANITIZE)
endif

LIB_SRC   := $(filter-out src/main.c,$(wildcard src/*.c))
LIB_OBJ   := $(LIB_SRC:src/%.c=$(BUILD)/src/%.o)
TEST_SRC  := $(wildcard tests/*.c)
TEST_OBJ  := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%.o)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

.PHONY: all test bench clean fuzz fuzz-long sanitize
all: $(BUILD)/bagpipe $(BUILD)/test_bagpipe $(BENCH_BIN)

$(BUILD)/libbagpipe.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/bagpipe: $(BUILD)/src/main.o $(BUILD)/libbagpipe.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/test_bagpipe: $(TEST_OBJ) $(BUILD)/libbagpipe.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libbagpipe.a $(wildcard bench/*.h src/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libbagpipe.a $(LDLIBS)

$(BUILD)/src/%.o: src/%.c $(wildcard src/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%.o: tests/%.c tests/test.h $(wildcard src/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# The test runner finds the binary under test through BAGPIPE_BIN.
test: $(BUILD)/bagpipe $(BUILD)/test_bagpipe
	BAGPIPE_BIN=$(BUILD)/bagpipe $(BUILD)/test_bagpipe $(T)

bench: $(BENCH_BIN)

# Fuzzing (clang + libFuzzer) and the sanitizer run; see scripts/fuzz.sh and scripts/sanitize.sh.
fuzz:
	scripts/fuzz.sh run $(or $(S),10)

fuzz-long:
	scripts/fuzz.sh long

sanitize:
	scripts/sanitize.sh

clean:
	rm -rf build build-san build-tsan
