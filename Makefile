# titan: one build for everything.  See README.md and titan(7).
#
#   make            library, programs (bin/), CUDA kernels when nvcc is found
#   make check      build and run every test (unit, end-to-end, man page lint)
#   make check-gpu  build and run the GPU tests alone (GPU_CHECK=1: only what they link)
#   make check-arm64  the aarch64 cross build (CROSS=arm64), its tests under qemu-user
#   make demo       the whole pipeline on a bundled corpus, on the CPU
#   make demo-flux  Flux learning to draw captioned shapes, on the CPU
#   make bench      benchmarks with figures against the reference tools
#   make asan       the same build with ASan + UBSan (build/asan/); asan-check runs the tests
#   make install    PREFIX=/usr/local (programs and man pages)
#   make deps       install the missing Debian packages the build and tests need
#   make fixtures   test fixtures a clone lacks, in build/fixtures (HF_TOKEN: gated ones)
#   make fuzz       libFuzzer targets (clang) in build/fuzz/; fuzz-run runs each a while
#
# Layout: lib/<module>/*.c -> libtitan.a; tools/<name>/*.c -> bin/titan-<name>;
# kernels/*.cu -> the same library; tests/<area>/test_*.c -> cmocka programs;
# tests/<area>/*.sh -> end-to-end scripts (TAP lines); tests/fuzz/fuzz_<name>.c ->
# a libFuzzer target (make fuzz) and a replay of tests/fuzz/corpus/<name>/ (make
# check).  New files are found by these patterns: a module needs no Makefile change.

PREFIX    ?= /usr/local
MANDIR    ?= $(PREFIX)/share/man
CC        ?= cc
SAN       ?= 0

# CROSS=arm64: the cross build for aarch64 (ARM64 hosts such as Grace) with
# Debian's gcc-aarch64-linux-gnu, against the arm64 libraries that
# scripts/arm64/sysroot.sh unpacks into build/arm64/sysroot (the machine's own
# packages stay amd64).  No CUDA: the nvcc here is an x86-64 toolkit (an
# aarch64 one builds the kernels on the ARM host itself).  make check-arm64
# builds it and runs its tests under qemu-user.
CROSS     ?=
ifeq ($(CROSS),arm64)
BUILD     ?= build/arm64
BIN       ?= build/arm64/bin
SYSROOT   ?= build/arm64/sysroot/root
CC        := aarch64-linux-gnu-gcc
AR        := aarch64-linux-gnu-ar
CUDA      := 0
ARM64_LIB := $(SYSROOT)/usr/lib/aarch64-linux-gnu
MPI_CFLAGS := -isystem $(ARM64_LIB)/openmpi/include -isystem $(ARM64_LIB)/openmpi/include/openmpi
MPI_LIBS   := -L$(ARM64_LIB)/openmpi/lib -lmpi
CPPFLAGS  += --sysroot=$(SYSROOT)
LDFLAGS   += --sysroot=$(SYSROOT)
# GNU ld: the cross gcc looks for lld under its target's prefix, where
# Debian's lld is not
LINKER    ?=
# GCC 12.2's aarch64 vectoriser fails (an internal compiler error) on an
# fmax reduction whose trip count it knows, which the tests' error measures
# become once inlined; the tests' own loops need no vectorising.
$(BUILD)/tests/%.o: CFLAGS += -fno-tree-loop-vectorize
else ifneq ($(CROSS),)
$(error CROSS=$(CROSS): the one cross build is CROSS=arm64)
endif

ifeq ($(SAN),1)
BUILD     ?= build/asan
BIN       ?= build/asan/bin
SANFLAGS  := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT       ?= -O1
else
BUILD     ?= build
BIN       ?= bin
SANFLAGS  :=
OPT       ?= -O2
endif

# MPI is the CPU backend's collectives and the launcher; take its flags from mpicc.
ifneq ($(CROSS),arm64)
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
endif

CPPFLAGS  += -Ilib -D_GNU_SOURCE $(MPI_CFLAGS)
CFLAGS    += -std=c17 $(OPT) -g -Wall -Wextra -Werror -Wno-format-truncation -fopenmp -MMD -MP $(SANFLAGS)
LDFLAGS   += -fopenmp $(SANFLAGS) -Wl,--as-needed
# LLVM's lld where it is installed (make deps installs it): the 141 test
# programs, fuzz replays and benchmarks that make check and make asan-check
# each link took 6.6 s with it against GNU ld's 20.4-22.8 s (2 jobs, 2 cores).
# LINKER=bfd keeps GNU ld.
LINKER    ?= $(if $(shell command -v ld.lld 2>/dev/null),lld,)
LINKER    := $(LINKER)
LDFLAGS   += $(if $(LINKER),-fuse-ld=$(LINKER))
# The float32 kernels never read errno.  With -fmath-errno GCC keeps sqrtf a
# call (errno on a negative argument) and AdamW's loop scalar: a quarter of a
# 100M model's step at one thread.  sqrt is correctly rounded scalar or vector,
# so the bits are the same.  (cpu_f32.c's pragma GCC optimize does not reach it.)
# core/init_draw's normal draws take a vector sqrt the same way; the sanitizer
# build compiles that file as the plain one (core/init_draw.h).
$(BUILD)/lib/backend/cpu_f32.o $(BUILD)/lib/core/init_draw.o: CFLAGS += -fno-math-errno
$(BUILD)/lib/core/init_draw.o: SANFLAGS :=
$(BUILD)/lib/core/init_draw.o: OPT := -O2
LDLIBS    += -lcurl -larchive -lzstd -ldeflate -ljpeg -lpng16 -lwebp -lsnappy -ljansson -lpcre2-8 -lopenblas -ldnnl -lcrypto $(MPI_LIBS) -lm -lpthread

# CUDA: found at $(CUDA_HOME)/bin/nvcc or /usr/local/cuda/bin/nvcc; CUDA=0 turns it off.
# cuDNN (the fused attention) when cudnn.h is in CUDNN_INC; CUDNN=0 leaves it out
# and attention runs on titan's own kernels.  CUDNN_LIBS names the library where
# it is not in $(CUDA_HOME)/lib64 (a pip wheel's folder: -L<dir> -l:libcudnn.so.9).
CUDA_HOME ?= $(if $(wildcard /usr/local/cuda/bin/nvcc),/usr/local/cuda,)
NVCC      := $(if $(CUDA_HOME),$(CUDA_HOME)/bin/nvcc,)
CUDA      ?= $(if $(and $(NVCC),$(wildcard $(NVCC))),1,0)
NVCC_WERROR ?= -Werror all-warnings -Xcompiler -Werror
NVCCFLAGS ?= -O2 -std=c++17 -Ilib $(NVCC_WERROR) -Xcompiler -Wall,-Wextra \
             -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=compute_90
CUDNN_INC  ?= $(CUDA_HOME)/include
CUDNN      ?= $(if $(wildcard $(CUDNN_INC)/cudnn.h),1,0)
CUDNN_LIBS ?= -lcudnn
# NCCL is the comm layer's (lib/comm/nccl.c); the GPU check builds no comm.
NCCL_LIBS  ?= $(if $(filter 1,$(GPU_CHECK)),,-lnccl)
# cuBLASLt is not linked: lib/gpu/cublaslt.c loads it when the CUDA backend
# plans its first product (linked, it costs every program's start 60 ms).
ifeq ($(CUDA),1)
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 $(NCCL_LIBS) \
             $(if $(filter 1,$(CUDNN)),$(CUDNN_LIBS),) -lcudart_static -ldl -lrt -lstdc++
CPPFLAGS  += -DTITAN_CUDA=1 -I$(CUDA_HOME)/include $(if $(filter 1,$(CUDNN)),-DTITAN_CUDNN=1 -I$(CUDNN_INC),)
LDLIBS    += $(CUDA_LIBS)
endif

# GPU_CHECK=1 builds only what the GPU tests and benchmarks link (make check-gpu
# on a machine without Debian's -dev packages, scripts/gpu/check.sh): the
# modules below and the model families (lib/model/families.def), linked against
# OpenBLAS, oneDNN, jansson (the families' HF config.json writers), cmocka and
# CUDA alone.  The text encoders and the autoencoder (test_gpu_textenc,
# test_gpu_fluxae) need lib/safetensors and, of lib/ptzip (whose archive
# reader wants libdeflate), its dtype conversions alone: GPU_CHECK_FILES.
# Warnings stay warnings there: another image's compilers warn about other things, and CI's
# -Werror build is the one that keeps the code clean.
GPU_CHECK_MODULES ?= core backend float8 gpu model optim textenc fluxae safetensors flux \
	$(shell sed -n 's/^FAMILY(\([a-z0-9_]*\)).*/\1/p' lib/model/families.def 2>/dev/null)
GPU_CHECK_FILES ?= lib/ptzip/dtype.c
ifeq ($(GPU_CHECK),1)
MPI_CFLAGS  :=
LDLIBS      := -lopenblas -ldnnl -ljansson $(CUDA_LIBS) -lm -lpthread
CFLAGS      += -Wno-error
NVCC_WERROR :=
endif

LIB_SRC   := $(sort $(wildcard $(if $(filter 1,$(GPU_CHECK)),$(GPU_CHECK_MODULES:%=lib/%/*.c) $(GPU_CHECK_FILES),lib/*/*.c)))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
CU_SRC    := $(if $(filter 1,$(CUDA)),$(sort $(wildcard kernels/*.cu)),)
CU_OBJ    := $(CU_SRC:%.cu=$(BUILD)/%.o)
KERNEL_BUILD := $(if $(filter 1,$(SAN)),build,$(BUILD))
LIBTITAN  := $(BUILD)/libtitan.a

# all stays the goal of a plain make, whatever the included file defines first
.DEFAULT_GOAL := all
include tests/emu/emu.mk

TOOLS     := $(sort $(notdir $(patsubst %/,%,$(dir $(wildcard tools/*/main.c)))))
PROGRAMS  := $(TOOLS:%=$(BIN)/titan-%)

TEST_SRC  := $(sort $(wildcard tests/*/test_*.c))
TEST_BIN  := $(TEST_SRC:%.c=$(BUILD)/%)
BENCH_SRC := $(sort $(wildcard tests/*/bench_*.c))
BENCH_BIN := $(BENCH_SRC:%.c=$(BUILD)/%)
# (the GPU tests use none of them but the drawn goldens' weights, and the
# others link modules GPU_CHECK leaves out)
TEST_SUPPORT_SRC := $(if $(filter 1,$(GPU_CHECK)),tests/support/golden_weights.c tests/support/testutil.c,$(sort $(wildcard tests/support/*.c)))
TEST_SUPPORT_OBJ := $(TEST_SUPPORT_SRC:%.c=$(BUILD)/%.o)
MANPAGES  := $(sort $(wildcard man/*.[1-9]))
# The demos' own small programs (scripts/demo/NAME.c -> build/demo/NAME): data
# generators and viewers, not titan programs (no man page, not installed).
DEMO_SRC  := $(sort $(wildcard scripts/demo/*.c))
DEMO_BIN  := $(DEMO_SRC:scripts/demo/%.c=$(BUILD)/demo/%)

# Fuzzing: each target is built twice.  make check links it with gcc against
# tests/fuzz/replay.c to replay its kept corpus (under ASan in asan-check); make
# fuzz links it with clang's libFuzzer against a clang-built copy of the library.
# (-Wno-pass-failed: at -O1 clang cannot honour every "omp simd"; that is no bug.)
FUZZ_SRC    := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_NAMES  := $(FUZZ_SRC:tests/fuzz/fuzz_%.c=%)
FUZZ_REPLAY := $(FUZZ_NAMES:%=$(BUILD)/tests/fuzz/replay_%)
FUZZ_CC     ?= clang
FUZZ_DIR    := build/fuzz
FUZZ_CFLAGS := -std=c17 -g -O1 -Wall -Wextra -Werror -Wno-pass-failed -fopenmp -fno-omit-frame-pointer \
               -fsanitize=fuzzer-no-link,address,undefined
FUZZ_LIB    := $(FUZZ_DIR)/libtitan.a
FUZZ_BIN    := $(FUZZ_NAMES:%=$(FUZZ_DIR)/fuzz_%)
FUZZ_TIME   ?= 60

.PHONY: all check check-gpu check-arm64 deps-arm64 arm64-tests gpu-check-build run-tests demo demo-flux bench asan asan-check install clean deps deps-fuzz lint-man fuzz fuzz-run \
	fixtures
all: $(LIBTITAN) $(PROGRAMS) $(DEMO_BIN)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(KERNEL_BUILD)/kernels/%.o: kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

# nvcc takes no sanitizer flags: the sanitizer build copies the plain build's
# kernel objects rather than compiling the same code again (minutes in CI).
ifeq ($(SAN),1)
$(BUILD)/kernels/%.o: $(KERNEL_BUILD)/kernels/%.o
	@mkdir -p $(@D)
	cp $< $@
endif

$(LIBTITAN): $(LIB_OBJ) $(CU_OBJ)
	@mkdir -p $(@D)
	rm -f $@
	$(AR) rcs $@ $^

# Every program: tools/<name>/*.c linked against the library.
.SECONDEXPANSION:
$(BIN)/titan-%: $$(addprefix $(BUILD)/,$$(subst .c,.o,$$(wildcard tools/$$*/*.c))) $(LIBTITAN)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIBTITAN) $(LDLIBS)

$(BUILD)/demo/%: $(BUILD)/scripts/demo/%.o $(LIBTITAN)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBTITAN) $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_SUPPORT_OBJ) $(LIBTITAN)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT_OBJ) $(LIBTITAN) $(LDLIBS) -lcmocka

$(BUILD)/tests/fuzz/replay_%: $(BUILD)/tests/fuzz/fuzz_%.o $(BUILD)/tests/fuzz/replay.o $(LIBTITAN)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIBTITAN) $(LDLIBS)

# deps comes first and alone (a sub-make builds the rest), so that make -j check
# on a fresh machine installs the headers before anything compiles.
check: deps
	@$(MAKE) --no-print-directory run-tests

# The emulated kernels run here, not under SAN=1 (their own build has ASan).
run-tests: all $(TEST_BIN) $(FUZZ_REPLAY) $(if $(filter 1,$(EMU)),$(if $(filter 1,$(SAN)),,$(EMU_BIN)))
	@sh scripts/fixtures.sh local
	@BUILD=$(BUILD) BIN=$(BIN) CUDA=$(CUDA) SAN=$(SAN) sh tests/run.sh $(TEST_BIN) $(FUZZ_REPLAY)

# The GPU tests alone (they skip, saying why, where there is no device).
GPU_TEST_BIN  := $(filter $(BUILD)/tests/gpu/%,$(TEST_BIN))
GPU_BENCH_BIN := $(filter $(BUILD)/tests/gpu/%,$(BENCH_BIN))
gpu-check-build: $(GPU_TEST_BIN) $(GPU_BENCH_BIN)
check-gpu: gpu-check-build
	@BUILD=$(BUILD) BIN=$(BIN) CUDA=$(CUDA) SAN=$(SAN) TITAN_TEST_FILTER=tests/gpu/ \
		sh tests/run.sh $(GPU_TEST_BIN)

# The aarch64 build and its tests under qemu-user, beside the host's own build
# (the pipeline test compares the two): scripts/arm64/check.sh.
check-arm64: deps-arm64
	@$(MAKE) --no-print-directory all $(BUILD)/tests/backend/test_backend_isa
	@$(MAKE) --no-print-directory CROSS=arm64 arm64-tests
	@sh scripts/arm64/check.sh

deps-arm64: deps
	@sh scripts/deps.sh arm64
	@sh scripts/arm64/sysroot.sh build/arm64/sysroot

arm64-tests: all $(TEST_BIN) $(FUZZ_REPLAY) $(BENCH_BIN)

# The clang copy of the library has no CUDA: the fuzz targets parse inputs.
$(FUZZ_DIR)/%.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(filter-out -DTITAN_CUDA=1 -DTITAN_CUDNN=1,$(CPPFLAGS)) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_LIB): $(LIB_SRC:%.c=$(FUZZ_DIR)/%.o)
	rm -f $@
	$(AR) rcs $@ $^

$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/tests/fuzz/fuzz_%.o $(FUZZ_LIB)
	$(FUZZ_CC) -fopenmp -fsanitize=fuzzer,address,undefined -o $@ $< $(FUZZ_LIB) \
		$(filter-out $(CUDA_LIBS),$(LDLIBS))

fuzz: deps-fuzz
	@$(MAKE) --no-print-directory $(FUZZ_BIN)

# Run each target for FUZZ_TIME seconds (FUZZ=name for one).  New inputs go to
# build/fuzz/corpus/<name>/; copy the ones worth keeping to tests/fuzz/corpus/<name>/.
fuzz-run: fuzz
	@for n in $(or $(FUZZ),$(FUZZ_NAMES)); do \
		mkdir -p $(FUZZ_DIR)/corpus/$$n $(FUZZ_DIR)/crashes; \
		echo "fuzz $$n for $(FUZZ_TIME)s"; \
		$(FUZZ_DIR)/fuzz_$$n -max_total_time=$(FUZZ_TIME) -print_final_stats=1 \
			-artifact_prefix=$(FUZZ_DIR)/crashes/$$n- \
			$(FUZZ_DIR)/corpus/$$n tests/fuzz/corpus/$$n || exit 1; \
	done

lint-man:
	@for m in $(MANPAGES); do mandoc -Tlint -Wwarning $$m || exit 1; done

asan:
	$(MAKE) SAN=1 all

asan-check:
	$(MAKE) SAN=1 check

demo: deps
	@$(MAKE) --no-print-directory all
	sh scripts/demo.sh

demo-flux: deps
	@$(MAKE) --no-print-directory all
	BUILD=$(BUILD) BIN=$(BIN) sh scripts/demo_flux.sh

# Benchmark drivers: tests/<area>/bench_*.c, built like tests, run by scripts/bench/.
bench: deps
	@$(MAKE) --no-print-directory all $(BENCH_BIN)
	BUILD=$(BUILD) BIN=$(BIN) sh scripts/bench.sh

deps:
	@sh scripts/deps.sh

# The fixtures the repository does not hold: see scripts/fixtures.sh.
fixtures: deps
	@$(MAKE) --no-print-directory all
	@BIN=$(BIN) sh scripts/fixtures.sh

deps-fuzz:
	@sh scripts/deps.sh fuzz

install: all
	install -d $(DESTDIR)$(PREFIX)/bin
	for p in $(PROGRAMS); do install -m 0755 $$p $(DESTDIR)$(PREFIX)/bin/; done
	for m in $(MANPAGES); do s=$${m##*.}; install -d $(DESTDIR)$(MANDIR)/man$$s; \
		install -m 0644 $$m $(DESTDIR)$(MANDIR)/man$$s/; done

clean:
	rm -rf build bin

-include $(LIB_OBJ:.o=.d) $(DEMO_SRC:%.c=$(BUILD)/%.d) $(CU_SRC:%.cu=$(KERNEL_BUILD)/%.d) $(TEST_BIN:=.d) $(BENCH_BIN:=.d) $(FUZZ_SRC:%.c=$(BUILD)/%.d) \
	$(BUILD)/tests/fuzz/replay.d $(wildcard $(FUZZ_DIR)/lib/*/*.d $(FUZZ_DIR)/tests/fuzz/*.d) $(TEST_SUPPORT_OBJ:.o=.d) \
	$(patsubst %.c,$(BUILD)/%.d,$(wildcard tools/*/*.c))

# Keep objects make would otherwise delete as intermediates.
.SECONDARY:
