/*
 * coll_rdv_test.c - the rendezvous of an mpirun/srun job (coll/rdv_file.c,
 * net/auth.c's job secret): rank 0's card is a private file (mode 0600)
 * named after the launcher's job, which another rank reads back exactly
 * and rank 0 removes; a card others may read, one of another user's, one
 * that is not a card or is too long, and a job name that is no file name
 * are refused by name; a reader waits no longer than its deadline; PMIx
 * declines a process no PMIx server started; the card's text round-trips;
 * the card's secret authenticates only when no variable names another.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "coll/rdv.h"
#include "common/util.h"
#include "net/auth.h"

static char dir[] = "/tmp/dtrain_rdv_test.XXXXXX";

static const char *const job_vars[] = {
    "SLURM_JOB_ID",   "SLURM_STEP_ID",         "OMPI_MCA_ess_base_jobid",
    "PMIX_NAMESPACE", "DTRAIN_RENDEZVOUS_DIR",
};

static int
setup(void **state)
{
	(void)state;
	for (size_t i = 0; i < DT_ARRAY_LEN(job_vars); i++)
		unsetenv(job_vars[i]);
	setenv("DTRAIN_RENDEZVOUS_DIR", dir, 1);
	setenv("SLURM_JOB_ID", "42", 1);
	setenv("SLURM_STEP_ID", "3", 1);
	dt__clear_error();
	return 0;
}

static void
assert_msg_has(const char *word)
{
	if (strstr(dt_errmsg(), word) == NULL)
		fail_msg("error message '%s' does not mention '%s'",
		         dt_errmsg(), word);
}

/* A prepared exchange for rank of 2, readers waiting wait_ms at most. */
static void
prepare(dt__rdv *r, int rank, int wait_ms)
{
	int usable = 0;

	memset(r, 0, sizeof(*r));
	r->rank = rank;
	r->size = 2;
	r->deadline_ns = dt__now_ns() + (uint64_t)wait_ms * 1000000ull;
	assert_int_equal(dt__rdv_file.prepare(r, &usable), DT_OK);
	assert_int_equal(usable, 1);
}

static void
fill_card(dt__rdv_card *card)
{
	memset(card, 0, sizeof(*card));
	snprintf(card->host, sizeof(card->host), "10.1.2.3");
	card->port = 40123;
	card->size = 2;
	for (size_t i = 0; i < sizeof(card->secret); i++)
		card->secret[i] = (uint8_t)(i * 7 + 1);
}

/* Write text as the card's file, with mode. */
static void
plant(const dt__rdv *r, const char *text, int mode)
{
	FILE *f = fopen(r->path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	assert_int_equal(chmod(r->path, (mode_t)mode), 0);
}

static void
test_round_trip(void **state)
{
	dt__rdv w, rd;
	dt__rdv_card card, got;
	struct stat sb;
	char want[4200];

	(void)state;
	prepare(&w, 0, 0);
	snprintf(want, sizeof(want), "%s/.dtrain-rendezvous-42.3", dir);
	assert_string_equal(w.path, want);
	fill_card(&card);
	assert_int_equal(dt__rdv_file.exchange(&w, &card), DT_OK);
	assert_int_equal(stat(w.path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);

	prepare(&rd, 1, 1000);
	memset(&got, 0xff, sizeof(got));
	assert_int_equal(dt__rdv_file.exchange(&rd, &got), DT_OK);
	assert_string_equal(got.host, card.host);
	assert_int_equal(got.port, card.port);
	assert_int_equal(got.size, card.size);
	assert_memory_equal(got.secret, card.secret, sizeof(card.secret));

	/* Only the writer removes it, and once is enough. */
	dt__rdv_file.done(&rd);
	assert_int_equal(access(w.path, F_OK), 0);
	dt__rdv_file.done(&w);
	assert_int_equal(access(w.path, F_OK), -1);
	dt__rdv_file.done(&w);
}

static void
test_refusals(void **state)
{
	dt__rdv r;
	dt__rdv_card card, got;
	char big[2048];

	(void)state;
	prepare(&r, 0, 0);
	fill_card(&card);
	assert_int_equal(dt__rdv_file.exchange(&r, &card), DT_OK);

	/* A card others may read holds a secret that is no longer one. */
	assert_int_equal(chmod(r.path, 0644), 0);
	prepare(&r, 1, 1000);
	assert_int_equal(dt__rdv_file.exchange(&r, &got), DT_ECONFIG);
	assert_msg_has("read by others");
	assert_msg_has(r.path);

	/* Another user's card (as root: a file given away). */
	if (geteuid() == 0) {
		assert_int_equal(chmod(r.path, 0600), 0);
		assert_int_equal(chown(r.path, 1, (gid_t)-1), 0);
		assert_int_equal(dt__rdv_file.exchange(&r, &got), DT_ECONFIG);
		assert_msg_has("another user");
	}
	unlink(r.path);

	/* Not a card: other text, a bad field, a secret too short. */
	plant(&r, "hello\n", 0600);
	assert_int_equal(dt__rdv_file.exchange(&r, &got), DT_EPROTO);
	assert_msg_has("not a rendezvous card");
	plant(&r,
	      "dtrain-rendezvous 1\nsize 2\nroot 10.0.0.1 70000\nsecret "
	      "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	      "\n",
	      0600);
	assert_int_equal(dt__rdv_file.exchange(&r, &got), DT_EPROTO);
	plant(&r,
	      "dtrain-rendezvous 1\nsize 2\nroot h;rm 9000\nsecret "
	      "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	      "\n",
	      0600);
	assert_int_equal(dt__rdv_file.exchange(&r, &got), DT_EPROTO);
	plant(&r, "dtrain-rendezvous 1\nsize 2\nroot h 9000\nsecret 0011\n",
	      0600);
	assert_int_equal(dt__rdv_file.exchange(&r, &got), DT_EPROTO);
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	plant(&r, big, 0600);
	assert_int_equal(dt__rdv_file.exchange(&r, &got), DT_EPROTO);
	assert_msg_has("longer than");
	unlink(r.path);

	/* A link at the card's name, even to a private file of ours. */
	plant(&r, "x", 0600);
	{
		char target[4200];

		snprintf(target, sizeof(target), "%s.target", r.path);
		assert_int_equal(rename(r.path, target), 0);
		assert_int_equal(symlink(target, r.path), 0);
		assert_int_equal(dt__rdv_file.exchange(&r, &got), DT_ECONFIG);
		assert_msg_has("symbolic link");
		unlink(r.path);
		unlink(target);
	}

	/* A directory at the card's name is not a card. */
	assert_int_equal(mkdir(r.path, 0700), 0);
	assert_int_equal(dt__rdv_file.exchange(&r, &got), DT_ECONFIG);
	assert_msg_has("regular file");
	rmdir(r.path);
}

static void
test_deadline_and_names(void **state)
{
	dt__rdv r;
	dt__rdv_card got;
	uint64_t t0;
	int usable = 1;

	(void)state;
	/* No card: the reader gives up at its deadline, naming the file. */
	prepare(&r, 1, 100);
	t0 = dt__now_ns();
	assert_int_equal(dt__rdv_file.exchange(&r, &got), DT_ETIMEDOUT);
	assert_true(dt__now_ns() - t0 >= 100000000ull);
	assert_true(dt__now_ns() - t0 < 5000000000ull);
	assert_msg_has(r.path);

	/* OpenMPI's job id when there is no Slurm job. */
	unsetenv("SLURM_JOB_ID");
	setenv("OMPI_MCA_ess_base_jobid", "1613955073", 1);
	assert_int_equal(dt__rdv_file.prepare(&r, &usable), DT_OK);
	assert_int_equal(usable, 1);
	assert_non_null(strstr(r.path, ".dtrain-rendezvous-1613955073"));

	/* No launcher's job: this kind cannot serve. */
	unsetenv("OMPI_MCA_ess_base_jobid");
	assert_int_equal(dt__rdv_file.prepare(&r, &usable), DT_OK);
	assert_int_equal(usable, 0);

	/* A job's name that would climb out of the directory. */
	setenv("PMIX_NAMESPACE", "../../etc/x", 1);
	assert_int_equal(dt__rdv_file.prepare(&r, &usable), DT_ECONFIG);
	assert_msg_has("PMIX_NAMESPACE");
}

/* PMIx serves only a process its launcher gave a PMIx server; the card's
 * text round-trips exactly. */
static void
test_pmix_and_card(void **state)
{
	dt__rdv r;
	dt__rdv_card card, got;
	char text[DT__RDV_CARD_MAX + 1];
	int usable = 1;

	(void)state;
	unsetenv("PMIX_NAMESPACE");
	unsetenv("PMIX_RANK");
	memset(&r, 0, sizeof(r));
	assert_int_equal(dt__rdv_pmix.prepare(&r, &usable), DT_OK);
	assert_int_equal(usable, 0);

	fill_card(&card);
	dt__rdv_card_format(&card, text, sizeof(text));
	assert_true(strlen(text) < 200);
	memset(&got, 0, sizeof(got));
	assert_int_equal(dt__rdv_card_parse("card", text, &got), DT_OK);
	assert_memory_equal(&got, &card, sizeof(card));
	/* One byte changed in the secret's digits: refused. */
	text[strlen(text) - 3] = 'g';
	assert_int_equal(dt__rdv_card_parse("card", text, &got), DT_EPROTO);
	assert_msg_has("card is not a rendezvous card");
}

/* The card's secret is used only when no variable names one. */
static void
test_job_secret(void **state)
{
	uint8_t secret[DT_AUTH_JOB_SECRET_LEN], t1[32], t2[32], t3[32];
	dt_auth *a = NULL, *b = NULL, *c = NULL;

	(void)state;
	unsetenv("DTRAIN_SECRET");
	unsetenv("DTRAIN_SECRET_FILE");
	unsetenv("DTRAIN_AUTH");
	unsetenv("DTRAIN_JOB_ID");
	assert_int_equal(dt__auth_from_env(&a), DT_ECONFIG);
	memset(secret, 0x5a, sizeof(secret));
	dt__auth_set_job_secret(secret);
	assert_int_equal(dt__auth_from_env(&a), DT_OK);
	assert_int_equal(dt__auth_new(secret, sizeof(secret), NULL, 0, &b),
	                 DT_OK);
	dt__auth_local_token(a, "x", t1);
	dt__auth_local_token(b, "x", t2);
	assert_memory_equal(t1, t2, sizeof(t1));

	/* DTRAIN_SECRET wins over the card's. */
	setenv("DTRAIN_SECRET", "a secret of this job's own choosing", 1);
	assert_int_equal(dt__auth_from_env(&c), DT_OK);
	dt__auth_local_token(c, "x", t3);
	assert_memory_not_equal(t1, t3, sizeof(t1));
	dt__auth_free(c);
	c = NULL;
	unsetenv("DTRAIN_SECRET");

	/* Forgotten at the end of the job. */
	dt__auth_set_job_secret(NULL);
	assert_int_equal(dt__auth_from_env(&c), DT_ECONFIG);
	dt__auth_free(a);
	dt__auth_free(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(test_round_trip, setup),
	    cmocka_unit_test_setup(test_refusals, setup),
	    cmocka_unit_test_setup(test_deadline_and_names, setup),
	    cmocka_unit_test_setup(test_pmix_and_card, setup),
	    cmocka_unit_test_setup(test_job_secret, setup),
	};
	int rc;

	if (mkdtemp(dir) == NULL)
		return 1;
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	rmdir(dir);
	return rc;
}
