/*
 * msg.c - encoders and decoders of the control messages' bodies (msg.h).
 * The bodies that are only header fields (HELLO, BARRIER's group mask in
 * arg0, ...) or one line of text (ABORT, TEXT) need none; the van ends
 * every metadata block with a NUL, so text is read as a C string.
 */
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "core/msg.h"

static int
valid_role(unsigned r)
{
	return r == DT_ROLE_SERVER || r == DT_ROLE_WORKER;
}

/* A host id or endpoint name: letters, digits and . : / - _ only (they
 * end up in log lines and in a socket's name). */
static int
valid_name(const char *s)
{
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr(".:/-_", *s)))
			return 0;
	return 1;
}

dt_err
dt__msg_add_node_encode(const dt__msg_add_node *a, dt_wbuf *w)
{
	dt__wbuf_u8(w, (uint8_t)a->role);
	dt__wbuf_u32(w, (uint32_t)(int32_t)a->want);
	dt__wbuf_str(w, a->host);
	dt__wbuf_u32(w, (uint32_t)a->port);
	dt__wbuf_u32(w, (uint32_t)a->pid);
	dt__wbuf_u32(w, (uint32_t)a->num_servers);
	dt__wbuf_u32(w, (uint32_t)a->num_workers);
	dt__wbuf_str(w, a->hostid);
	dt__wbuf_str(w, a->local);
	dt__wbuf_str(w, a->token);
	return dt__wbuf_err(w);
}

dt_err
dt__msg_add_node_decode(const void *meta, size_t len, dt__msg_add_node *a)
{
	dt_rbuf r;
	uint8_t role;
	int32_t want;
	uint32_t port, pid, ns, nw;
	dt_err err;

	memset(a, 0, sizeof(*a));
	dt__rbuf_init(&r, meta, len);
	role = dt__rbuf_u8(&r);
	want = (int32_t)dt__rbuf_u32(&r);
	dt__rbuf_str(&r, a->host, sizeof(a->host));
	port = dt__rbuf_u32(&r);
	pid = dt__rbuf_u32(&r);
	ns = dt__rbuf_u32(&r);
	nw = dt__rbuf_u32(&r);
	if (!r.failed && r.off < r.len) { /* (absent: no shared memory) */
		dt__rbuf_str(&r, a->hostid, sizeof(a->hostid));
		dt__rbuf_str(&r, a->local, sizeof(a->local));
	}
	if (!r.failed && r.off < r.len) /* (absent: no place token) */
		dt__rbuf_str(&r, a->token, sizeof(a->token));
	if ((err = dt__rbuf_err(&r, "ADD_NODE")))
		return err;
	if (!valid_name(a->hostid) || !valid_name(a->local))
		return dt__fail(DT_EPROTO,
		                "ADD_NODE: bad characters in the host id or "
		                "local endpoint");
	if (!valid_name(a->token))
		return dt__fail(DT_EPROTO,
		                "ADD_NODE: bad characters in the place token");
	if (!valid_role(role))
		return dt__fail(DT_EPROTO,
		                "ADD_NODE: role %u is not a "
		                "server or worker",
		                role);
	if (want < -1 || want > DT_MAX_RANK_WISH)
		return dt__fail(DT_EPROTO, "ADD_NODE: rank wish %d", want);
	if (a->host[0] == '\0')
		return dt__fail(DT_EPROTO, "ADD_NODE: empty host");
	if (port < 1 || port > 65535)
		return dt__fail(DT_EPROTO, "ADD_NODE: port %u", port);
	if (pid > INT32_MAX)
		return dt__fail(DT_EPROTO, "ADD_NODE: pid %u", pid);
	if (ns > DT_MAX_ROLE_NODES || nw > DT_MAX_ROLE_NODES)
		return dt__fail(DT_EPROTO,
		                "ADD_NODE: job size of %u servers and %u "
		                "workers (%d of each at most)",
		                ns, nw, DT_MAX_ROLE_NODES);
	a->role = (dt_role)role;
	a->want = want;
	a->port = (int)port;
	a->pid = (int)pid;
	a->num_servers = (int)ns;
	a->num_workers = (int)nw;
	return DT_OK;
}

dt_err
dt__msg_node_table_encode(int id, int num_servers, int num_workers,
                          const dt_node_entry *table, dt_wbuf *w)
{
	int count = 1 + num_servers + num_workers;

	dt__wbuf_u32(w, (uint32_t)id);
	dt__wbuf_u32(w, (uint32_t)num_servers);
	dt__wbuf_u32(w, (uint32_t)num_workers);
	for (int k = 0; k < count; k++) {
		const dt_node_entry *e = &table[k];

		dt__wbuf_u8(w, (uint8_t)e->role);
		dt__wbuf_u32(w, (uint32_t)e->rank);
		dt__wbuf_str(w, e->host);
		dt__wbuf_u32(w, (uint32_t)e->port);
		dt__wbuf_u32(w, (uint32_t)e->pid);
		dt__wbuf_str(w, e->hostid);
		dt__wbuf_str(w, e->local);
	}
	return dt__wbuf_err(w);
}

dt_err
dt__msg_node_table_decode(const void *meta, size_t len, int *id,
                          int *num_servers, int *num_workers,
                          dt_node_entry **out)
{
	dt_rbuf r;
	uint32_t me, ns, nw, count;
	dt_node_entry *t;
	dt_err err;

	*out = NULL;
	dt__rbuf_init(&r, meta, len);
	me = dt__rbuf_u32(&r);
	ns = dt__rbuf_u32(&r);
	nw = dt__rbuf_u32(&r);
	if ((err = dt__rbuf_err(&r, "NODE_TABLE")))
		return err;
	if (ns > DT_MAX_ROLE_NODES || nw < 1 || nw > DT_MAX_ROLE_NODES)
		return dt__fail(DT_EPROTO,
		                "NODE_TABLE: job size of %u servers and %u "
		                "workers",
		                ns, nw);
	count = 1 + ns + nw;
	if (me == 0 || me >= count)
		return dt__fail(DT_EPROTO, "NODE_TABLE: bad node id %u", me);
	/* Each entry takes at least 25 bytes: refuse a count the block
	 * cannot hold before allocating for it. */
	if ((size_t)count * 25 > len - r.off)
		return dt__fail(DT_EPROTO,
		                "NODE_TABLE: %u entries do not fit in %zu "
		                "bytes",
		                count, len - r.off);
	if ((t = dt__calloc(count, sizeof(*t))) == NULL)
		return DT_ENOMEM;
	for (uint32_t i = 0; i < count; i++) {
		uint8_t role = dt__rbuf_u8(&r);
		uint32_t rank = dt__rbuf_u32(&r), port, pid;

		dt__rbuf_str(&r, t[i].host, sizeof(t[i].host));
		port = dt__rbuf_u32(&r);
		pid = dt__rbuf_u32(&r);
		dt__rbuf_str(&r, t[i].hostid, sizeof(t[i].hostid));
		dt__rbuf_str(&r, t[i].local, sizeof(t[i].local));
		if (r.failed)
			break;
		/* The scheduler's row, then S servers, then W workers, each
		 * role's ranks in id order. */
		dt_role want_role = i == 0    ? DT_ROLE_SCHEDULER
		                    : i <= ns ? DT_ROLE_SERVER
		                              : DT_ROLE_WORKER;
		uint32_t want_rank = i == 0 ? 0 : i <= ns ? i - 1 : i - 1 - ns;
		if (role != (uint8_t)want_role || rank != want_rank ||
		    port > 65535 || pid > INT32_MAX ||
		    !valid_name(t[i].hostid) || !valid_name(t[i].local)) {
			free(t);
			return dt__fail(DT_EPROTO,
			                "NODE_TABLE: entry %u (role %u rank %u "
			                "port %u) is out of place",
			                i, role, rank, port);
		}
		t[i].id = (int)i;
		t[i].role = want_role;
		t[i].rank = (int)rank;
		t[i].port = (int)port;
		t[i].pid = (int)pid;
	}
	if ((err = dt__rbuf_err(&r, "NODE_TABLE"))) {
		free(t);
		return err;
	}
	*id = (int)me;
	*num_servers = (int)ns;
	*num_workers = (int)nw;
	*out = t;
	return DT_OK;
}

dt_err
dt__msg_membership_encode(const int *ids, int n, dt_wbuf *w)
{
	for (int i = 0; i < n; i++)
		dt__wbuf_u32(w, (uint32_t)ids[i]);
	return dt__wbuf_err(w);
}

dt_err
dt__msg_membership_decode(const void *meta, size_t len, int first_id,
                          int max_ids, int *ids, int *n)
{
	const uint8_t *p = meta;
	size_t count = len / 4;

	*n = 0;
	if (len % 4 != 0 || count == 0 || count > (size_t)max_ids)
		return dt__fail(DT_EPROTO,
		                "MEMBERSHIP of %zu bytes: not 1 to %d node ids "
		                "of 4 bytes",
		                len, max_ids);
	for (size_t i = 0; i < count; i++) {
		uint32_t id = dt__get_u32(p + 4 * i);

		if (id < (uint32_t)first_id ||
		    id >= (uint32_t)first_id + (uint32_t)max_ids)
			return dt__fail(
			    DT_EPROTO,
			    "MEMBERSHIP: node id %u is not a worker "
			    "of this job (ids %d..%d)",
			    id, first_id, first_id + max_ids - 1);
		if (i > 0 && id <= (uint32_t)ids[i - 1])
			return dt__fail(DT_EPROTO,
			                "MEMBERSHIP: node id %u after %d: the "
			                "list must ascend",
			                id, ids[i - 1]);
		ids[i] = (int)id;
	}
	*n = (int)count;
	return DT_OK;
}
