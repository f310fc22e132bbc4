build/lib/core/progress.o: lib/core/progress.c lib/core/progress.h \
 lib/core/err.h
lib/core/progress.h:
lib/core/err.h:
