build/asan/lib/core/afile.o: lib/core/afile.c lib/core/afile.h \
 lib/core/err.h
lib/core/afile.h:
lib/core/err.h:
