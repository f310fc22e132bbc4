/* sha256.h: SHA-256 through OpenSSL's libcrypto (Hub LFS etags, fingerprints). */
#ifndef TITAN_SHA256_H
#define TITAN_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct sha256_ctx {
	void *md; /* EVP_MD_CTX */
} sha256_ctx;

int sha256_init(sha256_ctx *c, titan_err *err);
void sha256_update(sha256_ctx *c, const void *buf, size_t n);
/* Write the 32-byte digest and free the context. */
void sha256_final(sha256_ctx *c, uint8_t out[32]);
void sha256_free(sha256_ctx *c);
/* One-shot digest of buf. */
int sha256(const void *buf, size_t n, uint8_t out[32], titan_err *err);
/* 64 lowercase hex digits and a NUL. */
void sha256_hex(const uint8_t digest[32], char hex[65]);
/* Back from 64 hex digits (either case; nothing else, no NULL): 0, or -1. */
int sha256_unhex(const char *hex, uint8_t digest[32]);
/* Digest of a whole file, as hex. */
int sha256_file_hex(const char *path, char hex[65], titan_err *err);

#endif
