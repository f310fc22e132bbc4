build/lib/safetensors/safetensors.o: lib/safetensors/safetensors.c \
 lib/safetensors/safetensors.h lib/core/err.h lib/core/mfile.h \
 lib/ptzip/ptzip.h lib/pickle/pickle.h lib/core/afile.h
lib/safetensors/safetensors.h:
lib/core/err.h:
lib/core/mfile.h:
lib/ptzip/ptzip.h:
lib/pickle/pickle.h:
lib/core/afile.h:
