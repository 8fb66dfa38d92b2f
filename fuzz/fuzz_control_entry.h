/*
 * fuzz_control_entry.h - the checks of the control-message fuzz target
 * (fuzz/fuzz_control.c), shared with its CTest replay of
 * fuzz/corpus/control. An input is read as a metadata block and given to
 * the real decoders of core/msg.c: ADD_NODE (what a stranger can send the
 * scheduler first), ASSIGN and LOOKUP's answer (what a node reads from
 * "its" scheduler) and LOOKUP's request (what a member asks it). Besides "no
 * crash, no overread, no leak", it traps when:
 *   - a decoder fails without a message, or with a code other than
 *     DT_EPROTO (DT_ENOMEM aside);
 *   - a decoded ADD_NODE has a field out of its limit, or does not encode
 *     back to the bytes it was read from (less any trailing bytes), which
 *     decode to the same values;
 *   - a decoded ASSIGN has an id, a size, a count of nodes on its host or
 *     an entry out of place, or does not encode back to a block, no
 *     longer than the input, that decodes to the same;
 *   - a decoded LOOKUP request (of a job of ids 1..7) is not 8 bytes
 *     naming a range within it, or a decoded answer (2 servers, ids
 *     1..7) has an entry out of place or does not encode back to a
 *     block, no longer than the input, that decodes to the same;
 *   - a decoded LOOKUP of hosts (ids 1..7) is not 8 bytes naming a range
 *     within it, or its answer has a number out of place or does not
 *     encode back to a block, no longer than the input, that decodes to
 *     the same;
 *   - a decoded MEMBERSHIP list (of a job of 5 workers, ids 3..7) is
 *     empty, too long, out of range or not ascending, or does not encode
 *     back to the bytes it was read from;
 *   - a decoded REPORT counters block (obs/stats.c) has counts over their
 *     limits or does not encode back to the same bytes (a busbw that is
 *     not a finite number aside: it is read as 0), and a REPORT event
 *     record (obs/trace.c) that decodes does not encode back to itself;
 *   - a decoded merged REPORT (obs/merge.c, a tree child's) has a count
 *     over its limit, keys or missing ids out of order, a histogram whose
 *     buckets do not add up to its count, or does not encode back to a
 *     block of the input's size that decodes and encodes to the same
 *     bytes; merged with itself it stays within its bounds.
 */
#ifndef DT_FUZZ_CONTROL_ENTRY_H
#define DT_FUZZ_CONTROL_ENTRY_H

#include "fuzz_check.h"
#include <stdlib.h>

#include "core/msg.h"
#include "obs/merge.h"
#include "obs/obs.h"

static void
fuzz_control_failed(dt_err err)
{
	FUZZ_CHECK(err == DT_EPROTO || err == DT_ENOMEM);
	FUZZ_CHECK(dt_errmsg()[0] != '\0');
}

static void
fuzz_control_add_node(const uint8_t *data, size_t size)
{
	dt__msg_add_node a, b;
	dt_wbuf w;
	dt_err err;

	dt__clear_error();
	if ((err = dt__msg_add_node_decode(data, size, &a))) {
		fuzz_control_failed(err);
		return;
	}
	FUZZ_CHECK(a.role == DT_ROLE_SERVER || a.role == DT_ROLE_WORKER);
	FUZZ_CHECK(a.want >= -1 && a.want <= DT_MAX_RANK_WISH);
	FUZZ_CHECK(a.port >= 1 && a.port <= 65535 && a.pid >= 0);
	FUZZ_CHECK(a.num_servers >= 0 && a.num_servers <= DT_MAX_ROLE_NODES);
	FUZZ_CHECK(a.num_workers >= 0 && a.num_workers <= DT_MAX_ROLE_NODES);
	FUZZ_CHECK(memchr(a.host, '\0', sizeof(a.host)) && a.host[0]);
	dt__wbuf_init(&w);
	FUZZ_CHECK(dt__msg_add_node_encode(&a, &w) == DT_OK);
	/* (trailing bytes; or an ADD_NODE without the place token, or
	 * without the host id and endpoint too, which come back as empty
	 * strings) */
	FUZZ_CHECK(
	    w.len <= size || (w.len == size + 4 && !a.token[0]) ||
	    (w.len == size + 12 && !a.hostid[0] && !a.local[0] && !a.token[0]));
	FUZZ_CHECK(memcmp(w.data, data, w.len < size ? w.len : size) == 0);
	FUZZ_CHECK(dt__msg_add_node_decode(w.data, w.len, &b) == DT_OK);
	FUZZ_CHECK(
	    a.role == b.role && a.want == b.want && a.port == b.port &&
	    a.pid == b.pid && a.num_servers == b.num_servers &&
	    a.num_workers == b.num_workers && strcmp(a.host, b.host) == 0 &&
	    strcmp(a.hostid, b.hostid) == 0 && strcmp(a.local, b.local) == 0 &&
	    strcmp(a.token, b.token) == 0);
	dt__wbuf_fini(&w);
}

/* The entries of two decodes of one range are the same. */
static void
fuzz_control_same(const dt_node_entry *x, const dt_node_entry *y, int count)
{
	for (int k = 0; k < count; k++)
		FUZZ_CHECK(x[k].id == y[k].id && x[k].role == y[k].role &&
		           x[k].rank == y[k].rank && x[k].known == y[k].known &&
		           x[k].port == y[k].port && x[k].pid == y[k].pid &&
		           strcmp(x[k].host, y[k].host) == 0 &&
		           strcmp(x[k].hostid, y[k].hostid) == 0 &&
		           strcmp(x[k].local, y[k].local) == 0);
}

/* Each decoded entry sits where its id says, within the job's sizes. */
static void
fuzz_control_entries(const dt_node_entry *e, int first, int count, int ns,
                     int ntable)
{
	FUZZ_CHECK(count >= 0 && count <= DT_DIR_MAX);
	FUZZ_CHECK(count == 0 || (first >= 1 && first + count <= ntable));
	FUZZ_CHECK((count == 0) == (e == NULL));
	for (int k = 0; k < count; k++) {
		FUZZ_CHECK(e[k].id == first + k);
		FUZZ_CHECK(e[k].role ==
		           (first + k <= ns ? DT_ROLE_SERVER : DT_ROLE_WORKER));
		FUZZ_CHECK(e[k].rank == (first + k <= ns ? first + k - 1
		                                         : first + k - 1 - ns));
		FUZZ_CHECK(e[k].known == 0 || e[k].known == 1);
		FUZZ_CHECK(!e[k].known ||
		           (e[k].host[0] && e[k].port >= 1 &&
		            e[k].port <= 65535 && e[k].pid >= 0));
		FUZZ_CHECK(memchr(e[k].host, '\0', sizeof(e[k].host)));
	}
}

static void
fuzz_control_assign(const uint8_t *data, size_t size)
{
	dt__msg_assign a, b;
	dt_node_entry *t, *t2;
	int first, count, first2, count2;
	dt_wbuf w;
	dt_err err;

	dt__clear_error();
	if ((err = dt__msg_assign_decode(data, size, &a, &first, &count, &t))) {
		fuzz_control_failed(err);
		return;
	}
	FUZZ_CHECK(a.num_servers >= 0 && a.num_servers <= DT_MAX_ROLE_NODES);
	FUZZ_CHECK(a.slots >= 1 && a.slots <= DT_MAX_ROLE_NODES);
	FUZZ_CHECK(a.id >= 1 && a.id <= a.num_servers + a.slots);
	FUZZ_CHECK(a.here >= 1 && a.here <= a.num_servers + a.slots);
	FUZZ_CHECK(a.sched_pid >= 0);
	fuzz_control_entries(t, first, count, a.num_servers,
	                     1 + a.num_servers + a.slots);
	/* It encodes back to a block no longer than the input (a known
	 * byte over 1 is refused, a host with a NUL inside too), which
	 * decodes to the same. */
	dt__wbuf_init(&w);
	FUZZ_CHECK(dt__msg_assign_encode(&a, first, count, t, &w) == DT_OK);
	FUZZ_CHECK(w.len <= size);
	FUZZ_CHECK(dt__msg_assign_decode(w.data, w.len, &b, &first2, &count2,
	                                 &t2) == DT_OK);
	FUZZ_CHECK(a.id == b.id && a.num_servers == b.num_servers &&
	           a.slots == b.slots && a.epoch == b.epoch &&
	           a.here == b.here && a.sched_pid == b.sched_pid &&
	           first == first2 && count == count2);
	fuzz_control_same(t, t2, count);
	free(t2);
	dt__wbuf_fini(&w);
	free(t);
}

/* ASSIGN with the node's place in the control tree and its parent's
 * entry: the job's sizes come from the assignment itself. */
static void
fuzz_control_assign_tree(const uint8_t *data, size_t size)
{
	dt__msg_assign a, b;
	dt__tree_place p, q;
	dt_node_entry *t, *t2, parent, parent2;
	int first, count, first2, count2, sum_s, sum_w;
	dt_wbuf w;
	dt_err err;

	dt__clear_error();
	if ((err = dt__msg_assign_tree_decode(data, size, &a, &first, &count,
	                                      &t, &p, &parent))) {
		fuzz_control_failed(err);
		return;
	}
	FUZZ_CHECK(a.id >= 1 && a.id <= a.num_servers + a.slots);
	fuzz_control_entries(t, first, count, a.num_servers,
	                     1 + a.num_servers + a.slots);
	FUZZ_CHECK(p.parent >= 0 && p.parent <= a.num_servers + a.slots &&
	           p.parent != a.id);
	FUZZ_CHECK(p.nkids >= 0 && p.nkids <= DT_TREE_KIDS_MAX);
	sum_s = a.id <= a.num_servers;
	sum_w = a.id > a.num_servers;
	for (int c = 0; c < p.nkids; c++) {
		FUZZ_CHECK(p.kid[c].id >= 1 && p.kid[c].id != a.id &&
		           p.kid[c].id != p.parent &&
		           p.kid[c].id <= a.num_servers + a.slots);
		FUZZ_CHECK(c == 0 || p.kid[c].id > p.kid[c - 1].id);
		sum_s += p.kid[c].servers;
		sum_w += p.kid[c].workers;
	}
	FUZZ_CHECK(p.servers == sum_s && p.workers == sum_w);
	FUZZ_CHECK(!parent.known ||
	           (p.parent > 0 && parent.id == p.parent && parent.host[0] &&
	            parent.port >= 1 && parent.port <= 65535));
	/* It encodes back to no more bytes, which decode to the same. */
	dt__wbuf_init(&w);
	FUZZ_CHECK(dt__msg_assign_encode(&a, first, count, t, &w) == DT_OK);
	FUZZ_CHECK(dt__msg_assign_tree_encode(&p, parent.known ? &parent : NULL,
	                                      &w) == DT_OK);
	FUZZ_CHECK(w.len <= size);
	FUZZ_CHECK(dt__msg_assign_tree_decode(w.data, w.len, &b, &first2,
	                                      &count2, &t2, &q,
	                                      &parent2) == DT_OK);
	FUZZ_CHECK(a.id == b.id && first == first2 && count == count2 &&
	           p.parent == q.parent && p.nkids == q.nkids &&
	           parent.known == parent2.known);
	fuzz_control_same(t, t2, count);
	free(t2);
	dt__wbuf_fini(&w);
	free(t);
}

/* LOOKUP, both ways, in a job of 2 servers and 5 workers (ids 1..7). */
static void
fuzz_control_lookup(const uint8_t *data, size_t size)
{
	dt_node_entry *t, *t2;
	int first, count, first2, count2;
	dt_wbuf w;
	dt_err err;

	dt__clear_error();
	if ((err = dt__msg_lookup_decode(data, size, 8, &first, &count)))
		fuzz_control_failed(err);
	else
		FUZZ_CHECK(size == 8 && first >= 1 && count >= 1 &&
		           first + count <= 8);
	dt__clear_error();
	if ((err = dt__msg_dir_decode(data, size, 2, 8, &first, &count, &t))) {
		fuzz_control_failed(err);
		return;
	}
	FUZZ_CHECK(count >= 1);
	fuzz_control_entries(t, first, count, 2, 8);
	dt__wbuf_init(&w);
	FUZZ_CHECK(dt__msg_dir_encode(first, count, t, &w) == DT_OK);
	FUZZ_CHECK(w.len <= size);
	FUZZ_CHECK(dt__msg_dir_decode(w.data, w.len, 2, 8, &first2, &count2,
	                              &t2) == DT_OK);
	FUZZ_CHECK(first == first2 && count == count2);
	fuzz_control_same(t, t2, count);
	free(t2);
	dt__wbuf_fini(&w);
	free(t);
}

static void
fuzz_control_report(const uint8_t *data, size_t size)
{
	dt_stats s, s2;
	uint8_t *p;
	size_t len;
	dt_err err;

	dt__clear_error();
	if ((err = dt__stats_decode(data, size, &s))) {
		fuzz_control_failed(err);
	} else {
		FUZZ_CHECK(s.npeers >= 0 && s.npeers <= DT_STATS_MAX_PEERS);
		FUZZ_CHECK(s.nkeys >= 0 && s.nkeys <= DT_STATS_MAX_KEYS + 1);
		FUZZ_CHECK(s.coll_busbw >= 0);
		FUZZ_CHECK(dt__stats_encode(&s, &p, &len) == DT_OK);
		FUZZ_CHECK(len == size);
		/* (bytes 20..27: busbw, read as 0 when not finite) */
		FUZZ_CHECK(memcmp(p, data, 20) == 0 &&
		           memcmp(p + 28, data + 28, size - 28) == 0);
		FUZZ_CHECK(dt__stats_decode(p, len, &s2) == DT_OK);
		FUZZ_CHECK(s2.npeers == s.npeers && s2.nkeys == s.nkeys &&
		           s2.steps == s.steps && s2.wall_ns == s.wall_ns);
		dt_stats_fini(&s2);
		free(p);
		dt_stats_fini(&s);
	}
	for (size_t off = 0;
	     off + DT_TEV_WIRE <= size && off < 64 * DT_TEV_WIRE;
	     off += DT_TEV_WIRE) {
		dt__tev e;
		uint8_t back[DT_TEV_WIRE];

		dt__clear_error();
		if ((err = dt__tev_decode(data + off, &e))) {
			fuzz_control_failed(err);
			continue;
		}
		FUZZ_CHECK(e.kind < DT_EV_COUNT && e.tid < DT_TID_COUNT);
		dt__tev_encode(&e, 0, back);
		FUZZ_CHECK(memcmp(back, data + off, DT_TEV_WIRE) == 0);
	}
}

static void
fuzz_control_membership(const uint8_t *data, size_t size)
{
	int ids[5], n;
	dt_wbuf w;
	dt_err err;

	dt__clear_error();
	if ((err = dt__msg_membership_decode(data, size, 3, 5, ids, &n))) {
		fuzz_control_failed(err);
		return;
	}
	FUZZ_CHECK(n >= 1 && n <= 5 && (size_t)n * 4 == size);
	for (int i = 0; i < n; i++)
		FUZZ_CHECK(ids[i] >= 3 && ids[i] <= 7 &&
		           (i == 0 || ids[i] > ids[i - 1]));
	dt__wbuf_init(&w);
	FUZZ_CHECK(dt__msg_membership_encode(ids, n, &w) == DT_OK);
	FUZZ_CHECK(w.len == size && memcmp(w.data, data, size) == 0);
	dt__wbuf_fini(&w);
}

/* TREE, as node 3 of a job of 2 servers and 5 workers (ids 1..7). */
/* LOOKUP's hosts-only form, the request and the answer (a job of ids
 * 1..7): a request is 8 bytes naming a range within it; an answer's
 * numbers cover its range, each below 8 or unknown, and encode back to a
 * block, no longer than the input, that decodes to the same. */
static void
fuzz_control_hosts(const uint8_t *data, size_t size)
{
	uint32_t *v, *v2;
	int first, count, first2, count2;
	dt_wbuf w;
	dt_err err;

	dt__clear_error();
	if ((err = dt__msg_hosts_lookup_decode(data, size, 8, &first, &count)))
		fuzz_control_failed(err);
	else
		FUZZ_CHECK(size == 8 && first >= 1 && count >= 1 &&
		           first + count <= 8);
	dt__clear_error();
	if ((err = dt__msg_hosts_decode(data, size, 8, &first, &count, &v))) {
		fuzz_control_failed(err);
		return;
	}
	FUZZ_CHECK(first >= 1 && count >= 1 && first + count <= 8);
	for (int i = 0; i < count; i++)
		FUZZ_CHECK(v[i] < 8 || v[i] == DT_HOST_UNKNOWN);
	dt__wbuf_init(&w);
	FUZZ_CHECK(dt__msg_hosts_encode(first, count, v, &w) == DT_OK);
	FUZZ_CHECK(w.len <= size);
	FUZZ_CHECK(dt__msg_hosts_decode(w.data, w.len, 8, &first2, &count2,
	                                &v2) == DT_OK);
	FUZZ_CHECK(first2 == first && count2 == count &&
	           memcmp(v, v2, sizeof(*v) * (size_t)count) == 0);
	free(v2);
	free(v);
	dt__wbuf_fini(&w);
}

static void
fuzz_control_tree(const uint8_t *data, size_t size)
{
	dt__tree_place p, q;
	int sum_s = 0, sum_w = 1; /* (node 3: a worker) */
	dt_wbuf w;
	dt_err err;

	dt__clear_error();
	if ((err = dt__msg_tree_decode(data, size, 3, 2, 5, &p))) {
		fuzz_control_failed(err);
		return;
	}
	FUZZ_CHECK(p.parent >= 0 && p.parent <= 7 && p.parent != 3);
	FUZZ_CHECK(p.nkids >= 0 && p.nkids <= 7);
	for (int c = 0; c < p.nkids; c++) {
		FUZZ_CHECK(p.kid[c].id >= 1 && p.kid[c].id <= 7 &&
		           p.kid[c].id != 3 && p.kid[c].id != p.parent);
		FUZZ_CHECK(c == 0 || p.kid[c].id > p.kid[c - 1].id);
		FUZZ_CHECK(p.kid[c].servers >= 0 && p.kid[c].servers <= 2 &&
		           p.kid[c].workers >= 0 && p.kid[c].workers <= 5 &&
		           p.kid[c].servers + p.kid[c].workers >= 1);
		sum_s += p.kid[c].servers;
		sum_w += p.kid[c].workers;
	}
	FUZZ_CHECK(p.servers == sum_s && p.workers == sum_w);
	FUZZ_CHECK(p.servers <= 2 && p.workers <= 5);
	/* It encodes back to the same bytes. */
	dt__wbuf_init(&w);
	FUZZ_CHECK(dt__msg_tree_encode(&p, &w) == DT_OK);
	FUZZ_CHECK(w.len == size && memcmp(w.data, data, size) == 0);
	FUZZ_CHECK(dt__msg_tree_decode(w.data, w.len, 3, 2, 5, &q) == DT_OK);
	FUZZ_CHECK(q.nkids == p.nkids && q.parent == p.parent);
	dt__wbuf_fini(&w);
}

/* TREE_LOST, in a job of 7 nodes besides the scheduler (ids 1..7). */
static void
fuzz_control_tree_lost(const uint8_t *data, size_t size)
{
	dt__msg_tree_lost l, q;
	dt_wbuf w;
	dt_err err;

	dt__clear_error();
	if ((err = dt__msg_tree_lost_decode(data, size, 8, &l))) {
		fuzz_control_failed(err);
		return;
	}
	FUZZ_CHECK(size == 16);
	FUZZ_CHECK(l.lost >= 1 && l.lost <= 7);
	FUZZ_CHECK(l.reason == DT_TREE_LOST_SILENT ||
	           l.reason == DT_TREE_LOST_CLOSED);
	FUZZ_CHECK(l.silent_ns <= DT_TREE_LOST_SILENT_MAX);
	/* It encodes back to the same bytes. */
	dt__wbuf_init(&w);
	FUZZ_CHECK(dt__msg_tree_lost_encode(&l, &w) == DT_OK);
	FUZZ_CHECK(w.len == size && memcmp(w.data, data, size) == 0);
	FUZZ_CHECK(dt__msg_tree_lost_decode(w.data, w.len, 8, &q) == DT_OK);
	FUZZ_CHECK(q.lost == l.lost && q.silent_ns == l.silent_ns);
	dt__wbuf_fini(&w);
}

static void
fuzz_control_merged_checks(const dt__merged *m)
{
	FUZZ_CHECK(m->nkeys <= DT_STATS_MAX_KEYS &&
	           m->nmissing <= DT_MERGE_MISSING &&
	           m->nslow <= DT_MERGE_TOP && m->nbusy <= DT_MERGE_TOP);
	for (uint32_t i = 1; i < m->nkeys; i++)
		FUZZ_CHECK(m->keys[i - 1].key < m->keys[i].key);
	for (uint32_t i = 1; i < m->nmissing; i++)
		FUZZ_CHECK(m->missing[i - 1] < m->missing[i]);
	FUZZ_CHECK(m->coll_busbw_sum >= 0);
}

static void
fuzz_control_merged(const uint8_t *data, size_t size)
{
	/* (static: the replay test calls this for every cut of every
	 * input, and a block is 190 KB) */
	static dt__merged mb, mb2;
	dt__merged *m = &mb, *m2 = &mb2;
	uint8_t *p, *p2;
	size_t len, len2;
	dt_err err;

	dt__clear_error();
	if ((err = dt__merged_decode(data, size, m))) {
		fuzz_control_failed(err);
		return;
	}
	fuzz_control_merged_checks(m);
	FUZZ_CHECK(dt__merged_encode(m, &p, &len) == DT_OK);
	FUZZ_CHECK(len == size && len <= dt__merged_max_bytes());
	FUZZ_CHECK(dt__merged_decode(p, len, m2) == DT_OK);
	FUZZ_CHECK(dt__merged_encode(m2, &p2, &len2) == DT_OK);
	FUZZ_CHECK(len2 == len && memcmp(p, p2, len) == 0);
	free(p2);
	free(p);
	/* merged with itself: still within its bounds */
	dt__merged_merge(m2, m);
	fuzz_control_merged_checks(m2);
	FUZZ_CHECK(dt__merged_encode(m2, &p, &len) == DT_OK);
	FUZZ_CHECK(len <= dt__merged_max_bytes());
	free(p);
}

static int
dt_fuzz_control_one(const uint8_t *data, size_t size)
{
	fuzz_control_merged(data, size);
	fuzz_control_tree_lost(data, size);
	fuzz_control_tree(data, size);
	fuzz_control_membership(data, size);
	fuzz_control_add_node(data, size);
	fuzz_control_assign(data, size);
	fuzz_control_assign_tree(data, size);
	fuzz_control_lookup(data, size);
	fuzz_control_hosts(data, size);
	fuzz_control_report(data, size);
	return 0;
}

#endif
