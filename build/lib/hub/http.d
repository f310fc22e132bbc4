build/lib/hub/http.o: lib/hub/http.c lib/hub/hub_private.h lib/core/cli.h \
 lib/hub/hub.h lib/core/err.h
lib/hub/hub_private.h:
lib/core/cli.h:
lib/hub/hub.h:
lib/core/err.h:
