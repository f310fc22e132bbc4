build/asan/lib/core/pool.o: lib/core/pool.c lib/core/pool.h \
 lib/core/err.h
lib/core/pool.h:
lib/core/err.h:
