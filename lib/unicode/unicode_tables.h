/* unicode_tables.h: the generated tables behind unicode.h (private). */
#ifndef TITAN_UNICODE_TABLES_H
#define TITAN_UNICODE_TABLES_H

#include <stddef.h>
#include <stdint.h>

typedef struct uni_decomp_entry {
	uint32_t cp, off, len;
} uni_decomp_entry;

typedef struct uni_comp_entry {
	uint32_t first, second, composite;
} uni_comp_entry;

extern const char uni_version[];
extern const uint16_t uni_props_stage1[0x1100];
extern const uint8_t uni_props_stage2[];
extern const uint16_t uni_ccc_stage1[0x1100];
extern const uint8_t uni_ccc_stage2[];
extern const uint32_t uni_decomp_pool[];
extern const uni_decomp_entry uni_decomp[];
extern const size_t uni_n_decomp;
extern const uni_comp_entry uni_comp[];
extern const size_t uni_n_comp;
typedef struct uni_lower_entry {
	uint32_t cp, lower[2]; /* lower[1] 0 when the mapping is one character */
} uni_lower_entry;

extern const uint32_t uni_fold_new[][2];
extern const size_t uni_n_fold_new;
/* unicode_seg_tables.c (scripts/gen_unicode_seg.py): per code point, bits 0-3
 * Grapheme_Cluster_Break, bit 4 Extended_Pictographic, bits 5-6 InCB. */
extern const uint16_t uni_seg_stage1[0x1100];
extern const uint8_t uni_seg_stage2[];
extern const uni_lower_entry uni_lower_map[];
extern const size_t uni_n_lower;

#endif
