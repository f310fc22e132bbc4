build/lib/ptzip/dtype.o: lib/ptzip/dtype.c lib/ptzip/ptzip.h \
 lib/core/err.h lib/pickle/pickle.h
lib/ptzip/ptzip.h:
lib/core/err.h:
lib/pickle/pickle.h:
