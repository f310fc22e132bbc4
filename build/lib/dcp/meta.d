build/lib/dcp/meta.o: lib/dcp/meta.c lib/dcp/dcp_priv.h lib/core/mfile.h \
 lib/core/err.h lib/dcp/dcp.h lib/pickle/pickle.h lib/ptzip/ptzip.h
lib/dcp/dcp_priv.h:
lib/core/mfile.h:
lib/core/err.h:
lib/dcp/dcp.h:
lib/pickle/pickle.h:
lib/ptzip/ptzip.h:
