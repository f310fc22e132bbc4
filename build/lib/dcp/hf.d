build/lib/dcp/hf.o: lib/dcp/hf.c lib/core/afile.h lib/core/err.h \
 lib/dcp/dcp_priv.h lib/core/mfile.h lib/dcp/dcp.h lib/pickle/pickle.h \
 lib/ptzip/ptzip.h lib/safetensors/safetensors.h
lib/core/afile.h:
lib/core/err.h:
lib/dcp/dcp_priv.h:
lib/core/mfile.h:
lib/dcp/dcp.h:
lib/pickle/pickle.h:
lib/ptzip/ptzip.h:
lib/safetensors/safetensors.h:
