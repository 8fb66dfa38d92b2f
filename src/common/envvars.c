/*
 * envvars.c - the table of every environment variable dtrain reads
 * (env_table.h) and the warning about a variable that looks like one of
 * them but is not: a misspelt DMLC_NUM_WORKERS would otherwise be ignored
 * silently, and the job would wait for a worker count it was never given.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common/env_table.h"
#include "common/util.h"

extern char **environ;

#define DT_ENV_ROW(name, def, kind, summary) {#name, def, (#kind)[0], summary},
const dt__env_var dt__env_vars[] = {DT_ENV_TABLE(DT_ENV_ROW)};
const size_t dt__env_nvars = DT_ARRAY_LEN(dt__env_vars);

/* Variables of these prefixes that dtrain does not read but that are not
 * mistakes: the test suite's own (set for every test by CTest). */
static const char *const not_ours[] = {"DTRAIN_BUILD", "DTRAIN_SOURCE",
                                       "DTRAIN_QUICK", "DTRAIN_DATA",
                                       "DTRAIN_TEST_"};
static const char *const prefixes[] = {"DMLC_", "DTRAIN_", "PS_"};

const dt__env_var *
dt__env_find(const char *name)
{
	for (size_t i = 0; i < dt__env_nvars; i++)
		if (strcmp(dt__env_vars[i].name, name) == 0)
			return &dt__env_vars[i];
	return NULL;
}

/* The edit distance of a and b (names are short: at most 63 bytes are
 * compared, which is more than any name in the table). */
static size_t
distance(const char *a, size_t la, const char *b)
{
	size_t lb = strlen(b), row[64], i, j;

	la = DT_MIN(la, 63);
	lb = DT_MIN(lb, 63);
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		size_t diag = row[0];

		row[0] = i;
		for (j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t sub = diag + (a[i - 1] != b[j - 1]);

			row[j] = DT_MIN(DT_MIN(row[j - 1] + 1, up + 1), sub);
			diag = up;
		}
	}
	return row[lb];
}

static int
looks_ours(const char *e, size_t len)
{
	for (size_t i = 0; i < DT_ARRAY_LEN(not_ours); i++) {
		size_t n = strlen(not_ours[i]);
		int prefix = not_ours[i][n - 1] == '_';

		if (prefix ? len >= n && strncmp(e, not_ours[i], n) == 0
		           : len == n && strncmp(e, not_ours[i], n) == 0)
			return 0;
	}
	for (size_t i = 0; i < DT_ARRAY_LEN(prefixes); i++)
		if (strncmp(e, prefixes[i], strlen(prefixes[i])) == 0)
			return 1;
	return 0;
}

static void
warn_one(const char *who, const char *e, size_t len)
{
	const char *best = NULL;
	size_t best_d = (size_t)-1;
	char name[64];

	for (size_t i = 0; i < dt__env_nvars; i++) {
		size_t d = distance(e, len, dt__env_vars[i].name);

		if (d < best_d) {
			best_d = d;
			best = dt__env_vars[i].name;
		}
	}
	/* (a name as the environment has it may hold anything) */
	snprintf(name, sizeof(name), "%.*s", (int)DT_MIN(len, 63), e);
	dt__printable(name, name, sizeof(name));
	/* Three edits cover a missing or extra letter, a plural and a
	 * swapped pair; further than that the guess would mislead. */
	if (best != NULL && best_d <= 3)
		fprintf(stderr,
		        "%s: warning: %s is set but dtrain does not read it; "
		        "did you mean %s? (dtrain-env(7) lists the "
		        "variables)\n",
		        who, name, best);
	else
		fprintf(stderr,
		        "%s: warning: %s is set but dtrain does not read it "
		        "(dtrain-env(7) lists the variables)\n",
		        who, name);
}

int
dt__env_warn_unknown(const char *who)
{
	static atomic_int done;
	int n = 0;

	/* Once: each node and the launcher calls this at start-up, and
	 * one process may start several nodes (the unit tests, from
	 * several threads). */
	if (atomic_exchange(&done, 1))
		return 0;
	for (char **p = environ; p && *p; p++) {
		size_t len = strcspn(*p, "=");

		if (!looks_ours(*p, len))
			continue;
		char name[64];

		snprintf(name, sizeof(name), "%.*s", (int)DT_MIN(len, 63), *p);
		if (dt__env_find(name) != NULL)
			continue;
		warn_one(who, *p, len);
		n++;
	}
	return n;
}
