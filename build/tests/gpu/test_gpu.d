build/tests/gpu/test_gpu.o: tests/gpu/test_gpu.c lib/gpu/gpu.h \
 lib/core/err.h
lib/gpu/gpu.h:
lib/core/err.h:
