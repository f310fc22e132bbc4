build/lib/textin/textin.o: lib/textin/textin.c lib/textin/textin_impl.h \
 lib/textin/textin.h lib/core/err.h
lib/textin/textin_impl.h:
lib/textin/textin.h:
lib/core/err.h:
