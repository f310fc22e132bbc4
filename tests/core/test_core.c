/* Unit tests of lib/core: errors, atomic files, CRC32C, SHA-256, mmap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../support/testutil.h"
#include "core/afile.h"
#include "core/bigmem.h"
#include "core/crc32c.h"
#include "core/err.h"
#include "core/mfile.h"
#include "core/sha256.h"

static void crc32c_matches_standard_check_value(void **state)
{
	(void)state;
	assert_int_equal(crc32c(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(crc32c_sw(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(crc32c(0, "", 0), 0);
	/* RFC 3720 B.4: 32 bytes of zeros, of 0xff. */
	unsigned char z[32] = {0}, f[32];
	memset(f, 0xff, sizeof f);
	assert_int_equal(crc32c(0, z, 32), 0x8A9136AAu);
	assert_int_equal(crc32c(0, f, 32), 0x62A8AB43u);
}

static void crc32c_hw_and_table_agree_on_every_length_and_split(void **state)
{
	(void)state;
	unsigned char buf[1000];
	uint32_t x = 12345; /* fixed seed */
	for (size_t i = 0; i < sizeof buf; i++) {
		x = x * 1103515245u + 12345u;
		buf[i] = (unsigned char)(x >> 16);
	}
	for (size_t n = 0; n < sizeof buf; n += 7) {
		uint32_t whole = crc32c_sw(0, buf, n);
		assert_int_equal(crc32c(0, buf, n), whole);
		size_t cut = n / 3;
		assert_int_equal(crc32c(crc32c(0, buf, cut), buf + cut, n - cut), whole);
	}
}

/* Past 3 x 4096 bytes the hardware path runs three interleaved streams and
 * joins them; the table version is the reference. */
static void crc32c_interleaved_streams_agree_with_table(void **state)
{
	(void)state;
	static unsigned char buf[3 * 4096 * 3 + 123];
	uint32_t x = 777; /* fixed seed */
	for (size_t i = 0; i < sizeof buf; i++) {
		x = x * 1664525u + 1013904223u;
		buf[i] = (unsigned char)(x >> 24);
	}
	const size_t lens[] = {3 * 4096 - 1, 3 * 4096, 3 * 4096 + 1, 2 * 3 * 4096 + 8,
			       sizeof buf - 1, sizeof buf};
	for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
		for (size_t off = 0; off < 3; off++) {
			size_t n = lens[k] - off;
			uint32_t want = crc32c_sw(0x12345678u, buf + off, n);
			assert_int_equal(crc32c(0x12345678u, buf + off, n), want);
		}
	/* Split anywhere, the CRC of the whole is the same. */
	uint32_t whole = crc32c_sw(0, buf, sizeof buf);
	for (size_t cut = 0; cut < sizeof buf; cut += 4099)
		assert_int_equal(crc32c(crc32c(0, buf, cut), buf + cut, sizeof buf - cut), whole);
}

static void crc32c_mask_matches_tensorflow(void **state)
{
	(void)state;
	/* TensorBoard's first record for wall_time 1.7e9 (formats.md):
	 * length 0x18 as u64 LE -> masked crc a37f4b22 (bytes, LE). */
	unsigned char len[8] = {0x18, 0, 0, 0, 0, 0, 0, 0};
	uint32_t m = crc32c_mask(crc32c(0, len, 8));
	assert_int_equal(m, 0x224b7fa3u);
}

static void sha256_matches_fips_vectors(void **state)
{
	(void)state;
	uint8_t d[32];
	char hex[65];
	assert_int_equal(sha256("abc", 3, d, NULL), 0);
	sha256_hex(d, hex);
	assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	assert_int_equal(sha256("", 0, d, NULL), 0);
	sha256_hex(d, hex);
	assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

/* Only 64 hex digits read back: sscanf's %2x took "6:" as 6, " f" and "+f"
 * as f (fuzz_shard_mix found the first in a mixture's manifest_sha256). */
static void sha256_unhex_takes_hex_digits_only(void **state)
{
	(void)state;
	const char *abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
	uint8_t d[32], want[32];
	char hex[65], bad[65];
	assert_int_equal(sha256("abc", 3, want, NULL), 0);
	assert_int_equal(sha256_unhex(abc, d), 0);
	assert_memory_equal(d, want, 32);
	assert_int_equal(sha256_unhex("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD", d), 0);
	sha256_hex(d, hex);
	assert_string_equal(hex, abc);
	const char *subs[] = {"6:", " f", "+f", "0x", "g0"};
	for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
		memcpy(bad, abc, 65);
		memcpy(bad + 20, subs[i], 2);
		assert_int_equal(sha256_unhex(bad, d), -1);
	}
	assert_int_equal(sha256_unhex(abc + 1, d), -1);
	assert_int_equal(sha256_unhex(NULL, d), -1);
}

