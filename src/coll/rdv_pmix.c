/*
 * rdv_pmix.c - the rendezvous card (rdv.h) over the launcher's own PMIx
 * server, where OpenMPI's mpirun (and srun --mpi=pmix) runs one beside
 * every rank: rank 0 puts the card under the key "dtrain.rdv", every rank
 * commits and joins one fence that collects what was put, and the others
 * get rank 0's card. Nothing touches a file, and the card stays between
 * the ranks and their launcher's servers, which admit only the job's own
 * processes.
 *
 * The PMIx library is opened at run time (dlopen of libpmix.so.2), so
 * dtrain neither links it nor needs it installed: a process started by
 * mpirun finds the one mpirun itself uses. Its header is needed to build
 * this kind (DT_HAVE_PMIX); without it, or without the library at run
 * time, the kind declines and the next one (rdv_file.c) serves.
 *
 * Each rank initialises PMIx for the exchange only and finalises it
 * before going on (PMIx counts initialisations, so a program that uses
 * MPI too keeps its own).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/rdv.h"

#ifdef DT_HAVE_PMIX
#include <dlfcn.h>
#include <pmix.h>

#define CARD_KEY "dtrain.rdv"

/* The calls of libpmix this kind makes, found by name. */
static struct {
	pmix_status_t (*init)(pmix_proc_t *, pmix_info_t *, size_t);
	pmix_status_t (*finalize)(const pmix_info_t *, size_t);
	pmix_status_t (*put)(pmix_scope_t, const char *, pmix_value_t *);
	pmix_status_t (*commit)(void);
	pmix_status_t (*fence)(const pmix_proc_t *, size_t, const pmix_info_t *,
	                       size_t);
	pmix_status_t (*get)(const pmix_proc_t *, const char *,
	                     const pmix_info_t *, size_t, pmix_value_t **);
	const char *(*error_string)(pmix_status_t);
} px;
static pthread_once_t px_once = PTHREAD_ONCE_INIT;
static int px_ok;

static void
px_load(void)
{
	void *lib = dlopen("libpmix.so.2", RTLD_NOW | RTLD_GLOBAL);

	if (lib == NULL)
		return;
	/* (dlsym hands back object pointers; POSIX makes them callable) */
	*(void **)&px.init = dlsym(lib, "PMIx_Init");
	*(void **)&px.finalize = dlsym(lib, "PMIx_Finalize");
	*(void **)&px.put = dlsym(lib, "PMIx_Put");
	*(void **)&px.commit = dlsym(lib, "PMIx_Commit");
	*(void **)&px.fence = dlsym(lib, "PMIx_Fence");
	*(void **)&px.get = dlsym(lib, "PMIx_Get");
	*(void **)&px.error_string = dlsym(lib, "PMIx_Error_string");
	px_ok = px.init && px.finalize && px.put && px.commit && px.fence &&
	        px.get && px.error_string;
	/* The library stays loaded: PMIx keeps threads of its own. */
}

/* Started by a launcher with a PMIx server: its namespace and the
 * server's address are in the environment. */
static int
under_pmix(void)
{
	static const char *const uris[] = {
	    "PMIX_SERVER_URI4",  "PMIX_SERVER_URI41", "PMIX_SERVER_URI3",
	    "PMIX_SERVER_URI21", "PMIX_SERVER_URI2",
	};

	if (dt__env_str("PMIX_NAMESPACE") == NULL ||
	    dt__env_str("PMIX_RANK") == NULL)
		return 0;
	for (size_t i = 0; i < DT_ARRAY_LEN(uris); i++)
		if (dt__env_str(uris[i]))
			return 1;
	return 0;
}

static dt_err
pmix_prepare(dt__rdv *r, int *usable)
{
	(void)r;
	*usable = 0;
	if (!under_pmix())
		return DT_OK;
	pthread_once(&px_once, px_load);
	*usable = px_ok;
	return DT_OK;
}

/* An info entry by hand (PMIx's loading macros call into the library,
 * which is not linked). */
static void
info_set(pmix_info_t *in, const char *key, pmix_data_type_t type)
{
	memset(in, 0, sizeof(*in));
	snprintf(in->key, sizeof(in->key), "%s", key);
	in->value.type = type;
}

static dt_err
px_fail(pmix_status_t rc, const char *what, int rank)
{
	return dt__fail(DT_ECONFIG, "rank %d: PMIx %s failed: %s", rank, what,
	                px.error_string(rc));
}

/* Between PMIx_Init and PMIx_Finalize: publish or fetch the card. */
static dt_err
swap(dt__rdv *r, const pmix_proc_t *me, dt__rdv_card *card)
{
	char text[DT__RDV_CARD_MAX + 1];
	pmix_info_t info[2];
	pmix_proc_t root;
	pmix_value_t v, *got = NULL;
	pmix_status_t rc;
	uint64_t now = dt__now_ns();
	int left = r->deadline_ns > now
	               ? (int)((r->deadline_ns - now) / 1000000000ull) + 1
	               : 1;
	dt_err err;

	if (r->rank == 0) {
		dt__rdv_card_format(card, text, sizeof(text));
		memset(&v, 0, sizeof(v));
		v.type = PMIX_STRING;
		v.data.string = text;
		rc = px.put(PMIX_GLOBAL, CARD_KEY, &v);
		explicit_bzero(text, sizeof(text));
		if (rc != PMIX_SUCCESS)
			return px_fail(rc, "put", r->rank);
	}
	if ((rc = px.commit()) != PMIX_SUCCESS)
		return px_fail(rc, "commit", r->rank);
	/* Everyone waits here for everyone, no longer than the deadline. */
	info_set(&info[0], PMIX_COLLECT_DATA, PMIX_BOOL);
	info[0].value.data.flag = true;
	info_set(&info[1], PMIX_TIMEOUT, PMIX_INT);
	info[1].value.data.integer = left;
	if ((rc = px.fence(NULL, 0, info, 2)) != PMIX_SUCCESS)
		return px_fail(rc, "fence (waiting for every rank)", r->rank);
	if (r->rank == 0)
		return DT_OK;
	memset(&root, 0, sizeof(root));
	memcpy(root.nspace, me->nspace, sizeof(root.nspace));
	root.rank = 0;
	if ((rc = px.get(&root, CARD_KEY, &info[1], 1, &got)) != PMIX_SUCCESS)
		return px_fail(rc, "get of rank 0's card", r->rank);
	if (got->type != PMIX_STRING || got->data.string == NULL ||
	    strnlen(got->data.string, DT__RDV_CARD_MAX + 1) > DT__RDV_CARD_MAX)
		err = dt__fail(DT_EPROTO,
		               "rank %d: PMIx gave rank 0's card "
		               "in a form not its own",
		               r->rank);
	else
		err = dt__rdv_card_parse("PMIx's card from rank 0",
		                         got->data.string, card);
	if (got->type == PMIX_STRING && got->data.string) {
		explicit_bzero(got->data.string, strlen(got->data.string));
		free(got->data.string);
	}
	free(got);
	return err;
}

static dt_err
pmix_exchange(dt__rdv *r, dt__rdv_card *card)
{
	pmix_proc_t me;
	pmix_status_t rc;
	dt_err err;

	memset(&me, 0, sizeof(me));
	if ((rc = px.init(&me, NULL, 0)) != PMIX_SUCCESS)
		return px_fail(rc, "init", r->rank);
	if ((int)me.rank != r->rank) {
		err = dt__fail(DT_ECONFIG,
		               "PMIx says this is rank %u, the launcher's "
		               "variables say %d",
		               (unsigned)me.rank, r->rank);
	} else {
		err = swap(r, &me, card);
	}
	(void)px.finalize(NULL, 0);
	return err;
}

#else /* no PMIx header at build time: the kind always declines */

static dt_err
pmix_prepare(dt__rdv *r, int *usable)
{
	(void)r;
	*usable = 0;
	return DT_OK;
}

static dt_err
pmix_exchange(dt__rdv *r, dt__rdv_card *card)
{
	(void)card;
	return dt__fail(DT_EINVAL, "rank %d: built without PMIx", r->rank);
}

#endif

/* Nothing is left behind: what was put dies with the job's namespace. */
static void
pmix_done(dt__rdv *r)
{
	(void)r;
}

const dt__rdv_kind dt__rdv_pmix = {
    .id = "pmix",
    .name = "PMIx",
    .prepare = pmix_prepare,
    .exchange = pmix_exchange,
    .done = pmix_done,
};
