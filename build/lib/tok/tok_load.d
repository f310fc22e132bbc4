build/lib/tok/tok_load.o: lib/tok/tok_load.c lib/core/mfile.h \
 lib/core/err.h lib/core/sha256.h lib/tok/tok_int.h lib/tok/tok.h \
 lib/tok/tok_split_int.h lib/unicode/unicode.h
lib/core/mfile.h:
lib/core/err.h:
lib/core/sha256.h:
lib/tok/tok_int.h:
lib/tok/tok.h:
lib/tok/tok_split_int.h:
lib/unicode/unicode.h:
