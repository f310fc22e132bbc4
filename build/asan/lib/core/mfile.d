build/asan/lib/core/mfile.o: lib/core/mfile.c lib/core/mfile.h \
 lib/core/err.h
lib/core/mfile.h:
lib/core/err.h:
