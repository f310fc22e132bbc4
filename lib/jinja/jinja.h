/* jinja.h: chat templates, the Jinja subset HF tokenizer_config.json's
 * chat_template uses, rendered as Python's jinja2 renders them in the
 * environment torchtitan 0.3.0 (components/tokenizer.py) and HF transformers
 * make: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
 * extensions=[loopcontrols]), default Undefined, keep_trailing_newline off,
 * raise_exception() and a tojson filter that is json.dumps(ensure_ascii=False).
 *
 * What parses (anything else is refused at parse time with its line and
 * column, never rendered differently):
 *   text, {{ expr }}, {# comment #}, the -/+ whitespace modifiers;
 *   {% if %} {% elif %} {% else %} {% endif %};
 *   {% for x in e %} / {% for k, v in e %} [if cond] ... [{% else %}] {% endfor %}
 *   with loop.index, index0, revindex, revindex0, first, last, length;
 *   {% set x = e %}, {% set ns.attr = e %}, {% break %}, {% continue %};
 *   expressions: literals (strings with Python escapes, ints, floats, true/
 *   false/none in either case, lists, dicts, tuples), names, .attr, [i],
 *   [a:b:c] slices, calls, filters (|f, |f(args)), tests (is [not] t),
 *   unary - + not, ** * / // % + - ~, comparisons (chained), in, not in,
 *   and, or, a if c else b;
 *   functions raise_exception(msg), namespace(k=v, ...), range(...);
 *   string methods startswith endswith split strip lstrip rstrip upper lower
 *   replace title capitalize; dict methods items keys values get;
 *   filters trim length count tojson string lower upper join default/d
 *   first last list items reverse replace int float abs capitalize title;
 *   tests defined undefined none string number integer float boolean true
 *   false mapping sequence iterable even odd eq/equalto/==.
 * Strings are UTF-8; length, slicing, indexing, strip and trim count code
 * points and use Python's whitespace.
 *
 * Limits: nesting 256, output 256 MiB, values 256 MiB, 10^6 loop iterations per render
 * (errors, not crashes, so that fuzzing finds nothing but wrong templates).
 *
 * Errors: one line, "chat template line L col C: what", L and C counted from 1
 * in the template text. */
#ifndef TITAN_JINJA_H
#define TITAN_JINJA_H

#include <jansson.h>
#include <stddef.h>

#include "core/err.h"

typedef struct jinja_tpl jinja_tpl;

/* Parse n bytes of template text.  NULL on error (*err says where). */
jinja_tpl *jinja_parse(const char *src, size_t n, titan_err *err);
void jinja_free(jinja_tpl *t);

/* Render with the variables of the JSON object vars (e.g. messages,
 * add_generation_prompt, bos_token; absent ones are undefined).  *out is
 * malloc'd, NUL-terminated, *n bytes long; the caller frees it. */
int jinja_render(const jinja_tpl *t, const json_t *vars, char **out, size_t *n, titan_err *err);

#endif
