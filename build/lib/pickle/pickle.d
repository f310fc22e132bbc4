build/lib/pickle/pickle.o: lib/pickle/pickle.c lib/pickle/pickle.h \
 lib/core/err.h
lib/pickle/pickle.h:
lib/core/err.h:
