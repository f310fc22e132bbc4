build/asan/tests/core/test_json.o: tests/core/test_json.c \
 lib/core/afile.h lib/core/err.h lib/core/json.h lib/core/mfile.h
lib/core/afile.h:
lib/core/err.h:
lib/core/json.h:
lib/core/mfile.h:
