/*
 * srv_elastic.c - a parameter server in an elastic job (DTRAIN_ELASTIC=1,
 * docs/elastic.md): the membership the scheduler sends it, the dist_sync
 * rounds sized by it, and the epoch every push carries.
 *
 * The scheduler sends each server the same MEMBERSHIP messages as the
 * workers (core/elastic.c). A round of a key then waits for one push from
 * each live worker of the membership, not from every worker the job
 * started with; the server's tables have a row for every worker the job
 * may grow to (DTRAIN_ELASTIC_MAX), and a worker that joins is counted
 * from the membership that takes it in. When the membership changes, every open
 * round is dropped (the store kinds' discard op): a lost worker's partial push
 * is never applied, and the survivors' pushes of that round are answered
 * DT_EMEMBERSHIP, so that they go back to their last commit and compute
 * the round again in the new membership. Nothing is kept to roll back on
 * the server: in dist_sync the optimizer of an elastic job runs on the
 * workers, so a key's value is only the last round's sum.
 *
 * Every single-key push names the membership its worker computes in
 * (arg2, DT_KV_EPOCH_SHIFT): the one the worker took last, which may lag
 * behind the scheduler's or run ahead of this server's. A push of an older
 * membership than the server's is refused by name and never counted; one
 * of a newer membership (the worker took it before this server heard of
 * it) is kept and handled when the membership comes.
 *
 * Threads: all of it runs in the node's I/O thread, with the stores.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_impl.h"
#include "kv/server.h"

int
srv_round_size(const kv_server *s)
{
	return s->elastic ? s->live : s->nworkers;
}

dt_err
srv_elastic_start(kv_server *s)
{
	s->elastic = dt__node_elastic(s->node);
	if (!s->elastic)
		return DT_OK;
	s->member = calloc((size_t)DT_MAX(s->nworkers, 1), 1);
	if (s->member == NULL)
		return dt__fail(DT_ENOMEM,
		                "elastic server: membership of %d "
		                "workers",
		                s->nworkers);
	/* (membership 0: the workers the job started with; those that join
	 * come with a later one) */
	s->live = DT_MIN(dt_node_num_workers(s->node), s->nworkers);
	memset(s->member, 1, (size_t)s->live);
	return DT_OK;
}

void
srv_elastic_free(kv_server *s)
{
	free(s->member);
	s->member = NULL;
	srv_kept_free(s->early);
	s->early = NULL;
}

int
srv_elastic_refuse(kv_server *s, int worker, const dt_msg_hdr *h)
{
	if (!s->elastic)
		return 0;
	srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_ENOTSUP,
	                "%s of key %llu in an elastic job: its servers "
	                "serve single-key calls only (dt_kv_init, "
	                "dt_kv_push, dt_kv_pull, dt_kv_pushpull)",
	                dt__kv_op_name(h->cmd), (unsigned long long)h->key);
	return 1;
}

int
srv_elastic_admit(kv_server *s, int worker, dt_msg_hdr *h, const uint8_t *meta,
                  const void *payload)
{
	uint64_t ep = (h->arg2 >> DT_KV_EPOCH_SHIFT) & DT_KV_EPOCH_MAX;
	const char *op = dt__kv_op_name(h->cmd);

	if (!s->elastic) {
		if (ep == 0)
			return 1;
		srv_reply_error(s, worker, h->cmd, h->seq, h->key, DT_EPROTO,
		                "%s of key %llu: reserved encoding bits set "
		                "(%#x; bits 16-31 name a membership in an "
		                "elastic job only)",
		                op, (unsigned long long)h->key,
		                (unsigned)h->arg2);
		return 0;
	}
	h->arg2 &= ~(DT_KV_EPOCH_MAX << DT_KV_EPOCH_SHIFT);
	if (ep < s->epoch) {
		srv_reply_error(
		    s, worker, h->cmd, h->seq, h->key, DT_EMEMBERSHIP,
		    "%s of key %llu from worker %d: membership %llu is over "
		    "(the servers are at membership %llu): a push of an old "
		    "membership is never counted",
		    op, (unsigned long long)h->key, worker,
		    (unsigned long long)ep, (unsigned long long)s->epoch);
		return 0;
	}
	if (ep > s->epoch) {
		/* The worker took a membership this server has not heard
		 * of yet: its MEMBERSHIP is on the way from the scheduler. */
		h->arg2 |= (uint32_t)(ep << DT_KV_EPOCH_SHIFT);
		if (srv_keep(&s->early, worker, h, meta, payload))
			srv_reply_error(
			    s, worker, h->cmd, h->seq, h->key, DT_ENOMEM,
			    "%s of key %llu: out of memory keeping a "
			    "push of membership %llu",
			    op, (unsigned long long)h->key,
			    (unsigned long long)ep);
		return 0;
	}
	if (!s->member[worker]) {
		srv_reply_error(s, worker, h->cmd, h->seq, h->key,
		                DT_EMEMBERSHIP,
		                "%s of key %llu from worker %d, which is not "
		                "in membership %llu",
		                op, (unsigned long long)h->key, worker,
		                (unsigned long long)s->epoch);
		return 0;
	}
	return 1;
}

/* The pushes kept for a membership that has come now: handled in the
 * order they came (each checked again: it may be old by now). */
static void
take_early(kv_server *s)
{
	srv_kept *q = s->early, **keep = &s->early;

	s->early = NULL;
	while (q) {
		srv_kept *next = q->next;
		uint64_t ep =
		    (q->h.arg2 >> DT_KV_EPOCH_SHIFT) & DT_KV_EPOCH_MAX;

		q->next = NULL;
		if (ep > s->epoch) {
			*keep = q;
			keep = &q->next;
		} else {
			if (srv_elastic_admit(s, q->worker, &q->h, q->meta,
			                      q->payload))
				srv_single(s, q->worker, &q->h, q->meta,
				           q->payload, 0);
			srv_kept_free(q);
		}
		q = next;
	}
}

void
srv_on_membership(void *arg, dt_node *n, uint64_t epoch, int gone, int lost)
{
	kv_server *s = arg;
	int *ids = malloc(sizeof(int) * (size_t)DT_MAX(s->nworkers, 1));
	int count, base = 1 + s->nservers;
	uint64_t was = s->epoch;
	char why[160], name[64];

	if (!s->elastic || ids == NULL) {
		free(ids);
		if (s->elastic)
			dt__node_set_fatal(n, DT_ENOMEM,
			                   "no memory for membership %llu",
			                   (unsigned long long)epoch);
		return;
	}
	count = dt__node_membership(n, &epoch, ids, s->nworkers);
	memset(s->member, 0, (size_t)s->nworkers);
	s->live = 0;
	for (int i = 0; i < count && i < s->nworkers; i++)
		if (ids[i] >= base && ids[i] - base < s->nworkers) {
			s->member[ids[i] - base] = 1;
			s->live++;
		}
	free(ids);
	s->epoch = epoch;
	if (gone > 0)
		snprintf(why, sizeof(why), "membership %llu -> %llu (%s %s)",
		         (unsigned long long)was, (unsigned long long)epoch,
		         dt__node_name(n, gone, name, sizeof(name)),
		         lost ? "was lost" : "left");
	else
		snprintf(why, sizeof(why), "membership %llu -> %llu",
		         (unsigned long long)was, (unsigned long long)epoch);
	DT_LOG(1, "%s: rounds wait for %d workers", why, s->live);
	for (const srv_kind *const *kind = srv_kinds; *kind; kind++)
		if ((*kind)->discard)
			(*kind)->discard(s, why);
	take_early(s);
}
