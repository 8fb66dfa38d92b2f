/*
 * srv_dense_stall.c - the dense store kind's part in the stall report
 * (srv_stall.c asks, server.h: srv_kind's describe and stalled): what a
 * key's entry holds of a worker's request - in its open round, waiting
 * for the next one, an init waiting for worker 0's value, parked until the
 * key's init - and which workers' pushes an open round still lacks.
 *
 * Nothing here runs on the way of a push: srv_dense.c only stamps the
 * time a round takes its first push. Threads: the node's I/O thread, as
 * the rest of the server.
 */
#include <stdio.h>
#include <string.h>

#include "kv/server.h"
#include "kv/srv_dense.h"

/* Whether worker takes part in the rounds (an elastic job's membership). */
static int
stall_in_rounds(const kv_server *s, int worker)
{
	return !s->elastic || (s->member && s->member[worker]);
}

/* Append the workers with (has = 1) or without a push in e's open round:
 * "0, 2" (at most 16 named, then "and N more"). */
static size_t
stall_workers(const kv_server *s, const entry *e, int has, char *buf,
              size_t cap)
{
	size_t len = 0;
	int named = 0, more = 0;

	buf[0] = '\0';
	for (int w = 0; w < s->nworkers; w++) {
		if (!stall_in_rounds(s, w) || !e->pushed[w] != !has)
			continue;
		if (named == 16) {
			more++;
			continue;
		}
		if (len < cap)
			len += (size_t)snprintf(buf + len, cap - len, "%s%d",
			                        named ? ", " : "", w);
		named++;
	}
	if (more && len < cap)
		len += (size_t)snprintf(buf + len, cap - len, " and %d more",
		                        more);
	return len < cap ? len : cap - 1;
}

/* "round 12 of key 3 has the pushes of workers 0, 2; it waits for worker
 * 1" (a big key's slice here says so). */
static void
stall_round_line(const kv_server *s, const entry *e, char *buf, size_t cap)
{
	char has[128], lacks[128];
	uint64_t round = 0;

	stall_workers(s, e, 1, has, sizeof(has));
	stall_workers(s, e, 0, lacks, sizeof(lacks));
	for (int w = 0; w < s->nworkers; w++)
		if (stall_in_rounds(s, w) && e->applied[w] + 1 > round)
			round = e->applied[w] + 1;
	snprintf(buf, cap,
	         "round %llu of key %llu%s has the pushes of worker%s %s; "
	         "it waits for worker%s %s",
	         (unsigned long long)round, (unsigned long long)e->key,
	         e->len < e->n ? " (this server's slice)" : "",
	         strchr(has, ',') ? "s" : "", has[0] ? has : "(none)",
	         strchr(lacks, ',') ? "s" : "", lacks[0] ? lacks : "(none)");
}

/* Log e's open round, once (the worker asking about it has waited
 * DT_KV_STALL: the server says so too, whether or not a message has
 * come since to look at its rounds). A server whose own DT_KV_STALL is 0
 * only answers (its rounds' times are not taken). */
static void
stall_tell(kv_server *s, entry *e, const char *line)
{
	if (!s->stall_ns || !s->sync || e->stall_told || e->npushed == 0)
		return;
	e->stall_told = 1;
	dt__log(
	    0, "stall: %s, open for %llu s", line,
	    (unsigned long long)((dt__now_ns() - e->t_open) / 1000000000ull));
}

int
dense_describe(kv_server *s, int worker, const dt_kv_stall_ask *a, char *buf,
               size_t cap)
{
	entry *e = dt__table_count(&s->keys) ? dense_find(s, a->key) : NULL;
	char line[512];

	if (e == NULL)
		return 0;
	for (waiter *w = e->answers; w; w = w->next)
		if (w->worker == worker && w->seq == a->seq) {
			stall_round_line(s, e, line, sizeof(line));
			stall_tell(s, e, line);
			snprintf(buf, cap, "in the open round: %s", line);
			return 1;
		}
	for (deferred *d = e->later; d; d = d->next)
		if (d->worker == worker && d->seq == a->seq) {
			stall_round_line(s, e, line, sizeof(line));
			stall_tell(s, e, line);
			snprintf(buf, cap,
			         "a second push of this worker in the round, "
			         "held for the next one: %s",
			         line);
			return 1;
		}
	for (deferred *d = e->pulls; d; d = d->next)
		if (d->worker == worker && d->seq == a->seq) {
			stall_round_line(s, e, line, sizeof(line));
			stall_tell(s, e, line);
			snprintf(buf, cap,
			         "a pull held until this worker's %llu pushes "
			         "before it join their rounds: %s",
			         (unsigned long long)d->ahead, line);
			return 1;
		}
	for (waiter *w = e->inits; w; w = w->next)
		if (w->worker == worker && w->seq == a->seq) {
			snprintf(buf, cap,
			         "the init of key %llu waits for worker 0's "
			         "value",
			         (unsigned long long)e->key);
			return 1;
		}
	for (srv_kept *q = e->parked; q; q = q->next)
		if (q->worker == worker && q->h.seq == a->seq) {
			snprintf(buf, cap,
			         "parked behind the replays: this server took "
			         "a lost one's place and key %llu has no init "
			         "yet",
			         (unsigned long long)e->key);
			return 1;
		}
	return 0;
}

void
dense_stalled(kv_server *s, uint64_t now)
{
	dt_table_iter it;
	char line[512];

	for (dt_hnode *h = dt__table_first(&s->keys, &it); h;
	     h = dt__table_next(&it)) {
		entry *e = DT_CONTAINER_OF(h, entry, hn);

		if (!s->sync || e->npushed == 0 || e->stall_told ||
		    now - e->t_open < s->stall_ns)
			continue;
		stall_round_line(s, e, line, sizeof(line));
		stall_tell(s, e, line);
	}
}
