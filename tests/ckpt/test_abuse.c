/* Checkpoint files as an attacker (or a crash) leaves them: each test is a
 * defect once seen on main, kept so that it stays fixed.
 *   - a .pt whose pickle shares references exponentially ("billion laughs")
 *   - a .metadata whose shape holds 2^62 elements
 *   - a FIFO where a .distcp or a safetensors file should be
 *   - a kill at any point of the keep_latest_k purge
 *   - leftovers of killed runs: step-N.old.PID, x.pt.tmp.PID.*, a planted
 *     step-N.partial symlink
 *   - a .metadata naming one key twice */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/afile.h"
#include "dcp/dcp.h"
#include "dcp/dcp_priv.h"
#include "ptzip/ptzip.h"
#include "../support/testutil.h"

/* A kill, imitated: after `fs_budget` more removals or renames, every one
 * fails, as nothing more happens once a process is dead.  The library calls
 * these through the executable's definitions. */
static long fs_budget = -1; /* -1: no limit */

static int spend(void)
{
	if (fs_budget == 0) {
		errno = EIO;
		return -1;
	}
	if (fs_budget > 0)
		fs_budget--;
	return 0;
}

int unlink(const char *path)
{
	return spend() ? -1 : (int)syscall(SYS_unlinkat, AT_FDCWD, path, 0);
}

int rmdir(const char *path)
{
	return spend() ? -1 : (int)syscall(SYS_unlinkat, AT_FDCWD, path, AT_REMOVEDIR);
}

int rename(const char *from, const char *to)
{
	return spend() ? -1 : (int)syscall(SYS_renameat, AT_FDCWD, from, AT_FDCWD, to);
}

/* Ends the test (as a failure) if a call hangs, instead of the whole run. */
static void guard(unsigned seconds)
{
	alarm(seconds);
}

/* A torch.save file whose data.pkl is {"x": L40} with L0 = [] (or {}) and
 * L(i) = [L(i-1), L(i-1)] (or {"a": L(i-1), "b": L(i-1)}): 2^40 paths in a few
 * hundred bytes of pickle, each level one memo reference used twice. */
static void write_laughs(const char *path, int dict_form, int depth)
{
	uint8_t pkl[4096];
	size_t n = 0;
#define PUT(...) do { const uint8_t b_[] = {__VA_ARGS__}; memcpy(pkl + n, b_, sizeof b_); n += sizeof b_; } while (0)
	PUT(0x80, 0x02, '}', 'q', 0);                     /* PROTO 2, EMPTY_DICT, BINPUT 0 */
	PUT('X', 1, 0, 0, 0, 'x');                        /* BINUNICODE "x" */
	/* Each level is made, memoised (BINPUT) and popped: only the memo holds it. */
	if (dict_form)
		PUT('}', 'q', 1, '0');                    /* L0 = {} */
	else
		PUT(']', 'q', 1, '0');                    /* L0 = [] */
	for (int i = 1; i <= depth; i++) {
		uint8_t m = (uint8_t)i, next = (uint8_t)(i + 1);
		if (dict_form)
			PUT('}', '(', 'X', 1, 0, 0, 0, 'a', 'h', m, 'X', 1, 0, 0, 0, 'b', 'h', m, 'u',
			    'q', next, '0');              /* {"a": L, "b": L} */
		else
			PUT(']', '(', 'h', m, 'h', m, 'e', 'q', next, '0'); /* [L, L] */
	}
	PUT('h', (uint8_t)(depth + 1), 's', '.');         /* BINGET the top, SETITEM, STOP */
#undef PUT
	FILE *fp = fopen(path, "wb");
	assert_non_null(fp);
	ptz_writer w;
	titan_err err;
	assert_int_equal(ptz_writer_init(&w, fp, "laughs", &err), 0);
	assert_int_equal(ptz_write_preamble(&w, pkl, n, &err), 0);
	assert_int_equal(ptz_writer_finish(&w, &err), 0);
	ptz_writer_free(&w);
	assert_int_equal(fclose(fp), 0);
}

static void billion_laughs_pt_is_read_in_bounded_time(void **state)
{
	(void)state;
	titan_err err;
	dcp_source *s;
	dcp_convert_opts o = {0};
	size_t skipped;
	guard(60);
	/* The list form holds no tensor: one value, visited once per node. */
	char list[300], dict[300];
	snprintf(list, sizeof list, "%s", test_path("list.pt"));
	write_laughs(list, 0, 40);
	if (dcp_source_open(&s, list, &err) != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(dcp_source_count(s), 1);
	assert_string_equal(dcp_source_item(s, 0)->name, "x");
	dcp_source_close(s);
	/* Writing the value back follows every path: refused at the writer's bound. */
	assert_int_equal(dcp_convert_to_torch(list, test_path("list-out.pt"), &o, &err), -1);
	assert_int_equal(dcp_convert_to_safetensors(list, test_path("l.safetensors"), &o, &skipped,
						    &err), 0);
	/* The dict form flattens to one entry per path: refused at the bound. */
	snprintf(dict, sizeof dict, "%s", test_path("dict.pt"));
	write_laughs(dict, 1, 40);
	assert_int_equal(dcp_source_open(&s, dict, &err), -1);
	if (strstr(err.msg, "once its shared references are followed") == NULL)
		fail_msg("%s", err.msg);
	/* A shallow one is fine: 2^10 entries. */
	write_laughs(dict, 1, 10);
	if (dcp_source_open(&s, dict, &err) != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(dcp_source_count(s), 1024);
	assert_string_equal(dcp_source_item(s, 1023)->name, "x.b.b.b.b.b.b.b.b.b.b");
	dcp_source_close(s);
	alarm(0);
}

/* One tensor item of float32 (n,) in a fresh DCP folder. */
static void save_small(const char *dir, int world)
{
	float v[16];
	for (int i = 0; i < 16; i++)
		v[i] = (float)i;
	titan_err err;
	for (int r = 0; r < world; r++) {
		dcp_item it;
		int64_t shape[1] = {16 * world};
		dcp_item_full(&it, "w", PTZ_F32, 1, shape, v);
		it.offsets[0] = 16 * r;
		it.sizes[0] = 16;
		dcp_save_opts so = {.no_fsync = 1};
		dcp_saver *sv = dcp_save_begin(dir, r, world, &it, 1, &so, &err);
		assert_non_null(sv);
		assert_int_equal(dcp_save_wait(sv, &err), 0);
	}
	assert_int_equal(dcp_save_commit(dir, world, &err), 0);
}

static void write_metadata(const char *dir, const dcp_entry *e, size_t n)
{
	uint8_t *md;
	size_t mdn;
	titan_err err;
	assert_int_equal(dcp_meta_write(e, n, &md, &mdn, &err), 0);
	char p[512];
	snprintf(p, sizeof p, "%s/.metadata", dir);
	assert_int_equal(atomic_write_file(p, md, mdn, &err), 0);
	free(md);
}

static void metadata_of_2_62_elements_is_refused(void **state)
{
	(void)state;
	char dir[300];
	snprintf(dir, sizeof dir, "%s", test_path("huge"));
	save_small(dir, 1);
	titan_err err;
	dcp_ckpt c;
	assert_int_equal(dcp_open(&c, dir, &err), 0);
	dcp_entry e = c.entries[0];
	e.shape[0] = (int64_t)1 << 62;
	e.chunks[0].sizes[0] = (int64_t)1 << 62;
	write_metadata(dir, &e, 1);
	dcp_close(&c);
	assert_int_equal(dcp_open(&c, dir, &err), -1);
	if (strstr(err.msg, "more than 2^62 bytes") == NULL)
		fail_msg("%s", err.msg);
	dcp_convert_opts o = {0};
	assert_int_equal(dcp_convert_to_torch(dir, test_path("huge.pt"), &o, &err), -1);
	struct stat st;
	assert_int_not_equal(stat(test_path("huge.pt"), &st), 0);
}

static void metadata_naming_a_key_twice_is_refused(void **state)
{
	(void)state;
	char dir[300];
	snprintf(dir, sizeof dir, "%s", test_path("twice"));
	save_small(dir, 1);
	titan_err err;
	dcp_ckpt c;
	assert_int_equal(dcp_open(&c, dir, &err), 0);
	/* Far enough apart that the unpickler's own check of recent keys (the
	 * last 64 of a dict) does not fold them. */
	dcp_entry e[80];
	char names[80][16];
	for (int i = 0; i < 80; i++) {
		e[i] = c.entries[0];
		snprintf(names[i], sizeof names[i], "w%d", i == 79 ? 0 : i);
		e[i].fqn = names[i];
		e[i].path = NULL;
		e[i].npath = 0;
	}
	write_metadata(dir, e, 80);
	dcp_close(&c);
	assert_int_equal(dcp_open(&c, dir, &err), -1);
	if (strstr(err.msg, "names 'w0' twice") == NULL)
		fail_msg("%s", err.msg);
}

static void fifo_in_place_of_a_file_is_refused_not_waited_on(void **state)
{
	(void)state;
	guard(30);
	char dir[300], p[400];
	snprintf(dir, sizeof dir, "%s", test_path("fifo"));
	save_small(dir, 1);
	snprintf(p, sizeof p, "%s/__0_0.distcp", dir);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(mkfifo(p, 0644), 0);
	titan_err err;
	dcp_ckpt c;
	float out[16];
	int64_t zero[1] = {0}, sz[1] = {16};
	assert_int_equal(dcp_open(&c, dir, &err), 0);
	assert_int_equal(dcp_read_region(&c, &c.entries[0], zero, sz, PTZ_F32, out, &err), -1);
	assert_non_null(strstr(err.msg, "not a regular file"));
	dcp_close(&c);
	snprintf(p, sizeof p, "%s", test_path("fifo.safetensors"));
	assert_int_equal(mkfifo(p, 0644), 0);
	dcp_source *s;
	assert_int_equal(dcp_source_open(&s, p, &err), -1);
	assert_non_null(strstr(err.msg, "not a regular file"));
	alarm(0);
}

/* Every folder that looks like a complete step (discovery's rule: its
 * .metadata exists) loads and verifies; returns how many there are. */
static int complete_steps_are_whole(const char *folder)
{
	DIR *d = opendir(folder);
	assert_non_null(d);
	struct dirent *de;
	int n = 0;
	while ((de = readdir(d)) != NULL) {
		long step;
		char tail;
		if (sscanf(de->d_name, "step-%ld%c", &step, &tail) != 1)
			continue;
		char p[600];
		snprintf(p, sizeof p, "%s/%s/.metadata", folder, de->d_name);
		struct stat st;
		if (stat(p, &st) != 0)
			continue;
		snprintf(p, sizeof p, "%s/%s", folder, de->d_name);
		dcp_ckpt c;
		titan_err err;
		if (dcp_open(&c, p, &err) != 0 || dcp_verify(&c, &err) != 0)
			fail_msg("%s looks complete but is not: %s", p, err.msg);
		dcp_close(&c);
		n++;
	}
	closedir(d);
	return n;
}

static int count_entries(const char *folder, const char *part)
{
	DIR *d = opendir(folder);
	assert_non_null(d);
	struct dirent *de;
	int n = 0;
	while ((de = readdir(d)) != NULL)
		n += strstr(de->d_name, part) != NULL;
	closedir(d);
	return n;
}

static void kill_during_purge_never_leaves_a_step_that_looks_complete(void **state)
{
	(void)state;
	/* 6 rank files per step: removed in directory order, in place, a kill
	 * could leave .metadata beside some of them only. */
	for (long k = 0; k < 24; k++) {
		char folder[300], dir[400];
		snprintf(folder, sizeof folder, "%s/purge-%ld", test_tmpdir, k);
		for (int s = 1; s <= 3; s++) {
			snprintf(dir, sizeof dir, "%s/step-%d", folder, s);
			save_small(dir, 6);
		}
		titan_err err;
		fs_budget = k;
		int rc = dcp_purge(folder, 1, &err);
		fs_budget = -1;
		int complete = complete_steps_are_whole(folder);
		if (rc == 0 && complete != 1)
			fail_msg("cut after %ld: purge succeeded with %d steps left", k, complete);
		/* The next run cleans up what the kill left. */
		assert_int_equal(dcp_purge(folder, 1, &err), 0);
		assert_int_equal(complete_steps_are_whole(folder), 1);
		assert_int_equal(count_entries(folder, ".old."), 0);
		assert_int_equal(dcp_latest_step(folder, &err), 3);
	}
}

static void leftovers_of_killed_runs_are_removed(void **state)
{
	(void)state;
	char folder[300], p[400];
	snprintf(folder, sizeof folder, "%s", test_path("left"));
	snprintf(p, sizeof p, "%s/step-4", folder);
	save_small(p, 1);
	/* step-N.old.PID: of a process that is gone, and of a live one (ours is
	 * the parent shell's: still running). */
	long dead = 0;
	for (long pid = 4000000; pid > 300000 && !dead; pid -= 7919)
		if (pid_gone(pid))
			dead = pid;
	assert_true(dead > 0);
	snprintf(p, sizeof p, "%s/step-2.old.%ld", folder, dead);
	save_small(p, 1);
	snprintf(p, sizeof p, "%s/step-3.old.%ld", folder, (long)getppid());
	assert_int_equal(mkdir(p, 0755), 0);
	titan_err err;
	assert_int_equal(dcp_clean_stale(folder, &err), 0);
	snprintf(p, sizeof p, "%s/step-2.old.%ld", folder, dead);
	struct stat st;
	assert_int_not_equal(stat(p, &st), 0);
	snprintf(p, sizeof p, "%s/step-3.old.%ld", folder, (long)getppid());
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(dcp_latest_step(folder, &err), 4);

	/* x.pt.tmp.PID.XXXXXX of a killed conversion. */
	snprintf(p, sizeof p, "%s/x.pt.tmp.%ld.abcdef", folder, dead);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fclose(f);
	char live[400];
	snprintf(live, sizeof live, "%s/x.pt.tmp.%ld.ghijkl", folder, (long)getppid());
	f = fopen(live, "w");
	assert_non_null(f);
	fclose(f);
	char src[400], out[400];
	snprintf(src, sizeof src, "%s/step-4", folder);
	snprintf(out, sizeof out, "%s/x.pt", folder);
	dcp_convert_opts o = {0};
	assert_int_equal(dcp_convert_to_torch(src, out, &o, &err), 0);
	assert_int_not_equal(stat(p, &st), 0);
	assert_int_equal(stat(live, &st), 0);
}

static void planted_partial_symlink_is_not_followed(void **state)
{
	(void)state;
	char folder[300], target[400], link[400], p[500];
	snprintf(folder, sizeof folder, "%s", test_path("planted"));
	snprintf(target, sizeof target, "%s/elsewhere", folder);
	assert_int_equal(system("true"), 0);
	snprintf(p, sizeof p, "%s/step-1", folder);
	save_small(p, 1);
	assert_int_equal(mkdir(target, 0755), 0);
	snprintf(link, sizeof link, "%s/step-5.partial", folder);
	assert_int_equal(symlink(target, link), 0);
	snprintf(p, sizeof p, "%s/step-5", folder);
	save_small(p, 1);
	assert_int_equal(count_entries(target, "distcp"), 0);
	assert_int_equal(count_entries(target, "metadata"), 0);
	titan_err err;
	assert_int_equal(dcp_latest_step(folder, &err), 5);
	struct stat st;
	assert_int_not_equal(lstat(link, &st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(billion_laughs_pt_is_read_in_bounded_time),
		cmocka_unit_test(metadata_of_2_62_elements_is_refused),
		cmocka_unit_test(metadata_naming_a_key_twice_is_refused),
		cmocka_unit_test(fifo_in_place_of_a_file_is_refused_not_waited_on),
		cmocka_unit_test(kill_during_purge_never_leaves_a_step_that_looks_complete),
		cmocka_unit_test(leftovers_of_killed_runs_are_removed),
		cmocka_unit_test(planted_partial_symlink_is_not_followed),
	};
	return cmocka_run_group_tests(tests, test_tmpdir_create, test_tmpdir_remove);
}
