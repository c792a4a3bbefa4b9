# cnn.c — the one Makefile. `make` builds build/cnn with plain gcc; `make test` builds and runs every test.
# The CUDA backend compiles in when cuda.h and nvrtc.h are found; no CUDA library is ever linked (libcuda and
# libnvrtc are opened with dlopen at run time). Variables: BUILD (output dir), SAN=1 (ASan+UBSan), SAN=fuzz (the
# same plus libFuzzer's coverage, with CC=clang: tests/fuzz/build.sh), OPT, CC.

CC      ?= gcc
BUILD   ?= build
OPT     ?= -O2
CUDA_HOME ?= /usr/local/cuda
# the first Python that imports torch + torchvision (Debian's on CI; a pip one on the GPU machine), found once:
# importing torch takes seconds where it has CUDA (a recursive `?=` re-ran the search at every use)
ifeq ($(origin PYTHON),undefined)
  PYTHON := $(shell for p in /usr/bin/python3 python3; do $$p -c 'import torch, torchvision' 2>/dev/null && { echo $$p; exit 0; }; done)
  HAVE_TORCH := $(if $(PYTHON),1)
  PYTHON := $(or $(PYTHON),/usr/bin/python3)
else
  HAVE_TORCH := $(shell $(PYTHON) -c 'import torch, torchvision' 2>/dev/null && echo 1)
endif

# ---- what is there ------------------------------------------------------------------------------------
HAVE_OPENMP := $(shell printf 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo 1)
HAVE_CUDA   := $(shell test -f $(CUDA_HOME)/include/cuda.h && test -f $(CUDA_HOME)/include/nvrtc.h && echo 1)
HAVE_CLANG  := $(shell command -v clang >/dev/null 2>&1 && echo 1)
# image and compressed-dataset libraries, probed by compiling and linking a call into each
probe = $(shell printf '#include <$(1)>\nint main(void){return !$(2);}' | $(CC) -x c - -o /dev/null $(3) 2>/dev/null && echo 1)
HAVE_JPEG   := $(call probe,turbojpeg.h,tjInitDecompress,-lturbojpeg)
HAVE_PNG    := $(call probe,png.h,png_access_version_number,-lpng16 -lz)
HAVE_ZLIB   := $(call probe,zlib.h,zlibVersion,-lz)
# the commit recorded in benchmark results (-dirty: tracked files differ from it); `make GIT_COMMIT=...` where
# the tree's git metadata is not its own
GIT_COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)

ifneq ($(SAN),)
  ifeq ($(filter 1 fuzz,$(SAN)),)
    $(error SAN must be empty, 1 or fuzz, not '$(SAN)')
  endif
  OPT := -O1
  SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  ifeq ($(SAN),fuzz)
    SANFLAGS += -fsanitize=fuzzer-no-link
  endif
endif

# -fno-trapping-math: nothing reads the floating-point exception flags, and without it gcc keeps a branch per
# element where a select has a conversion on one side (the CPU BatchNorm's ReLU: perf-log step 67); the values
# computed are the same (contraction stays off: -std=c11)
CFLAGS  := -std=c11 -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter $(OPT) -g -fno-trapping-math \
           -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -DCNN_COMMIT='"$(GIT_COMMIT)"' \
           -Iinclude -Isrc $(SANFLAGS) -MMD -MP
# clang reports an `omp simd` loop it leaves scalar as a warning (-Wpass-failed), an error under -Werror, which broke
# `make fuzz` (clang); the loops compute the same either way (src/cpu/batchnorm.c)
ifneq ($(findstring clang,$(shell $(CC) --version 2>/dev/null | head -n 1)),)
  CFLAGS += -Wno-pass-failed
endif
LDFLAGS := $(SANFLAGS)
LDLIBS  := -lm -ldl -lpthread
ifeq ($(HAVE_OPENMP),1)
  CFLAGS += -fopenmp
  LDFLAGS += -fopenmp
endif
ifeq ($(HAVE_CUDA),1)
  CFLAGS += -DCNN_HAVE_CUDA -isystem $(CUDA_HOME)/include
endif
ifeq ($(HAVE_JPEG),1)
  CFLAGS += -DCNN_HAVE_JPEG
  LDLIBS += -lturbojpeg
endif
ifeq ($(HAVE_PNG),1)
  CFLAGS += -DCNN_HAVE_PNG
  LDLIBS += -lpng16
endif
ifeq ($(HAVE_ZLIB),1)
  CFLAGS += -DCNN_HAVE_ZLIB
  LDLIBS += -lz
endif

# ---- sources ------------------------------------------------------------------------------------------
LIB_SRC := $(wildcard src/core/*.c) $(wildcard src/cpu/*.c)
ifeq ($(HAVE_CUDA),1)
  LIB_SRC += $(wildcard src/cuda/*.c)
endif
KERNELS := $(sort $(wildcard kernels/*.cu kernels/*.cuh))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
ifeq ($(HAVE_CUDA),1)
  LIB_OBJ += $(BUILD)/kernels_embed.o
endif
APP_SRC := $(wildcard apps/*.c)
APP_OBJ := $(APP_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/unit/test_*.c)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/%)

.PHONY: all test test-gpu clean info demo bench-gpu fuzz lib reliability
all: info $(BUILD)/cnn $(TEST_BIN)

info:
	@echo "cnn.c build: CC=$(CC) BUILD=$(BUILD) OPT='$(OPT)'$(if $(SAN), SAN=asan+ubsan)"
	@echo "  $(if $(HAVE_OPENMP),✓,✗) OpenMP"
	@echo "  $(if $(HAVE_CUDA),✓ CUDA headers in $(CUDA_HOME) (CUDA backend compiled in; libcuda/libnvrtc loaded at run time),✗ CUDA headers (CPU backend only))"
	@echo "  $(if $(HAVE_TORCH),✓ PyTorch + torchvision ($(PYTHON)): reference tests run,✗ PyTorch ($(PYTHON)): reference tests will SKIP)"
	@echo "  $(if $(HAVE_CLANG),✓ clang: libFuzzer harnesses (make fuzz),✗ clang: no libFuzzer harnesses)"
	@echo "  $(if $(HAVE_JPEG),✓ libturbojpeg: JPEG images,✗ libturbojpeg (libturbojpeg0-dev): JPEG support not built)"
	@echo "  $(if $(HAVE_PNG),✓ libpng: PNG images,✗ libpng (libpng-dev): PNG support not built)"
	@echo "  $(if $(HAVE_ZLIB),✓ zlib: gzipped MNIST files,✗ zlib (zlib1g-dev): .gz dataset files not readable)"

# the library and the CLI's option parser alone (what the fuzz targets link)
lib: $(BUILD)/libcnn.a $(BUILD)/apps/cli.o

$(BUILD)/libcnn.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/cnn: $(APP_OBJ) $(BUILD)/libcnn.a
	$(CC) $(LDFLAGS) -o $@ $(APP_OBJ) $(BUILD)/libcnn.a $(LDLIBS)

$(BUILD)/test_%: tests/unit/test_%.c tests/unit/test.h $(BUILD)/libcnn.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit $(LDFLAGS) -o $@ $< $(BUILD)/libcnn.a $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

# the commit string is compiled into these two: rebuild them when it changes
COMMIT_STAMP := $(BUILD)/commit-$(GIT_COMMIT).stamp
$(COMMIT_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/commit-*.stamp && touch $@
$(BUILD)/apps/main.o $(BUILD)/apps/cmd_bench.o: $(COMMIT_STAMP)

# kernels/*.cu -> one C file of byte arrays (tools/embed.c), so the binary carries its kernel sources
$(BUILD)/tools/embed: tools/embed.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -Wall -Wextra -Werror -O2 -o $@ $<
$(BUILD)/kernels_embed.c: $(BUILD)/tools/embed $(KERNELS)
	$(BUILD)/tools/embed $@ $(KERNELS)
$(BUILD)/kernels_embed.o: $(BUILD)/kernels_embed.c
	$(CC) $(CFLAGS) -c -o $@ $<

# CUDA backend tests (tests/gpu): every op against the CPU backend on a GPU (make test-gpu), or on the CPU
# emulator of tests/gpu/emu (make test-gpu-emu: fake libcuda/libnvrtc that run the same kernels as C++).
ifeq ($(HAVE_CUDA),1)
all: $(BUILD)/gpu_test_ops
endif
$(BUILD)/gpu_test_%: tests/gpu/test_gpu_%.c tests/unit/test.h $(BUILD)/libcnn.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit $(LDFLAGS) -o $@ $< $(BUILD)/libcnn.a $(LDLIBS)

.PHONY: test-gpu-emu
test-gpu-emu: all
	@BUILD=$(BUILD) CUDA_HOME=$(CUDA_HOME) tests/gpu/emu/run.sh

# ---- jobs ---------------------------------------------------------------------------------------------
# The main job: a short CPU run of a CIFAR-stem ResNet-18 on real data (Fashion-MNIST from Debian's
# dataset-fashion-mnist: 4096 training images, 2 epochs; test accuracy on the first 2000 test images), or on the
# built-in synthetic data when the package (or zlib) is missing.
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
demo: all
	@if [ -f $(FMNIST) ] && [ -n "$(HAVE_ZLIB)" ]; then \
	  set -e; echo "make demo: Fashion-MNIST (Debian's dataset-fashion-mnist)"; \
	  $(BUILD)/cnn train --model resnet18 --stem cifar --data fashion-mnist --train-size 4096 --epochs 2 --batch 64 \
	      --lr 0.1 --warmup 10 --label-smoothing 0.1 --schedule cosine --eval-size 0 --out runs/demo; \
	  $(BUILD)/cnn eval --model resnet18 --stem cifar --data fashion-mnist --weights runs/demo/model.safetensors \
	      --eval-size 2000; \
	else \
	  set -e; echo "make demo: no Fashion-MNIST ($(FMNIST)$(if $(HAVE_ZLIB),, or zlib)): the built-in synthetic data"; \
	  $(BUILD)/cnn train --model resnet18 --stem cifar --data synthetic --epochs 3 --train-size 1536 \
	      --batch 64 --lr 0.05 --warmup 6 --schedule cosine --out runs/demo --eval-size 512; \
	  $(BUILD)/cnn eval --model resnet18 --stem cifar --data synthetic --weights runs/demo/model.safetensors \
	      --eval-size 1024; \
	fi
	@echo "make demo: files in runs/demo/: model.safetensors (weights, torchvision names), checkpoint.safetensors,"
	@echo "  metrics.jsonl (one record per step), curves.svg (loss, accuracy, learning rate; cnn plot runs/demo)"

# Unit tests, the same tests under ASan+UBSan, CLI error-path tests, and the PyTorch reference tests.
test: all
	@$(MAKE) --no-print-directory BUILD=$(BUILD)-asan SAN=1 all
	@BUILD=$(BUILD) ASAN_BUILD=$(BUILD)-asan PYTHON=$(PYTHON) LDLIBS='$(LDLIBS)' tests/run.sh

# the reliability battery in full (docs/RELIABILITY.md; `make test` runs a subset): about an hour on two cores
reliability: all
	@$(MAKE) --no-print-directory BUILD=$(BUILD)-asan SAN=1 all
	@BUILD=$(BUILD) CUDA_HOME=$(CUDA_HOME) tests/gpu/emu/run.sh --libs
	@BUILD=$(BUILD) ASAN_BUILD=$(BUILD)-asan PYTHON=$(PYTHON) LDLIBS='$(LDLIBS)' tests/reliability/run.sh

test-gpu: all
	@BUILD=$(BUILD) PYTHON=$(PYTHON) tests/run_gpu.sh

bench-gpu: all
	@BUILD=$(BUILD) PYTHON=$(PYTHON) bench/run.sh

fuzz:
	@test -n "$(HAVE_CLANG)" || { echo "make fuzz needs clang"; exit 2; }
	@BUILD=$(BUILD) LDLIBS='$(LDLIBS)' tests/fuzz/build.sh
	@BUILD=$(BUILD) LDLIBS='$(LDLIBS)' tests/fuzz/build_data.sh

clean:
	rm -rf build build-*

-include $(LIB_OBJ:.o=.d) $(APP_OBJ:.o=.d)
