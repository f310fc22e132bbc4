build/tests/hub/test_hub.o: tests/hub/test_hub.c lib/hub/hub.h \
 lib/core/err.h
lib/hub/hub.h:
lib/core/err.h:
