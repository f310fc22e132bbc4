build/lib/hub/parse.o: lib/hub/parse.c lib/hub/hub.h lib/core/err.h
lib/hub/hub.h:
lib/core/err.h:
