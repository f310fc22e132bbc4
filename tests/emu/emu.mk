# The CUDA emulator (tests/emu/, included by the Makefile): kernels/*.cu
# compiled as host C++ (cuda_emu.h, after cu2cpp's rewrite of the launch
# syntax) and run on fibers by the GPU tests that call the kernels' launchers,
# against the CPU backend.  Two builds: asan (ASan + UBSan + gcov: bounds,
# misaligned vector accesses, the lines each kernel executes) and tsan
# (ThreadSanitizer: races between the threads of a block).
# tests/gpu/emu.sh and emu_tsan.sh run them; tests/gpu/emu_mutants.sh holds
# the emulator to catching broken kernels.  Needs CUDA's headers, not a GPU
# (EMU=0 leaves it out); make check builds it beside the plain build.
comma     := ,
EMU_INC   := $(CUDA_HOME)/include
EMU       ?= $(if $(and $(filter 1,$(CUDA)),$(wildcard $(EMU_INC)/cuda_bf16.h)),1,0)
EMU_DIR   := build/emu
EMU_TESTS := test_gpu_ops test_gpu_attention test_gpu_launch
EMU_CU    := $(sort $(wildcard kernels/*.cu))
EMU_CUH   := $(sort $(wildcard lib/gpu/*.cuh))
# (-g1: line tables are what sanitizer reports need, at two thirds of the compile time)
EMU_CXXFLAGS := -std=c++17 -O1 -g1 -Wall -Wextra -Werror -Wno-unknown-pragmas
EMU_SAN_asan := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
EMU_SAN_tsan := -fsanitize=thread
# The emulator's own code is not instrumented: under TSan its bookkeeping is
# shared by the fibers on purpose, and under ASan instrumenting it only slows
# every switch; it announces the fibers and barriers to the sanitizer instead.
EMU_RT_asan  := -O2 -DEMU_ASAN=1
EMU_RT_tsan  := -O2 -DEMU_TSAN=1
EMU_COV_asan := --coverage
EMU_COV_tsan :=
EMU_KFLAGS = $(EMU_CXXFLAGS) -include tests/emu/cuda_emu.h -Itests/emu/include \
	     -I$(EMU_DIR)/src/lib -Ilib -I$(EMU_INC)
# gpu.c (memory, copies) against tests/gpu/fake_cuda.c's runtime: built with
# a section per function so that the link keeps only what the tests reach.
EMU_CFLAGS := -std=c17 -O1 -g -D_GNU_SOURCE -DTITAN_CUDA=1 -ffunction-sections -Ilib \
	      -Itests/gpu -I$(EMU_INC)
# (cuDNN: libtitan's attn_cudnn.o is linked; without a device it reports none)
EMU_CUDNN_LIBS := -L$(CUDA_HOME)/lib64 -Wl$(comma)-rpath$(comma)$(CUDA_HOME)/lib64 $(CUDNN_LIBS)
EMU_LDLIBS = $(filter-out $(CUDA_LIBS),$(LDLIBS)) $(if $(filter 1,$(CUDNN)),$(EMU_CUDNN_LIBS)) \
	     -lcmocka -lstdc++

$(EMU_DIR)/src/%: % tests/emu/cu2cpp
	@mkdir -p $(@D)
	@sh tests/emu/cu2cpp $< $@

# $(1): asan or tsan
define emu_build
$(EMU_DIR)/$(1)/kernels/%.o: $(EMU_DIR)/src/kernels/%.cu $(EMU_CUH:%=$(EMU_DIR)/src/%) tests/emu/cuda_emu.h tests/emu/emu_abi.h
	@mkdir -p $$(@D)
	$(CXX) $(EMU_KFLAGS) $(EMU_SAN_$(1)) $(EMU_COV_$(1)) -MMD -MP -x c++ -c $$< -o $$@
$(EMU_DIR)/$(1)/emu.o: tests/emu/emu.cc tests/emu/fiber.h tests/emu/emu_abi.h
	@mkdir -p $$(@D)
	$(CXX) $(EMU_CXXFLAGS) $(EMU_RT_$(1)) -I$(EMU_INC) -c $$< -o $$@
$(EMU_DIR)/$(1)/fiber.o: tests/emu/fiber.c tests/emu/fiber.h
	@mkdir -p $$(@D)
	$(CC) $(EMU_CFLAGS) -Wall -Wextra -Werror $(EMU_RT_$(1)) -c $$< -o $$@
$(EMU_DIR)/$(1)/%.o: lib/gpu/%.c
	@mkdir -p $$(@D)
	$(CC) $(EMU_CFLAGS) $(EMU_SAN_$(1)) -c $$< -o $$@
$(EMU_DIR)/$(1)/%.o: tests/gpu/%.c
	@mkdir -p $$(@D)
	$(CC) $(EMU_CFLAGS) $(EMU_SAN_$(1)) -c $$< -o $$@
EMU_OBJ_$(1) := $(EMU_CU:kernels/%.cu=$(EMU_DIR)/$(1)/kernels/%.o) \
	$(addprefix $(EMU_DIR)/$(1)/,emu.o fiber.o gpu.o fake_cuda.o)
$(EMU_DIR)/$(1)/test_%: $(BUILD)/tests/gpu/test_%.o $$(EMU_OBJ_$(1)) $(LIBTITAN)
	$(CC) $(LDFLAGS) $(EMU_SAN_$(1)) $(EMU_COV_$(1)) -o $$@ $$< $$(EMU_OBJ_$(1)) $(LIBTITAN) \
		-Wl,--gc-sections $(EMU_LDLIBS)
-include $(EMU_CU:kernels/%.cu=$(EMU_DIR)/$(1)/kernels/%.d)
endef
$(eval $(call emu_build,asan))
$(eval $(call emu_build,tsan))

# The emulator's own test (tests/emu/test_emu.cu), on the ASan build.
$(EMU_DIR)/asan/test_emu.o: $(EMU_DIR)/src/tests/emu/test_emu.cu tests/emu/cuda_emu.h tests/emu/emu_abi.h
	@mkdir -p $(@D)
	$(CXX) $(EMU_KFLAGS) $(EMU_SAN_asan) -x c++ -c $< -o $@
$(EMU_DIR)/asan/test_emu: $(addprefix $(EMU_DIR)/asan/,test_emu.o emu.o fiber.o fake_cuda.o)
	$(CXX) $(EMU_SAN_asan) -o $@ $^ -lcmocka

EMU_BIN := $(foreach v,asan tsan,$(EMU_TESTS:%=$(EMU_DIR)/$(v)/%)) $(EMU_DIR)/asan/test_emu
.PRECIOUS: $(EMU_DIR)/src/%
.PHONY: emu
emu: $(EMU_BIN)

# For tests/gpu/emu_mutants.sh, which builds broken copies of kernels the
# same way: make -s emu-print-EMU_KFLAGS prints that variable.
emu-print-%:
	@echo '$($*)'
