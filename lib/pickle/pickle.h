/* pickle.h: a restricted Python unpickler and a pickle writer.
 *
 * The reader runs the pickle virtual machine (protocols 0-5) into a tree of
 * plain values.  It never runs code: a GLOBAL is accepted only when the caller's
 * allowlist names it, and REDUCE / NEWOBJ / BUILD on an allowed global only
 * record the call (class, arguments, state) as a PK_OBJ node for the caller to
 * interpret.  Anything else (an unknown global, an unsupported opcode, a
 * malformed or truncated stream, limits exceeded) is an error naming the opcode
 * and its offset.  Two reductions are folded while reading because every torch
 * pickle uses them: collections.OrderedDict() becomes a PK_DICT and
 * _codecs.encode(str, "latin1") becomes PK_BYTES (how protocol 2 spells bytes).
 *
 * All nodes live in an arena freed at once by pk_free(); memo references share
 * nodes, so the tree is a DAG (and may even hold cycles): walkers must bound
 * their depth (PK_MAX_DEPTH). */
#ifndef TITAN_PICKLE_H
#define TITAN_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define PK_MAX_DEPTH 64

typedef enum pk_kind {
	PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_BYTES,
	PK_TUPLE, PK_LIST, PK_DICT,
	PK_GLOBAL,  /* module, name */
	PK_OBJ,     /* cls(args) [+ state]: REDUCE, NEWOBJ, with BUILD's state */
	PK_PERSID,  /* a persistent id: args[0] is the id value */
} pk_kind;

typedef struct pk_val pk_val;
struct pk_val {
	pk_kind kind;
	int64_t i;        /* PK_BOOL, PK_INT */
	double f;         /* PK_FLOAT */
	char *s;          /* PK_STR (UTF-8, NUL-terminated), PK_BYTES; PK_GLOBAL: module */
	size_t len;       /* bytes in s */
	char *name;       /* PK_GLOBAL: attribute name */
	pk_val **items;   /* TUPLE, LIST: n items; DICT: keys and values interleaved */
	size_t n;         /* TUPLE, LIST: items; DICT: pairs */
	size_t cap;
	pk_val *cls;      /* PK_OBJ: a PK_GLOBAL */
	pk_val *args;     /* PK_OBJ: a PK_TUPLE; PK_PERSID: the id */
	pk_val *state;    /* PK_OBJ: BUILD's argument, or NULL */
	int newobj;       /* PK_OBJ: made by NEWOBJ rather than REDUCE */
	uint32_t scratch; /* 0 when made; a walker of the DAG may keep per-node
	                     results here (one walker at a time per arena) so that
	                     it visits a shared node once */
};

typedef struct pk_arena pk_arena;

/* Globals the reader accepts: "module name" strings, NULL-terminated. */
typedef struct pk_allow {
	const char *const *globals;
} pk_allow;

/* Unpickle buf.  On success *out is the root value and *arena owns every node
 * (free it with pk_free even on failure; it may be NULL then). */
int pk_load(const uint8_t *buf, size_t n, const pk_allow *allow, pk_val **out,
	    pk_arena **arena, titan_err *err);
void pk_free(pk_arena *a);

/* Look-ups on the tree; NULL when absent or of another kind. */
pk_val *pk_dict_get(const pk_val *dict, const char *key);
int pk_is_global(const pk_val *v, const char *module, const char *name);
/* The OBJ's class is module.name (e.g. "torch", "Size"). */
int pk_obj_is(const pk_val *v, const char *module, const char *name);
/* Python-like repr into buf (depth-bounded, truncated to cap). */
void pk_repr(const pk_val *v, char *buf, size_t cap);

/* Builders for values the caller creates (e.g. to hand to pk_write). */
pk_arena *pk_arena_new(void);
pk_val *pk_new(pk_arena *a, pk_kind k);
pk_val *pk_int(pk_arena *a, int64_t v);
pk_val *pk_float(pk_arena *a, double v);
pk_val *pk_bool(pk_arena *a, int v);
pk_val *pk_str(pk_arena *a, const char *s);
pk_val *pk_bytes(pk_arena *a, const void *p, size_t n);
pk_val *pk_global(pk_arena *a, const char *module, const char *name);
/* Append to a TUPLE or LIST; put into a DICT (keys kept in insertion order).
 * Return -1 on allocation failure. */
int pk_append(pk_arena *a, pk_val *seq, pk_val *v);
int pk_dict_set(pk_arena *a, pk_val *dict, pk_val *key, pk_val *v);

/* Writing: a growing byte buffer. */
typedef struct pk_buf {
	uint8_t *p;
	size_t n, cap;
	int oom;
} pk_buf;

/* Serialise v with the given protocol (2..4): PROTO, the value, STOP.  Bytes
 * are written as _codecs.encode(latin1) under protocol 2 (as torch.save does)
 * and as BINBYTES from 3.  OBJ nodes are written as cls + args + REDUCE or
 * NEWOBJ, then state + BUILD.  The caller frees b->p. */
int pk_dump(pk_buf *b, const pk_val *v, int protocol, titan_err *err);

#endif
