/*
 * rdv_file.c - the rendezvous card (rdv.h) as a file on a directory every
 * rank shares: DTRAIN_RENDEZVOUS_DIR, else the directory the job was
 * started in (mpirun and srun start every rank there; on a cluster it is
 * the shared home or project directory, where Slurm writes job output).
 *
 * The file is named after the job the launcher is running
 * (".dtrain-rendezvous-<job>", from SLURM_JOB_ID and SLURM_STEP_ID, or
 * OpenMPI's job id), so two jobs in one directory do not meet. Rank 0
 * writes it under a random name, mode 0600, and renames it into place
 * (common/file.c), so a reader sees the whole card or none; it removes the
 * file once every rank has joined. A reader polls for it until the connect
 * deadline and refuses a file that is not a regular one, belongs to
 * another user or may be read by others: the secret in it is the job's.
 * The file holds the card as text (rdv_card.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "coll/rdv.h"
#include "common/file.h"

#define JOB_MAX 64 /* characters of the job's name */
#define POLL_NS 20000000ull

/* A launcher's job id is a name in a path: letters, digits, ".-_@". */
static int
job_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > JOB_MAX)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr(".-_@", *s)))
			return 0;
	return 1;
}

/* The job's name from the launcher's variables; *var names the variable. */
static void
job_name(char *out, size_t cap, const char **var)
{
	const char *s;

	out[0] = '\0';
	if ((s = dt__env_str("SLURM_JOB_ID")) != NULL) {
		const char *step = dt__env_str("SLURM_STEP_ID");

		snprintf(out, cap, "%s.%s", s, step ? step : "0");
		*var = "SLURM_JOB_ID";
	} else if ((s = dt__env_str("OMPI_MCA_ess_base_jobid")) != NULL) {
		snprintf(out, cap, "%s", s);
		*var = "OMPI_MCA_ess_base_jobid";
	} else if ((s = dt__env_str("PMIX_NAMESPACE")) != NULL) {
		snprintf(out, cap, "%s", s);
		*var = "PMIX_NAMESPACE";
	}
}

static dt_err
file_prepare(dt__rdv *r, int *usable)
{
	const char *dir = dt__env_str("DTRAIN_RENDEZVOUS_DIR"), *var = NULL;
	char job[2 * JOB_MAX];
	int n;

	*usable = 0;
	job_name(job, sizeof(job), &var);
	if (var == NULL)
		return DT_OK;
	if (!job_name_ok(job))
		return dt__fail(DT_ECONFIG,
		                "%s: the job's name '%.64s' is not a name a "
		                "rendezvous file can have (letters, digits, "
		                "\".-_@\", at most %d)",
		                var, job, JOB_MAX);
	n = snprintf(r->path, sizeof(r->path), "%s/.dtrain-rendezvous-%s",
	             dir ? dir : ".", job);
	if (n < 0 || (size_t)n >= sizeof(r->path))
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_RENDEZVOUS_DIR is too long");
	*usable = 1;
	return DT_OK;
}

/* Rank 0: write the card, private to this user, in one rename. */
static dt_err
write_card(dt__rdv *r, const dt__rdv_card *card)
{
	char text[DT__RDV_CARD_MAX + 1];
	dt__file_tmp t;
	int rc;
	dt_err err;

	if ((err = dt__file_create_tmp("rendezvous file ", r->path, 0600, &t)))
		return err;
	/* Straight to the descriptor: no stdio buffer keeps the secret. */
	dt__rdv_card_format(card, text, sizeof(text));
	rc = dt__write_all(t.fd, text, strlen(text));
	explicit_bzero(text, sizeof(text));
	if (rc < 0) {
		err = dt__fail(DT_ESYS, "rendezvous file %s: %s", r->path,
		               strerror(errno));
		dt__file_abort(&t);
		return err;
	}
	if ((err = dt__file_commit(&t, 0)))
		return err;
	r->published = 1;
	return DT_OK;
}

/* Open the card once it exists; *fd -1 while it does not yet. */
static dt_err
open_card(dt__rdv *r, int *fd)
{
	struct stat sb;
	dt_err err;

	*fd = -1;
	if (lstat(r->path, &sb) < 0) {
		if (errno == ENOENT)
			return DT_OK;
		return dt__fail(DT_ESYS, "rendezvous file %s: %s", r->path,
		                strerror(errno));
	}
	/* Rank 0 renames a file into place; a link there is someone else's. */
	if (S_ISLNK(sb.st_mode))
		return dt__fail(
		    DT_ECONFIG,
		    "rendezvous file %s is a symbolic link: refused", r->path);
	if ((err = dt__file_open_regular(DT_ECONFIG, "rendezvous file ",
	                                 r->path, fd)))
		return err;
	if (fstat(*fd, &sb) < 0 || sb.st_uid != geteuid() ||
	    (sb.st_mode & 077)) {
		close(*fd);
		*fd = -1;
		return dt__fail(
		    DT_ECONFIG,
		    "rendezvous file %s belongs to another user or "
		    "may be read by others: refused (it should hold "
		    "this job's secret)",
		    r->path);
	}
	return DT_OK;
}

/* Every rank but 0: wait for the card, then read and check it. */
static dt_err
read_card(dt__rdv *r, dt__rdv_card *card)
{
	char text[DT__RDV_CARD_MAX + 1];
	size_t got = 0;
	ssize_t n;
	int fd;
	dt_err err;

	for (;;) {
		if ((err = open_card(r, &fd)))
			return err;
		if (fd >= 0)
			break;
		if (dt__now_ns() >= r->deadline_ns)
			return dt__fail(
			    DT_ETIMEDOUT,
			    "rank %d: no rendezvous file %s from rank "
			    "0 before DT_CONNECT_TIMEOUT: is rank 0 "
			    "running, and do the ranks share the "
			    "directory (DTRAIN_RENDEZVOUS_DIR)?",
			    r->rank, r->path);
		nanosleep(&(struct timespec){0, (long)POLL_NS}, NULL);
	}
	while (got < sizeof(text) &&
	       (n = read(fd, text + got, sizeof(text) - got)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = dt__fail(DT_ESYS, "rendezvous file %s: %s",
			               r->path, strerror(errno));
			close(fd);
			return err;
		}
		got += (size_t)n;
	}
	close(fd);
	if (got > DT__RDV_CARD_MAX)
		err = dt__fail(DT_EPROTO,
		               "rendezvous file %s is longer than %d "
		               "bytes",
		               r->path, DT__RDV_CARD_MAX);
	else if (memchr(text, '\0', got))
		err = dt__fail(DT_EPROTO, "rendezvous file %s holds a NUL byte",
		               r->path);
	else {
		char what[sizeof(r->path) + 32];

		text[got] = '\0';
		snprintf(what, sizeof(what), "rendezvous file %s", r->path);
		err = dt__rdv_card_parse(what, text, card);
	}
	explicit_bzero(text, sizeof(text));
	return err;
}

static dt_err
file_exchange(dt__rdv *r, dt__rdv_card *card)
{
	return r->rank == 0 ? write_card(r, card) : read_card(r, card);
}

static void
file_done(dt__rdv *r)
{
	if (!r->published)
		return;
	if (unlink(r->path) < 0 && errno != ENOENT)
		dt__log(0, "warning: cannot remove the rendezvous file %s: %s",
		        r->path, strerror(errno));
	r->published = 0;
}

const dt__rdv_kind dt__rdv_file = {
    .id = "file",
    .name = "rendezvous file",
    .prepare = file_prepare,
    .exchange = file_exchange,
    .done = file_done,
};
