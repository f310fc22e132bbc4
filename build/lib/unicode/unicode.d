build/lib/unicode/unicode.o: lib/unicode/unicode.c lib/unicode/unicode.h \
 lib/core/err.h lib/unicode/unicode_tables.h
lib/unicode/unicode.h:
lib/core/err.h:
lib/unicode/unicode_tables.h:
