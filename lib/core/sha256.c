#include "core/sha256.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

int sha256_init(sha256_ctx *c, titan_err *err)
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	if (md == NULL)
		return err_set(err, "sha256: out of memory");
	if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(md);
		return err_set(err, "sha256: libcrypto refused to initialise");
	}
	c->md = md;
	return 0;
}

void sha256_update(sha256_ctx *c, const void *buf, size_t n)
{
	EVP_DigestUpdate(c->md, buf, n);
}

void sha256_final(sha256_ctx *c, uint8_t out[32])
{
	unsigned len = 32;
	EVP_DigestFinal_ex(c->md, out, &len);
	sha256_free(c);
}

void sha256_free(sha256_ctx *c)
{
	EVP_MD_CTX_free(c->md);
	c->md = NULL;
}

int sha256(const void *buf, size_t n, uint8_t out[32], titan_err *err)
{
	sha256_ctx c;
	if (sha256_init(&c, err) != 0)
		return -1;
	sha256_update(&c, buf, n);
	sha256_final(&c, out);
	return 0;
}

void sha256_hex(const uint8_t d[32], char hex[65])
{
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		hex[2 * i] = digits[d[i] >> 4];
		hex[2 * i + 1] = digits[d[i] & 15];
	}
	hex[64] = '\0';
}

static int hex_digit(char c)
{
	return c >= '0' && c <= '9' ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
				    : -1;
}

int sha256_unhex(const char *hex, uint8_t d[32])
{
	if (hex == NULL || strlen(hex) != 64)
		return -1;
	for (int i = 0; i < 32; i++) {
		int hi = hex_digit(hex[2 * i]), lo = hex_digit(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		d[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

int sha256_file_hex(const char *path, char hex[65], titan_err *err)
{
	FILE *fp = fopen(path, "rb");
	if (fp == NULL)
		return err_errno(err, "%s", path);
	sha256_ctx c;
	if (sha256_init(&c, err) != 0) {
		fclose(fp);
		return -1;
	}
	static _Thread_local unsigned char buf[1 << 16];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, fp)) > 0)
		sha256_update(&c, buf, n);
	int bad = ferror(fp);
	fclose(fp);
	uint8_t d[32];
	sha256_final(&c, d);
	if (bad)
		return err_set(err, "%s: read error", path);
	sha256_hex(d, hex);
	return 0;
}
