build/tools/hf-fetch/main.o: tools/hf-fetch/main.c lib/core/afile.h \
 lib/core/err.h lib/core/cli.h lib/hub/hub.h
lib/core/afile.h:
lib/core/err.h:
lib/core/cli.h:
lib/hub/hub.h:
