build/asan/lib/core/json.o: lib/core/json.c lib/core/json.h \
 lib/core/err.h lib/core/afile.h lib/core/mfile.h
lib/core/json.h:
lib/core/err.h:
lib/core/afile.h:
lib/core/mfile.h:
