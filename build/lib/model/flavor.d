build/lib/model/flavor.o: lib/model/flavor.c lib/model/flavor.h
lib/model/flavor.h:
