build/tests/core/test_progress.o: tests/core/test_progress.c \
 lib/core/err.h lib/core/progress.h
lib/core/err.h:
lib/core/progress.h:
