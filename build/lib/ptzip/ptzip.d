build/lib/ptzip/ptzip.o: lib/ptzip/ptzip.c lib/ptzip/ptzip.h \
 lib/core/err.h lib/pickle/pickle.h lib/ptzip/zipcrc.h
lib/ptzip/ptzip.h:
lib/core/err.h:
lib/pickle/pickle.h:
lib/ptzip/zipcrc.h:
