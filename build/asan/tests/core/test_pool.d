build/asan/tests/core/test_pool.o: tests/core/test_pool.c lib/core/pool.h \
 lib/core/err.h
lib/core/pool.h:
lib/core/err.h:
