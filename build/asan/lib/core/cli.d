build/asan/lib/core/cli.o: lib/core/cli.c lib/core/cli.h lib/core/err.h
lib/core/cli.h:
lib/core/err.h:
