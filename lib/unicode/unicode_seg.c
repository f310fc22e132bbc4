/* unicode_seg.c: extended grapheme clusters (UAX #29) and per-character
 * lowercase, on the tables scripts/gen_unicode_seg.py generates. */
#include "unicode/unicode.h"

#include "unicode/unicode_tables.h"

enum gcb {
	GCB_OTHER, GCB_CR, GCB_LF, GCB_CONTROL, GCB_EXTEND, GCB_ZWJ, GCB_RI, GCB_PREPEND,
	GCB_SPACINGMARK, GCB_L, GCB_V, GCB_T, GCB_LV, GCB_LVT,
};
enum { SEG_EXTPICT = 0x10 };
enum incb { INCB_NONE, INCB_LINKER, INCB_CONSONANT, INCB_EXTEND };

static uint8_t seg_props(uint32_t cp)
{
	if (cp >= 0x110000)
		return GCB_OTHER;
	return uni_seg_stage2[((size_t)uni_seg_stage1[cp >> 8] << 8) | (cp & 0xff)];
}

/* The rules' memory of what came before the boundary being judged. */
typedef struct seg_state {
	int emoji; /* 1: ExtPict Extend* seen; 2: then a ZWJ (GB11) */
	int incb;  /* 1: an InCB consonant then [Extend Linker]*; 2: with a linker (GB9c) */
	int ri;    /* regional indicators in a row (GB12, GB13) */
} seg_state;

static void seg_step(seg_state *st, uint8_t p)
{
	enum gcb g = (enum gcb)(p & 0x0f);
	enum incb c = (enum incb)(p >> 5 & 3);
	if (p & SEG_EXTPICT)
		st->emoji = 1;
	else if (st->emoji == 1 && g == GCB_EXTEND)
		st->emoji = 1;
	else if (st->emoji == 1 && g == GCB_ZWJ)
		st->emoji = 2;
	else
		st->emoji = 0;
	if (c == INCB_CONSONANT)
		st->incb = 1;
	else if (st->incb && c == INCB_LINKER)
		st->incb = 2;
	else if (!(st->incb && c == INCB_EXTEND))
		st->incb = 0;
	st->ri = g == GCB_RI ? st->ri + 1 : 0;
}

/* Whether there is no break between a character with properties a and the
 * next, b, given what came before (st, a included). */
static bool seg_joins(const seg_state *st, uint8_t a, uint8_t b)
{
	enum gcb ga = (enum gcb)(a & 0x0f), gb = (enum gcb)(b & 0x0f);
	if (ga == GCB_CR && gb == GCB_LF)
		return true; /* GB3 */
	if (ga == GCB_CONTROL || ga == GCB_CR || ga == GCB_LF || gb == GCB_CONTROL ||
	    gb == GCB_CR || gb == GCB_LF)
		return false; /* GB4, GB5 */
	if (ga == GCB_L && (gb == GCB_L || gb == GCB_V || gb == GCB_LV || gb == GCB_LVT))
		return true; /* GB6 */
	if ((ga == GCB_LV || ga == GCB_V) && (gb == GCB_V || gb == GCB_T))
		return true; /* GB7 */
	if ((ga == GCB_LVT || ga == GCB_T) && gb == GCB_T)
		return true; /* GB8 */
	if (gb == GCB_EXTEND || gb == GCB_ZWJ || gb == GCB_SPACINGMARK || ga == GCB_PREPEND)
		return true; /* GB9, GB9a, GB9b */
	if (st->incb == 2 && (b >> 5 & 3) == INCB_CONSONANT)
		return true; /* GB9c */
	if (ga == GCB_ZWJ && st->emoji == 2 && (b & SEG_EXTPICT))
		return true; /* GB11 */
	if (ga == GCB_RI && gb == GCB_RI && st->ri % 2 == 1)
		return true; /* GB12, GB13 */
	return false;    /* GB999 */
}

size_t uni_grapheme_end(const uint8_t *s, size_t n, size_t i)
{
	uint32_t cp;
	i += uni_utf8_decode(s + i, n - i, &cp);
	uint8_t a = seg_props(cp);
	seg_state st = {0};
	seg_step(&st, a);
	while (i < n) {
		size_t l = uni_utf8_decode(s + i, n - i, &cp);
		uint8_t b = seg_props(cp);
		if (!seg_joins(&st, a, b))
			break;
		seg_step(&st, b);
		a = b;
		i += l;
	}
	return i;
}

int uni_lower(uint32_t cp, uint32_t out[2])
{
	size_t lo = 0, hi = uni_n_lower;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (uni_lower_map[mid].cp < cp)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < uni_n_lower && uni_lower_map[lo].cp == cp) {
		out[0] = uni_lower_map[lo].lower[0];
		out[1] = uni_lower_map[lo].lower[1];
		return out[1] ? 2 : 1;
	}
	out[0] = cp;
	return 1;
}
