build/tests/tok/test_tok.o: tests/tok/test_tok.c lib/tok/tok.h \
 lib/core/err.h lib/unicode/unicode.h tests/tok/tok_vectors.h
lib/tok/tok.h:
lib/core/err.h:
lib/unicode/unicode.h:
tests/tok/tok_vectors.h:
