build/tests/tok/test_tok_corpus.o: tests/tok/test_tok_corpus.c \
 lib/core/mfile.h lib/core/err.h lib/core/sha256.h lib/tok/tok.h
lib/core/mfile.h:
lib/core/err.h:
lib/core/sha256.h:
lib/tok/tok.h:
