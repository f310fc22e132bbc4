build/lib/ptzip/zipcrc.o: lib/ptzip/zipcrc.c lib/ptzip/zipcrc.h
lib/ptzip/zipcrc.h:
