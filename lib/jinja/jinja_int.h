/* Private to lib/jinja: the syntax tree jinja_parse.c builds and
 * jinja_eval.c walks, the arena both allocate from, and the values. */
#ifndef TITAN_JINJA_INT_H
#define TITAN_JINJA_INT_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "jinja/jinja.h"

#define JINJA_MAX_DEPTH 256

/* A bump allocator: everything of a template (or of one render) is freed at
 * once. */
typedef struct jarena_block jarena_block;
typedef struct jarena {
	jarena_block *head;
	size_t held;  /* bytes of its blocks */
	size_t limit; /* most bytes it may hold; 0: no limit */
} jarena;
/* zeroed; NULL when memory runs out or the arena would pass its limit */
void *jarena_alloc(jarena *a, size_t n);
void jarena_free(jarena *a);

/* The one shape of every error: "chat template line L col C: what"; -1. */
int jinja_error(titan_err *e, int line, int col, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* ---- values */

typedef enum {
	JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
	JV_NS,    /* namespace(): a dict whose attributes `set ns.x` may change */
} jv_kind;

typedef struct jlist jlist;
typedef struct jdict jdict;

typedef struct jv {
	jv_kind k;
	union {
		int b;
		int64_t i;
		double f;
		struct {
			const char *s;
			size_t n;
		} str;
		jlist *list;
		jdict *dict; /* JV_DICT and JV_NS */
	} u;
	const char *name; /* JV_UNDEF: what was looked up, for messages (may be NULL) */
} jv;

struct jlist {
	jv *v;
	size_t n, cap;
	int tuple; /* printed as Python prints a tuple: (a, b) */
};

struct jdict {
	jv *keys, *vals; /* insertion order */
	size_t n, cap;
};

/* ---- syntax */

typedef enum {
	E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NEG, E_POS, E_NOT,
	E_AND, E_OR, E_BIN, E_CMP, E_COND, E_LIST, E_DICT,
} jexpr_kind;

typedef struct jexpr jexpr;
struct jexpr {
	jexpr_kind k;
	int line, col;
	jv lit;                /* E_LIT */
	const char *name;      /* E_NAME, E_ATTR, E_FILTER, E_TEST (and kwargs' names) */
	const char *op;        /* E_BIN: "+" "-" "*" "/" "//" "%" "**" "~" */
	jexpr *a, *b, *c, *d;  /* operands: object, index / slice parts, condition... */
	jexpr **args;          /* E_CALL, E_FILTER, E_TEST: positional then keyword */
	const char **kw;       /* per arg: its keyword, or NULL for a positional one */
	int n_args;
	int negate;            /* E_TEST: is not */
	int tuple;             /* E_LIST written (a, b) */
	jexpr **items;         /* E_LIST, E_DICT (keys), E_CMP (operands) */
	jexpr **vals;          /* E_DICT values */
	const char **cmp_ops;  /* E_CMP: n_items - 1 of "==" "!=" "<" "<=" ">" ">=" "in" "notin" */
	int n_items;
};

typedef enum { S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_BREAK, S_CONTINUE } jstmt_kind;

typedef struct jstmt jstmt;
typedef struct jbody {
	jstmt **v;
	int n;
} jbody;

struct jstmt {
	jstmt_kind k;
	int line, col;
	const char *text;      /* S_TEXT */
	size_t len;
	jexpr *e;              /* S_OUT, S_SET value, S_IF condition, S_FOR iterable */
	jexpr *cond;           /* S_FOR's filter, or NULL */
	const char *target[2]; /* S_FOR: one or two names; S_SET: name */
	int n_target;
	const char *attr;      /* S_SET ns.attr: the attribute, target[0] the namespace */
	jbody body, orelse;    /* S_IF: then / elif-else chain; S_FOR: body / else */
};

struct jinja_tpl {
	jarena arena;
	jbody body;
};

/* jinja_eval.c's helper jinja_parse.c needs for literals. */
jv jv_int(int64_t i);

/* Python's whitespace (str.isspace) on UTF-8: bytes of leading whitespace,
 * and bytes left once trailing whitespace is cut. */
size_t jinja_py_lstrip_len(const char *p, size_t n);
size_t jinja_py_rstrip_len(const char *p, size_t n);

#endif
