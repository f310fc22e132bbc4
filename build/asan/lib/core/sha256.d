build/asan/lib/core/sha256.o: lib/core/sha256.c lib/core/sha256.h \
 lib/core/err.h
lib/core/sha256.h:
lib/core/err.h:
