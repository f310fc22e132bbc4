/* replay.c: run a libFuzzer target's kept corpus without libFuzzer, so make
 * check (and make asan-check, under the sanitizers) replays every input that
 * once found a bug or new coverage.
 *
 *   build/tests/fuzz/replay_NAME [FILE|DIR...]
 *
 * With no arguments it reads tests/fuzz/corpus/NAME/, NAME taken from the
 * program's own name.  Prints one TAP line for the whole corpus; a crash or a
 * sanitizer report ends the process, which the test runner counts as a failure. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *fp = fopen(path, "rb");
	if (fp == NULL) {
		perror(path);
		return -1;
	}
	size_t cap = 4096, n = 0;
	uint8_t *buf = malloc(cap);
	size_t r;
	while (buf != NULL && (r = fread(buf + n, 1, cap - n, fp)) > 0) {
		n += r;
		if (n == cap) {
			uint8_t *t = realloc(buf, cap *= 2);
			if (t == NULL)
				free(buf);
			buf = t;
		}
	}
	int bad = buf == NULL || ferror(fp);
	fclose(fp);
	if (bad) {
		fprintf(stderr, "%s: cannot read\n", path);
		free(buf);
		return -1;
	}
	/* An exact-size copy, so ASan sees reads past the input's end. */
	uint8_t *exact = malloc(n ? n : 1);
	if (exact == NULL) {
		free(buf);
		return -1;
	}
	memcpy(exact, buf, n);
	free(buf);
	fprintf(stderr, "# %s (%zu bytes)\n", path, n);
	LLVMFuzzerTestOneInput(exact, n);
	free(exact);
	return 0;
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file of dir, in name order; returns how many, -1 on error. */
static int replay_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (d == NULL) {
		perror(dir);
		return -1;
	}
	char **names = NULL;
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char **t = realloc(names, (n + 1) * sizeof *names);
		if (t == NULL || (t[n] = strdup(e->d_name)) == NULL) {
			closedir(d);
			return -1;
		}
		names = t;
		n++;
	}
	closedir(d);
	qsort(names, n, sizeof *names, cmp);
	int count = 0, rc = 0;
	for (size_t i = 0; i < n; i++) {
		char path[4096];
		struct stat st;
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			if (replay_file(path) != 0)
				rc = -1;
			count++;
		}
		free(names[i]);
	}
	free(names);
	return rc != 0 ? -1 : count;
}

int main(int argc, char **argv)
{
	const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	const char *name = strncmp(base, "replay_", 7) == 0 ? base + 7 : base;
	char dflt[512];
	char *dirs[] = {dflt, NULL};
	char **args = argv + 1;
	if (argc < 2) {
		snprintf(dflt, sizeof dflt, "tests/fuzz/corpus/%s", name);
		args = dirs;
	}
	LLVMFuzzerTestOneInput((const uint8_t *)"", 0);
	int total = 0;
	for (; *args != NULL; args++) {
		struct stat st;
		int n;
		if (stat(*args, &st) != 0) {
			printf("not ok 1 fuzz %s: replay corpus\n# %s: no such file or folder\n", name,
			       *args);
			return 1;
		}
		n = S_ISDIR(st.st_mode) ? replay_dir(*args) : (replay_file(*args) == 0 ? 1 : -1);
		if (n < 0) {
			printf("not ok 1 fuzz %s: replay corpus\n# cannot read %s\n", name, *args);
			return 1;
		}
		total += n;
	}
	printf("ok 1 fuzz %s: replayed %d inputs\n", name, total);
	return 0;
}
