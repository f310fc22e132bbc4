build/tests/support/testutil.o: tests/support/testutil.c \
 tests/support/testutil.h
tests/support/testutil.h:
