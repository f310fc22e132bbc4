build/lib/textin/json.o: lib/textin/json.c lib/textin/textin_impl.h \
 lib/textin/textin.h lib/core/err.h
lib/textin/textin_impl.h:
lib/textin/textin.h:
lib/core/err.h:
