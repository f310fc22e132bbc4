build/lib/hub/download.o: lib/hub/download.c lib/hub/hub_private.h \
 lib/core/cli.h lib/hub/hub.h lib/core/err.h lib/core/afile.h \
 lib/core/sha256.h
lib/hub/hub_private.h:
lib/core/cli.h:
lib/hub/hub.h:
lib/core/err.h:
lib/core/afile.h:
lib/core/sha256.h:
