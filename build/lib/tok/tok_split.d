build/lib/tok/tok_split.o: lib/tok/tok_split.c lib/tok/tok_split_int.h \
 lib/tok/tok.h lib/core/err.h lib/unicode/unicode.h
lib/tok/tok_split_int.h:
lib/tok/tok.h:
lib/core/err.h:
lib/unicode/unicode.h:
