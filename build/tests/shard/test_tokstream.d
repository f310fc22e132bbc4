build/tests/shard/test_tokstream.o: tests/shard/test_tokstream.c \
 lib/core/crc32c.h lib/tokstream/tokstream.h lib/core/err.h
lib/core/crc32c.h:
lib/tokstream/tokstream.h:
lib/core/err.h:
