/* crc32c.h: CRC-32C (Castagnoli), as used by shards, checkpoints and
 * TensorBoard records.  crc32c(0, "123456789", 9) == 0xE3069283. */
#ifndef TITAN_CRC32C_H
#define TITAN_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extend crc (0 to start) over buf; uses the CRC32C instruction when the CPU
 * has it (SSE4.2 on x86-64, ARMv8's crc32c on aarch64) and core/cpu_isa's
 * level allows, a slicing table otherwise.  Both give the same value. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t n);
/* The portable table version, kept as the reference for tests. */
uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t n);
/* Whether the processor has the CRC32C instruction (crc32c() uses it unless
 * TITAN_CPU_ISA forces a level below). */
int crc32c_hw_available(void);
/* TensorBoard's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
uint32_t crc32c_mask(uint32_t crc);

#endif
