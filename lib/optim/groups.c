/* optimizer.param_groups' assignment: torchtitan 0.3.0's _build_param_groups,
 * each parameter to the first group whose pattern re.search-matches its
 * name. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>

#include "optim/optim.h"

/* Whether re matches somewhere in s (re.search); -1 on a matcher error. */
static int search(pcre2_code *re, pcre2_match_data *md, const char *s)
{
	int rc = pcre2_match(re, (PCRE2_SPTR)s, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL);
	return rc >= 0 ? 1 : rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

static int assign(const char *const *patterns, int np, const char *const *names, int nn,
		  int *group_of, pcre2_code **re, pcre2_match_data *md, titan_err *e)
{
	for (int i = 0; i < nn; i++)
		group_of[i] = -1;
	for (int g = 0; g < np; g++) {
		int matched = 0;
		for (int i = 0; i < nn; i++) {
			if (group_of[i] >= 0 || !names[i])
				continue;
			int m = search(re[g], md, names[i]);
			if (m < 0)
				return err_set(e, "optimizer.param_groups[%d]: pattern \"%s\": the "
					       "matcher failed on %s", g, patterns[g], names[i]);
			if (m) {
				group_of[i] = g;
				matched = 1;
			}
		}
		if (!matched)
			return err_set(e, "optimizer.param_groups[%d]: pattern \"%s\" matched no "
				       "parameters", g, patterns[g]);
	}
	for (int i = 0; i < nn; i++)
		if (names[i] && group_of[i] < 0)
			return err_set(e, "optimizer.param_groups: %s is in no group (end the list "
				       "with a catch-all pattern such as \".*\")", names[i]);
	return 0;
}

int optim_assign_groups(const char *const *patterns, int np, const char *const *names, int nn,
			int *group_of, titan_err *e)
{
	pcre2_code **re = calloc((size_t)(np ? np : 1), sizeof *re);
	pcre2_match_data *md = NULL;
	int rc = -1;
	if (!re) {
		err_set(e, "out of memory");
		goto out;
	}
	for (int g = 0; g < np; g++) {
		int ec;
		PCRE2_SIZE off;
		re[g] = pcre2_compile((PCRE2_SPTR)patterns[g], PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec,
				      &off, NULL);
		if (!re[g]) {
			PCRE2_UCHAR msg[160];
			pcre2_get_error_message(ec, msg, sizeof msg);
			err_set(e, "optimizer.param_groups[%d]: pattern \"%s\": %s at offset %zu", g,
				patterns[g], (const char *)msg, (size_t)off);
			goto out;
		}
	}
	if (!(md = pcre2_match_data_create(1, NULL))) {
		err_set(e, "out of memory");
		goto out;
	}
	rc = assign(patterns, np, names, nn, group_of, re, md, e);
out:
	for (int g = 0; re && g < np; g++)
		pcre2_code_free(re[g]);
	free(re);
	pcre2_match_data_free(md);
	return rc;
}
