build/lib/tok/tok_bpe.o: lib/tok/tok_bpe.c lib/tok/tok_int.h \
 lib/tok/tok.h lib/core/err.h
lib/tok/tok_int.h:
lib/tok/tok.h:
lib/core/err.h:
