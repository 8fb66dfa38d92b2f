/*
 * fuzz_control_entry.h - the checks of the control-message fuzz target
 * (fuzz/fuzz_control.c), shared with its CTest replay of
 * fuzz/corpus/control. An input is read as a metadata block and given to
 * the real decoders of core/msg.c: ADD_NODE (what a stranger can send the
 * scheduler first) and NODE_TABLE (what a node reads from "its"
 * scheduler). Besides "no crash, no overread, no leak", it traps when:
 *   - a decoder fails without a message, or with a code other than
 *     DT_EPROTO (DT_ENOMEM aside);
 *   - a decoded ADD_NODE has a field out of its limit, or does not encode
 *     back to the bytes it was read from (less any trailing bytes), which
 *     decode to the same values;
 *   - a decoded NODE_TABLE has an id, a size or an entry out of place, or
 *     does not encode back to a block, no longer than the input, that
 *     decodes to the same table;
 *   - a decoded MEMBERSHIP list (of a job of 5 workers, ids 3..7) is
 *     empty, too long, out of range or not ascending, or does not encode
 *     back to the bytes it was read from;
 *   - a decoded REPORT counters block (obs/stats.c) has counts over their
 *     limits or does not encode back to the same bytes (a busbw that is
 *     not a finite number aside: it is read as 0), and a REPORT event
 *     record (obs/trace.c) that decodes does not encode back to itself.
 */
#ifndef DT_FUZZ_CONTROL_ENTRY_H
#define DT_FUZZ_CONTROL_ENTRY_H

#include "fuzz_check.h"
#include <stdlib.h>

#include "core/msg.h"
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

static void
fuzz_control_node_table(const uint8_t *data, size_t size)
{
	dt_node_entry *t;
	int id, ns, nw;
	dt_wbuf w;
	dt_err err;

	dt__clear_error();
	if ((err = dt__msg_node_table_decode(data, size, &id, &ns, &nw, &t))) {
		fuzz_control_failed(err);
		return;
	}
	FUZZ_CHECK(ns >= 0 && ns <= DT_MAX_ROLE_NODES);
	FUZZ_CHECK(nw >= 1 && nw <= DT_MAX_ROLE_NODES);
	FUZZ_CHECK(id >= 1 && id < 1 + ns + nw);
	for (int i = 0; i < 1 + ns + nw; i++) {
		FUZZ_CHECK(t[i].id == i);
		FUZZ_CHECK(t[i].role == (i == 0    ? DT_ROLE_SCHEDULER
		                         : i <= ns ? DT_ROLE_SERVER
		                                   : DT_ROLE_WORKER));
		FUZZ_CHECK(t[i].port >= 0 && t[i].port <= 65535);
		FUZZ_CHECK(memchr(t[i].host, '\0', sizeof(t[i].host)));
	}
	dt__wbuf_init(&w);
	FUZZ_CHECK(dt__msg_node_table_encode(id, ns, nw, t, &w) == DT_OK);
	/* No longer than what it came from (a host with a NUL inside comes
	 * back shorter), and it decodes to the same table. */
	FUZZ_CHECK(w.len <= size);
	dt_node_entry *t2;
	int id2, ns2, nw2;
	FUZZ_CHECK(dt__msg_node_table_decode(w.data, w.len, &id2, &ns2, &nw2,
	                                     &t2) == DT_OK);
	FUZZ_CHECK(id2 == id && ns2 == ns && nw2 == nw);
	for (int i = 0; i < 1 + ns + nw; i++)
		FUZZ_CHECK(t2[i].role == t[i].role && t2[i].rank == t[i].rank &&
		           t2[i].port == t[i].port && t2[i].pid == t[i].pid &&
		           strcmp(t2[i].host, t[i].host) == 0 &&
		           strcmp(t2[i].hostid, t[i].hostid) == 0 &&
		           strcmp(t2[i].local, t[i].local) == 0);
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

static int
dt_fuzz_control_one(const uint8_t *data, size_t size)
{
	fuzz_control_membership(data, size);
	fuzz_control_add_node(data, size);
	fuzz_control_node_table(data, size);
	fuzz_control_report(data, size);
	return 0;
}

#endif
