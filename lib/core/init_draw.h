/* init_draw.h: init_fill's normal draws in blocks, in vector form (private
 * to lib/core and its tests).
 *
 * A block of Box-Muller normals from their uniforms, with a log and a cos the
 * compiler vectorises at each instruction-set level (core/cpu_hot.h), each
 * within 2^-51 of the exact value, and for each the verdict of the band: all
 * ones where every double within INIT_DRAW_BAND (relative) of it rounds to
 * the same float and lies on the same side of the cut, so that libm's value
 * gives the same float and the same verdict (init_fill.c).  The sanitizer
 * build compiles this file without the sanitizers and at -O2 (the Makefile):
 * it touches only its caller's arrays of INIT_DRAW_BLOCK elements, in a fixed
 * loop, and their checks kept it scalar, slower than libm's calls. */
#ifndef TITAN_INIT_DRAW_H
#define TITAN_INIT_DRAW_H

#include <stdint.h>

#define INIT_DRAW_BLOCK 64
#define INIT_DRAW_BAND 0x1p-40

/* x[j] = std * sqrt(-2 log u1[j]) cos(2 pi u2[j]) for j < INIT_DRAW_BLOCK, and
 * sure[j] all ones where the band decides x[j]'s float and, when lo < hi, its
 * side of the cut [lo, hi]; else 0. */
void init_draw_normals(const double *restrict u1, const double *restrict u2, double std,
		       double lo, double hi, double *restrict x, uint64_t *restrict sure);

#endif
