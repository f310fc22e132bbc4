build/asan/lib/core/crc32c.o: lib/core/crc32c.c lib/core/crc32c.h
lib/core/crc32c.h:
