/*
 * reform.c - an elastic communicator's side of a membership change
 * (DTRAIN_ELASTIC=1; core/elastic.c keeps the membership): noting a
 * change - a lost rank, a failed send, the scheduler's MEMBERSHIP - and
 * failing operations with DT_EMEMBERSHIP until the program takes it, and
 * taking it (dt__coll_reform): ranks become positions in the new sorted
 * list of node ids, over the connections the node already has, and
 * sequence numbers start at the new epoch's (DT__COLL_EPOCH_SHIFT), so a
 * message of the old membership is below done_seq and dropped.
 *
 * The hooks run in the node's I/O thread; dt__coll_reform in the caller's
 * between operations (coll/elastic.c). Everything is under c->mu.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/algo.h"
#include "coll/comm.h"
#include "coll/p2p.h"

/* (mu held) Note a membership change not yet taken, and fail the
 * operation in flight with it: every later one fails the same way until
 * the program takes the change (dt__coll_reform). */
void
dt__coll_elastic_change(dt_coll *c, const char *fmt, ...)
{
	va_list ap;

	if (!c->changing) {
		va_start(ap, fmt);
		vsnprintf(c->change_msg, sizeof(c->change_msg), fmt, ap);
		va_end(ap);
		c->changing = 1;
	}
	if (c->cur && !c->cur->err) {
		char kind[64];

		snprintf(kind, sizeof(kind), "%s",
		         dt__coll_kind_name(c->cur->kind));
		dt__coll_op_fail(c->cur, DT_EMEMBERSHIP, 0, "%s #%llu: %s",
		                 kind, (unsigned long long)c->cur->num,
		                 c->change_msg);
	}
	dt__coll_wake(c);
	pthread_cond_broadcast(&c->done_cv);
}

/*
 * An elastic communicator lost peer_id. A clean leaving (DT_ECLOSED: it
 * said BYE) that nothing running needs is no change: a rank that
 * finished may go first, and a scheduled removal's membership comes from
 * the scheduler. Anything else is a change, named by the epoch it leads
 * to; the scheduler's MEMBERSHIP follows.
 */
void
dt__coll_elastic_lost(dt_coll *c, int peer_id, dt_err err)
{
	int r;

	pthread_mutex_lock(&c->mu);
	r = dt__coll_rank_of_id(c, peer_id);
	if (r < 0 || r == c->rank) {
		pthread_mutex_unlock(&c->mu);
		return; /* not (any more) a member */
	}
	c->dead[r] = 1;
	if (c->ext[r] && c->cur) {
		c->ext[r] = 0;
		c->cur->io_refs--;
	}
	dt__coll_p2p_lost(c, r, DT_EMEMBERSHIP, "a rank left");
	if (err == DT_ECLOSED &&
	    !(c->cur && dt__coll_algo_needs(c, c->cur, r))) {
		pthread_mutex_unlock(&c->mu);
		return;
	}
	dt__coll_elastic_change(c, "rank %d left (membership %llu -> %llu)", r,
	                        (unsigned long long)c->epoch,
	                        (unsigned long long)c->epoch + 1);
	pthread_mutex_unlock(&c->mu);
}

/*
 * The scheduler's MEMBERSHIP came (I/O thread). A worker that left on
 * its schedule did so at a commit, where every rank takes the change: the
 * operation a slower rank is still finishing before that commit had all
 * the leaver's data and must not fail. A loss fails what runs.
 *
 * While the program is taking a change (syncing), a newer membership
 * that drops one of the ranks it is re-forming over is a change too,
 * whatever its kind: that rank will never meet the sync (it left, or
 * left on schedule while another leaving was being taken), so the sync
 * is failed at once and the program re-forms over the newest membership
 * instead of waiting for its timeout.
 */
void
dt__coll_on_membership(void *arg, dt_node *n, uint64_t epoch, int gone,
                       int lost)
{
	dt_coll *c = arg;

	(void)n;
	pthread_mutex_lock(&c->mu);
	if (epoch > c->epoch) {
		int r = dt__coll_rank_of_id(c, gone);

		if (!lost && !(c->syncing && r >= 0 && r != c->rank)) {
			pthread_mutex_unlock(&c->mu);
			return;
		}
		if (epoch > c->change_epoch)
			c->change_epoch = epoch;
		if (r >= 0)
			dt__coll_elastic_change(
			    c,
			    "rank %d left (membership %llu -> "
			    "%llu)",
			    r, (unsigned long long)c->epoch,
			    (unsigned long long)epoch);
		else
			dt__coll_elastic_change(c, "membership %llu -> %llu",
			                        (unsigned long long)c->epoch,
			                        (unsigned long long)epoch);
	}
	pthread_mutex_unlock(&c->mu);
}

/* (mu held) The ranks and hosts of the membership ids[0..n). */
static void
set_ranks(dt_coll *c, const int *ids, int n, int rank)
{
	const dt_node_entry *me = dt__node_entry(c->node, ids[rank]);

	for (int i = 0; i < c->nworkers; i++)
		c->rank_of[i] = -1;
	for (int i = 0; i < n; i++) {
		c->ids[i] = ids[i];
		c->rank_of[ids[i] - c->base_id] = i;
	}
	c->size = n;
	c->rank = rank;
	c->local_rank = 0;
	c->local_size = 0;
	for (int r = 0; r < n; r++) {
		const dt_node_entry *e = dt__node_entry(c->node, ids[r]);

		if (me == NULL || e == NULL || strcmp(e->host, me->host))
			continue;
		if (r < rank)
			c->local_rank++;
		c->local_size++;
	}
	memset(c->dead, 0, (size_t)c->nworkers);
	memset(c->ext, 0, (size_t)c->nworkers);
	memset(c->stall_reply, 0, sizeof(int64_t) * (size_t)c->nworkers);
}

/* (mu held) Early messages of the new epoch, sent by faster ranks, were
 * filed under their old ranks (or, from a worker that joins, under no
 * rank): give them their new ones, by node id. */
static void
remap_early(dt_coll *c, const int *ids, int n)
{
	dt_lnode *l, *next;

	for (l = dt__list_first(&c->early); l; l = next) {
		coll_early *e = DT_CONTAINER_OF(l, coll_early, link);
		int id = e->id, to = -1;

		next = dt__list_next(&c->early, l);
		for (int i = 0; i < n; i++)
			if (ids[i] == id)
				to = i;
		if (to >= 0) {
			e->peer = to;
			continue;
		}
		dt__list_remove(l);
		c->eq_bytes -=
		    (e->payload ? e->h.payload_len : 0) + e->h.meta_len;
		dt__coll_early_free(e);
	}
}

dt_err
dt__coll_reform(dt_coll *c, int *changed)
{
	uint64_t epoch;
	int *ids, n, pos = -1, dead = -1, old_size;
	dt_err err = DT_OK;

	*changed = 0;
	if (!c->elastic || c->node == NULL)
		return DT_OK;
	ids = malloc(sizeof(int) * (size_t)c->nworkers);
	if (ids == NULL)
		return dt__fail(DT_ENOMEM, "membership of %d", c->nworkers);
	n = dt__node_membership(c->node, &epoch, ids, c->nworkers);
	for (int i = 0; i < n && i < c->nworkers; i++)
		if (ids[i] == dt__node_id(c->node))
			pos = i;
	pthread_mutex_lock(&c->mu);
	if (epoch <= c->epoch)
		goto done;
	if (n < 1 || n > c->nworkers || pos < 0) {
		err = dt__fail(DT_EMEMBERSHIP,
		               "this worker (node %d) is not in membership "
		               "%llu",
		               dt__node_id(c->node), (unsigned long long)epoch);
		goto done;
	}
	/* A member of the new list may be lost already (its loss came
	 * before the scheduler's word on it): the change goes on. */
	for (int i = 0; i < n; i++) {
		int r = dt__coll_rank_of_id(c, ids[i]);

		if (r >= 0 && c->dead[r])
			dead = i;
	}
	old_size = c->size;
	remap_early(c, ids, n);
	set_ranks(c, ids, n, pos);
	c->epoch = epoch;
	c->seq_base = c->next_seq = c->done_seq = epoch << DT__COLL_EPOCH_SHIFT;
	dt__coll_early_purge(c);
	/* A newer membership announced as a change while this one was read
	 * stays pending: the sync over this one fails at once. */
	if (c->change_epoch <= epoch) {
		c->changing = 0;
		c->change_msg[0] = '\0';
	}
	if (dead >= 0)
		dt__coll_elastic_change(
		    c, "rank %d left (membership %llu -> %llu)", dead,
		    (unsigned long long)epoch, (unsigned long long)epoch + 1);
	*changed = 1;
	DT_LOG(1, "collectives: membership %llu: rank %d of %d (was %d ranks)",
	       (unsigned long long)epoch, c->rank, c->size, old_size);
done:
	pthread_mutex_unlock(&c->mu);
	free(ids);
	return err;
}
