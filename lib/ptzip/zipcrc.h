/* zipcrc.h: private to lib/ptzip and lib/safetensors: the zip CRC-32. */
#ifndef TITAN_ZIPCRC_H
#define TITAN_ZIPCRC_H

#include <stddef.h>
#include <stdint.h>

/* Extend crc (0 to start) over buf; zipcrc(0, "123456789", 9) == 0xCBF43926. */
uint32_t zipcrc(uint32_t crc, const void *buf, size_t n);
uint32_t zipcrc_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

#endif