static void sha256_file_equals_buffer_digest(void **state)
{
	(void)state;
	char path[300];
	snprintf(path, sizeof path, "%s/sha.bin", test_tmpdir);
	static unsigned char big[300000];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (unsigned char)(i * 31 + 7);
	assert_int_equal(atomic_write_file(path, big, sizeof big, NULL), 0);
	uint8_t d[32];
	char a[65], b[65];
	assert_int_equal(sha256(big, sizeof big, d, NULL), 0);
	sha256_hex(d, a);
	assert_int_equal(sha256_file_hex(path, b, NULL), 0);
	assert_string_equal(a, b);
}

static void afile_commit_replaces_and_abort_keeps_old(void **state)
{
	(void)state;
	char path[300];
	titan_err err = {{0}};
	snprintf(path, sizeof path, "%s/a.txt", test_tmpdir);
	assert_int_equal(atomic_write_file(path, "old\n", 4, &err), 0);

	afile af;
	assert_int_equal(afile_open(&af, path, &err), 0);
	assert_int_equal(afile_write(&af, "new", 3, &err), 0);
	afile_abort(&af);
	mfile m;
	assert_int_equal(mfile_open(&m, path, &err), 0);
	assert_int_equal(m.size, 4);
	assert_memory_equal(m.data, "old\n", 4);
	mfile_close(&m);

	assert_int_equal(afile_open(&af, path, &err), 0);
	assert_int_equal(afile_printf(&af, &err, "%s %d\n", "new", 2), 0);
	assert_int_equal(afile_commit(&af, &err), 0);
	assert_int_equal(mfile_open(&m, path, &err), 0);
	assert_int_equal(m.size, 6);
	assert_memory_equal(m.data, "new 2\n", 6);
	mfile_close(&m);

	/* No temporary file is left behind. */
	char cmd[400];
	snprintf(cmd, sizeof cmd, "test $(ls '%s' | grep -c tmp) -eq 0", test_tmpdir);
	assert_int_equal(system(cmd), 0);
}

static void afile_open_in_missing_folder_names_the_file(void **state)
{
	(void)state;
	afile af;
	titan_err err = {{0}};
	assert_int_equal(afile_open(&af, "/nonexistent-titan/x/y.bin", &err), -1);
	assert_non_null(strstr(err.msg, "/nonexistent-titan/x/y.bin"));
}

static void mkdir_p_makes_nested_folders(void **state)
{
	(void)state;
	char path[300];
	titan_err err = {{0}};
	snprintf(path, sizeof path, "%s/a/b/c", test_tmpdir);
	assert_int_equal(mkdir_p(path, &err), 0);
	assert_int_equal(mkdir_p(path, &err), 0);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(mkdir_p("", &err), -1);
	assert_string_equal(err.msg, "mkdir: empty folder name");
	/* A file in the way is named. */
	snprintf(path, sizeof path, "%s/file", test_tmpdir);
	assert_int_equal(atomic_write_file(path, "x", 1, &err), 0);
	snprintf(path, sizeof path, "%s/file/sub", test_tmpdir);
	assert_int_equal(mkdir_p(path, &err), -1);
	assert_non_null(strstr(err.msg, "file/sub"));
}

static void mfile_maps_empty_and_rejects_missing(void **state)
{
	(void)state;
	char path[300];
	titan_err err = {{0}};
	snprintf(path, sizeof path, "%s/empty", test_tmpdir);
	assert_int_equal(atomic_write_file(path, "", 0, &err), 0);
	mfile m;
	assert_int_equal(mfile_open(&m, path, &err), 0);
	assert_null(m.data);
	assert_int_equal(m.size, 0);
	mfile_close(&m);
	snprintf(path, sizeof path, "%s/missing", test_tmpdir);
	assert_int_equal(mfile_open(&m, path, &err), -1);
	assert_non_null(strstr(err.msg, "missing"));
	assert_non_null(strstr(err.msg, "No such file"));
}

static void err_prefix_keeps_the_message(void **state)
{
	(void)state;
	titan_err err;
	err_set(&err, "bad magic %#x", 7u);
	err_prefix(&err, "%s:%d", "f.bin", 3);
	assert_string_equal(err.msg, "f.bin:3: bad magic 0x7");
}

/* The VmFlags line of /proc/self/smaps for the mapping that holds p ("" when
 * none is found). */
static void vm_flags_of(const void *p, char *out, size_t n)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int inside = 0;
	out[0] = '\0';
	while (f && fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
			inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		else if (inside && strncmp(line, "VmFlags:", 8) == 0)
			snprintf(out, n, "%s", line);
	}
	if (f)
		fclose(f);
}

/* Whether madvise's huge-page advice shows in smaps here: qemu-user, for
 * one, accepts it and drops it. */
static int advice_shows(void)
{
	size_t len = (size_t)4 << 20;
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return 0;
	char flags[512];
	int ok = madvise(m, len, MADV_HUGEPAGE) == 0;
	vm_flags_of(m, flags, sizeof flags);
	munmap(m, len);
	return ok && strstr(flags, " hg") != NULL;
}

/* Big blocks lie on 2 MiB boundaries, advised for huge pages where the
 * advice shows, and every byte is usable; calloc's are zero; small blocks are
 * 64-byte aligned; a size that overflows is refused. */
static void bigmem_blocks_are_aligned_advised_and_zeroed(void **state)
{
	(void)state;
	size_t big = BIGMEM_MIN + 12345;
	uint8_t *p = bigmem_alloc(big);
	assert_non_null(p);
	assert_int_equal((uintptr_t)p % ((size_t)2 << 20), 0);
	memset(p, 0x5a, big);
	assert_int_equal(p[big - 1], 0x5a);
	if (!advice_shows()) {
		print_message("the huge-page advice does not show here: not checked\n");
	} else {
		char flags[512];
		vm_flags_of(p, flags, sizeof flags);
		if (!strstr(flags, " hg"))
			fail_msg("the block's mapping is not advised for huge pages: '%s'", flags);
	}
	free(p);
	float *z = bigmem_calloc(BIGMEM_MIN / 4 + 3, sizeof(float));
	assert_non_null(z);
	for (size_t i = 0; i < BIGMEM_MIN / 4 + 3; i++)
		if (z[i] != 0)
			fail_msg("element %zu of a zeroed block is %g", i, z[i]);
	free(z);
	uint8_t *small = bigmem_alloc(100), *none = bigmem_alloc(0), *zs = bigmem_calloc(7, 3);
	assert_true(small && none && zs);
	assert_int_equal((uintptr_t)small % 64, 0);
	for (int i = 0; i < 21; i++)
		assert_int_equal(zs[i], 0);
	free(small);
	free(none);
	free(zs);
	assert_null(bigmem_calloc(SIZE_MAX / 2, 4));
	assert_null(bigmem_alloc(SIZE_MAX - 10));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(crc32c_matches_standard_check_value),
		cmocka_unit_test(crc32c_hw_and_table_agree_on_every_length_and_split),
		cmocka_unit_test(crc32c_interleaved_streams_agree_with_table),
		cmocka_unit_test(crc32c_mask_matches_tensorflow),
		cmocka_unit_test(sha256_matches_fips_vectors),
		cmocka_unit_test(sha256_unhex_takes_hex_digits_only),
		cmocka_unit_test(sha256_file_equals_buffer_digest),
		cmocka_unit_test(afile_commit_replaces_and_abort_keeps_old),
		cmocka_unit_test(afile_open_in_missing_folder_names_the_file),
		cmocka_unit_test(mkdir_p_makes_nested_folders),
		cmocka_unit_test(mfile_maps_empty_and_rejects_missing),
		cmocka_unit_test(err_prefix_keeps_the_message),
		cmocka_unit_test(bigmem_blocks_are_aligned_advised_and_zeroed),
	};
	return cmocka_run_group_tests(tests, test_tmpdir_create, test_tmpdir_remove);
}
