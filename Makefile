# headroom — `make` builds build/headroom and build/libheadroom.a; with nvcc on
# the PATH (or at /usr/local/cuda) the CUDA backend is built in too.
# `make test` builds and runs every test; `make CUDA=0` forces a CPU-only build.

CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= /usr/local/cuda
BUILD   ?= build
SAN     ?=
CFLAGS  ?= -O3 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wundef -Wno-unused-parameter \
           -Iinclude -Isrc -pthread -fopenmp $(SAN)
LDLIBS  += -lopenblas -lz -lm -pthread -ldl -fopenmp

ifeq ($(NVCC),)
CUDA := 0
endif
CUDA ?= 1

LIB_SRC  := $(wildcard src/core/*.c src/graph/*.c src/ops/*.c src/plan/*.c src/exec/*.c \
                       src/backend/*.c src/backend/cpu/*.c src/data/*.c src/io/*.c)
CLI_SRC  := $(wildcard src/cli/*.c)
CU_SRC   := $(wildcard src/backend/cuda/*.cu)
CUC_SRC  := $(wildcard src/backend/cuda/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
BENCH_SRC := $(wildcard bench/*.c)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
BENCHES  := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

ifeq ($(CUDA),1)
CFLAGS   += -DHR_CUDA=1 -isystem $(CUDA_HOME)/include
NVFLAGS  ?= -O2 -std=c++17 --fmad=false -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
            -Iinclude -Isrc -DHR_CUDA=1 -Xcompiler -fPIC
LIB_OBJ  += $(CU_SRC:%.cu=$(BUILD)/%.o) $(CUC_SRC:%.c=$(BUILD)/%.o)
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt -lstdc++
# cuDNN is loaded at run time (dlopen), so a machine without it still runs
# everything but cuDNN convolutions, and the build needs no cuDNN headers.
endif

all:
.DEFAULT_GOAL := all

# Objects depend on the flags they were built with, so switching CUDA=0/1 or
# SAN rebuilds what it must.
FLAGS_STAMP := $(BUILD)/.flags-$(shell echo '$(CC) $(CFLAGS) $(NVFLAGS) $(CUDA)' | md5sum | cut -c1-12)
$(FLAGS_STAMP):
	@mkdir -p $(@D)
	@rm -f $(BUILD)/.flags-*
	@touch $@

all: $(BUILD)/headroom $(BUILD)/libheadroom.a $(TESTS) $(BUILD)/tests/test_layout $(BENCHES)

$(BUILD)/libheadroom.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^   # anew: a removed source leaves no stale member

$(BUILD)/headroom: $(CLI_OBJ) $(BUILD)/libheadroom.a
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libheadroom.a $(LDLIBS)

# test_ops is one binary from several sources: tests/test_ops.c (main, the
# coverage table) and every tests/ops/*.c (the harness and the op families).
OPS_TEST_SRC := $(wildcard tests/ops/*.c)
$(BUILD)/tests/test_ops: tests/test_ops.c $(OPS_TEST_SRC) tests/ops/harness.h $(BUILD)/libheadroom.a tests/check.h \
                         $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -o $@ tests/test_ops.c $(OPS_TEST_SRC) $(BUILD)/libheadroom.a $(LDLIBS)

# (-MMD: a test rebuilds when a header it includes changes, plan_check.h too)
$(BUILD)/tests/%: tests/%.c $(BUILD)/libheadroom.a tests/check.h $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests -MMD -MP -MT $@ -MF $@.d -o $@ $< $(BUILD)/libheadroom.a $(LDLIBS)

# The layout's promises (layers, files per op, file sizes), checked as a test.
$(BUILD)/tests/test_layout: tests/test_layout.sh
	@mkdir -p $(@D)
	cp $< $@ && chmod +x $@

$(BUILD)/bench/%: bench/%.c $(BUILD)/libheadroom.a $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libheadroom.a $(LDLIBS)

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -MMD -MP -MT $@ -c -o $@ $<

test: all
	bash tests/run.sh $(BUILD)

clean:
	rm -rf $(BUILD)

.PHONY: all test clean
-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(wildcard $(BUILD)/tests/*.d $(BUILD)/tests/gpu/*.d)
