build/lib/tok/tok.o: lib/tok/tok.c lib/tok/tok_int.h lib/tok/tok.h \
 lib/core/err.h lib/tok/tok_split_int.h lib/unicode/unicode.h
lib/tok/tok_int.h:
lib/tok/tok.h:
lib/core/err.h:
lib/tok/tok_split_int.h:
lib/unicode/unicode.h:
