build/tests/core/test_json.o: tests/core/test_json.c \
 tests/core/../support/testutil.h lib/core/afile.h lib/core/err.h \
 lib/core/json.h lib/core/mfile.h
tests/core/../support/testutil.h:
lib/core/afile.h:
lib/core/err.h:
lib/core/json.h:
lib/core/mfile.h:
