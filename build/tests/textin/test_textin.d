build/tests/textin/test_textin.o: tests/textin/test_textin.c \
 lib/textin/textin.h lib/core/err.h
lib/textin/textin.h:
lib/core/err.h:
