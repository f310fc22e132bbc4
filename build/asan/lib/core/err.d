build/asan/lib/core/err.o: lib/core/err.c lib/core/err.h
lib/core/err.h:
