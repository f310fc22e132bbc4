/* Unit tests of lib/bpetrain on hand-worked examples (HF tokenizers 0.23 gives
 * the same merges and sizes for them).  (The comparison with
 * HF tokenizers' own trainer on real text is tests/tokenize/train.sh.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpetrain/bpetrain.h"

static bpetrain *train(const char **specials, size_t n_specials, size_t vocab, uint64_t min_freq,
		       const char *text)
{
	bpetrain_opts o = {.vocab_size = vocab, .min_frequency = min_freq, .specials = specials,
			   .n_specials = n_specials, .bos = specials[0]};
	titan_err err;
	bpetrain *b = bpetrain_new(&o, &err);
	if (b == NULL)
		fail_msg("%s", err.msg);
	if (bpetrain_feed(b, (const uint8_t *)text, strlen(text), &err) != 0 ||
	    bpetrain_run(b, &err) != 0)
		fail_msg("%s", err.msg);
	return b;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	static char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

/* "aaabdaaabac" is one pre-token.  Pair counts: aa 4, ab 2, others 1.
 * 1: a+a (4).  2: a+b and aa+a tie at 2, a+b has the smaller ids.  3: aa+ab
 * (2; the stale aa+a entry is pushed back with its count, now 0).  Then every
 * pair is seen once, below min_frequency 2. */
static void three_merges_in_count_then_id_order(void **state)
{
	(void)state;
	const char *sp[] = {"<s>", "</s>"};
	bpetrain *b = train(sp, 2, 1000, 2, "aaabdaaabac");
	assert_int_equal(bpetrain_n_merges(b), 3);
	assert_int_equal(bpetrain_n_vocab(b), 2 + 256 + 3);
	assert_int_equal(bpetrain_n_words(b), 1);
	char dir[] = "/tmp/titan-bpetrain.XXXXXX";
	assert_non_null(mkdtemp(dir));
	titan_err err;
	if (bpetrain_save(b, dir, &err) != 0)
		fail_msg("%s", err.msg);
	char path[64];
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	const char *j = slurp(path);
	assert_non_null(strstr(j, "\"merges\": [\n      [\"a\", \"a\"],\n      [\"a\", \"b\"],\n"
				 "      [\"aa\", \"ab\"]\n    ]"));
	assert_non_null(strstr(j, "\"<s>\": 0,\n      \"</s>\": 1,\n      \"!\": 2,"));
	assert_non_null(strstr(j, "\"aaab\": 260\n"));
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	j = slurp(path);
	assert_non_null(strstr(j, "\"bos_token\": \"<s>\""));
	assert_non_null(strstr(j, "\"eos_token\": null"));
	char cmd[96];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	bpetrain_free(b);
}

/* HF looks new tokens up by their ByteLevel string, so a special spelled
 * "ab" is the token a+b makes: the merge reuses its id. */
static void merge_that_spells_a_special_reuses_its_id(void **state)
{
	(void)state;
	const char *sp[] = {"<s>", "ab"};
	bpetrain *b = train(sp, 2, 1000, 2, "aaabdaaabac");
	assert_int_equal(bpetrain_n_merges(b), 3);
	assert_int_equal(bpetrain_n_vocab(b), 2 + 256 + 2);
	bpetrain_free(b);
}

static void vocab_size_stops_training(void **state)
{
	(void)state;
	const char *sp[] = {"<s>"};
	bpetrain *b = train(sp, 1, 1 + 256 + 2, 0, "aaabdaaabac");
	assert_int_equal(bpetrain_n_merges(b), 2);
	assert_int_equal(bpetrain_n_vocab(b), 259);
	bpetrain_free(b);
}

static void bad_options_are_refused(void **state)
{
	(void)state;
	titan_err err;
	const char *sp[] = {"<s>", "<s>"};
	bpetrain_opts o = {.vocab_size = 300, .specials = sp, .n_specials = 1};
	o.vocab_size = 200;
	assert_null(bpetrain_new(&o, &err));
	assert_non_null(strstr(err.msg, "below 257"));
	o.vocab_size = 300;
	o.n_specials = 2;
	assert_null(bpetrain_new(&o, &err));
	assert_non_null(strstr(err.msg, "given twice"));
	o.n_specials = 1;
	o.eos = "</s>";
	assert_null(bpetrain_new(&o, &err));
	assert_non_null(strstr(err.msg, "not one of the special tokens"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(three_merges_in_count_then_id_order),
		cmocka_unit_test(merge_that_spells_a_special_reuses_its_id),
		cmocka_unit_test(vocab_size_stops_training),
		cmocka_unit_test(bad_options_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
