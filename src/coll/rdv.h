/*
 * rdv.h - how the ranks of a job started by mpirun or srun find each other
 * (rendezvous.c) without dtrain launch: rank 0 runs the job's scheduler in
 * a thread and publishes where it listens, with a secret it made for the
 * job, on a card; every other rank reads the card, takes the secret and
 * joins. DTRAIN_COLL_ROOT, when set, names the address instead and no card
 * is exchanged.
 *
 * How the card travels is a kind behind one ops table, one file per kind,
 * tried in order: rdv_pmix.c hands it over the launcher's own PMIx server
 * (mpirun, srun --mpi=pmix), rdv_file.c writes it to a private file on a
 * directory every rank shares (any launcher that names its job).
 */
#ifndef DT_COLL_RDV_H
#define DT_COLL_RDV_H

#include <stdint.h>

#include "coll/state.h"
#include "net/auth.h"

/* What rank 0 publishes and every other rank reads. */
typedef struct dt__rdv_card {
	char host[256]; /* where the job's scheduler listens */
	int port;
	int size; /* ranks in the job, checked against each reader's own */
	uint8_t secret[DT_AUTH_JOB_SECRET_LEN];
} dt__rdv_card;

/* One job's exchange, as a kind sees it. */
typedef struct dt__rdv {
	const struct dt__rdv_kind *kind;
	int rank, size;
	uint64_t deadline_ns; /* dt__now_ns clock: readers wait until then */
	char path[4096];      /* rdv_file.c: the card's file */
	int published;        /* rank 0 left something that done removes */
} dt__rdv;

typedef struct dt__rdv_kind {
	const char *id;   /* DTRAIN_RENDEZVOUS's name for it: "file" */
	const char *name; /* for messages: "rendezvous file" */
	/* Whether this kind can serve the process's launcher; when it can,
	 * fill what the kind needs in r (the file's path). A malformed
	 * variable is a DT_ECONFIG naming it; 0 in *usable otherwise. */
	dt_err (*prepare)(dt__rdv *r, int *usable);
	/* Rank 0 publishes card; every other rank waits for it (until
	 * r->deadline_ns) and fills card. Whatever the card came through is
	 * checked before use: a card is hostile input. */
	dt_err (*exchange)(dt__rdv *r, dt__rdv_card *card);
	/* Every rank has joined (or the job failed): rank 0 removes what
	 * exchange published. Safe to call more than once. */
	void (*done)(dt__rdv *r);
} dt__rdv_kind;

extern const dt__rdv_kind dt__rdv_pmix;
extern const dt__rdv_kind dt__rdv_file;

/* The card as text (rdv_card.c), at most DT__RDV_CARD_MAX bytes. */
#define DT__RDV_CARD_MAX 1024
void dt__rdv_card_format(const dt__rdv_card *card, char *out, size_t cap);
/* The card in the NUL-terminated text, every field checked; a DT_EPROTO
 * naming what (the file, "PMIx's rank 0") otherwise. */
dt_err dt__rdv_card_parse(const char *what, const char *text,
                          dt__rdv_card *card);

/*
 * Under mpirun or srun (two ranks or more, no DMLC_* variables): join the
 * job's ranks into c->node, rank 0 also starting the in-process scheduler.
 * Nothing to do (DT_OK, c->node NULL) for a process started alone.
 */
dt_err dt__coll_rdv_join(dt_coll *c);
/*
 * The end of what dt__coll_rdv_join started, after c's node stopped: wait
 * for the scheduler thread, remove the card if still there, forget the
 * job's secret. The scheduler's error when it failed, else DT_OK.
 */
dt_err dt__coll_rdv_end(dt_coll *c);

#endif
