build/lib/hub/cache.o: lib/hub/cache.c lib/hub/hub.h lib/core/err.h \
 lib/core/afile.h
lib/hub/hub.h:
lib/core/err.h:
lib/core/afile.h:
