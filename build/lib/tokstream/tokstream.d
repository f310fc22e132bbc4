build/lib/tokstream/tokstream.o: lib/tokstream/tokstream.c \
 lib/tokstream/tokstream.h lib/core/err.h lib/core/crc32c.h
lib/tokstream/tokstream.h:
lib/core/err.h:
lib/core/crc32c.h:
