/* cuBLASLt loaded on first use (cublaslt.h). */
#include "gpu/cublaslt.h"

#ifdef TITAN_CUDA
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)
#define LT_SONAME "libcublasLt.so." STR(CUBLAS_VER_MAJOR)

static struct {
	pthread_once_t once;
	gpu_lt_api api;
	int ok;
	char why[400];
} g = {.once = PTHREAD_ONCE_INIT};

/* One symbol into *slot; 0, or -1 with g.why naming it. */
static int sym(void *lib, const char *name, void **slot)
{
	dlerror();
	*slot = dlsym(lib, name);
	if (*slot != NULL)
		return 0;
	const char *d = dlerror();
	snprintf(g.why, sizeof g.why, "%s has no %s (%s)", LT_SONAME, name, d ? d : "null");
	return -1;
}

static void load(void)
{
	void *lib = dlopen(LT_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		const char *d = dlerror();
		snprintf(g.why, sizeof g.why, "cannot load %s (the CUDA backend's matrix products): "
			 "%s", LT_SONAME, d ? d : "not found");
		return;
	}
	/* dlsym returns an object pointer; POSIX guarantees it converts to a
	 * function pointer, which memcpy through void ** respects in C. */
	static const struct {
		const char *name;
		size_t off;
	} fns[] = {
#define FN(f) {"cublasLt" #f, offsetof(gpu_lt_api, f)}
		FN(Create), FN(Destroy), FN(GetStatusString), FN(Matmul), FN(MatmulAlgoGetHeuristic),
		FN(MatmulDescCreate), FN(MatmulDescDestroy), FN(MatmulDescSetAttribute),
		FN(MatmulPreferenceCreate), FN(MatmulPreferenceDestroy),
		FN(MatmulPreferenceSetAttribute), FN(MatrixLayoutCreate), FN(MatrixLayoutDestroy),
#undef FN
	};
	for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
		void *p;
		if (sym(lib, fns[i].name, &p) != 0) {
			dlclose(lib);
			return;
		}
		memcpy((char *)&g.api + fns[i].off, &p, sizeof p);
	}
	g.ok = 1; /* the library stays loaded for the process's life */
}

const gpu_lt_api *gpu_lt_load(titan_err *e)
{
	pthread_once(&g.once, load);
	if (g.ok)
		return &g.api;
	err_set(e, "cuBLASLt: %s", g.why);
	return NULL;
}

const gpu_lt_api *gpu_lt(void)
{
	return &g.api;
}
#endif
