build/tests/core/test_core.o: tests/core/test_core.c \
 tests/core/../support/testutil.h lib/core/afile.h lib/core/err.h \
 lib/core/crc32c.h lib/core/mfile.h lib/core/sha256.h
tests/core/../support/testutil.h:
lib/core/afile.h:
lib/core/err.h:
lib/core/crc32c.h:
lib/core/mfile.h:
lib/core/sha256.h:
