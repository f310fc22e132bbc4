build/lib/unicode/unicode_tables.o: lib/unicode/unicode_tables.c \
 lib/unicode/unicode_tables.h
lib/unicode/unicode_tables.h:
