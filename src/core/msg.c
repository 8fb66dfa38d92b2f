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

void
dt__msg_place(int id, int num_servers, dt_role *role, int *rank)
{
	*role = id == 0             ? DT_ROLE_SCHEDULER
	        : id <= num_servers ? DT_ROLE_SERVER
	                            : DT_ROLE_WORKER;
	*rank = id == 0 ? 0 : id <= num_servers ? id - 1 : id - 1 - num_servers;
}

/* The entries of a range, each a u8 `known` and, when 1, the address. */
static void
put_entries(int count, const dt_node_entry *e, dt_wbuf *w)
{
	for (int k = 0; k < count; k++) {
		dt__wbuf_u8(w, e[k].known ? 1 : 0);
		if (!e[k].known)
			continue;
		dt__wbuf_str(w, e[k].host);
		dt__wbuf_u32(w, (uint32_t)e[k].port);
		dt__wbuf_u32(w, (uint32_t)e[k].pid);
		dt__wbuf_str(w, e[k].hostid);
		dt__wbuf_str(w, e[k].local);
	}
}

/* A range first..first+count-1 read as two u32: within 1..ntable-1 and
 * at most DT_DIR_MAX ids (min: the fewest, 0 or 1). */
static dt_err
get_range(dt_rbuf *r, const char *what, int ntable, int min, int *first,
          int *count)
{
	uint32_t f = dt__rbuf_u32(r), c = dt__rbuf_u32(r);
	dt_err err;

	if ((err = dt__rbuf_err(r, what)))
		return err;
	if (c < (uint32_t)min || c > DT_DIR_MAX || f < 1 ||
	    f >= (uint32_t)ntable || c > (uint32_t)ntable - f)
		return dt__fail(DT_EPROTO,
		                "%s: ids %u..+%u are not %d to %d of the job's "
		                "1..%d",
		                what, f, c, min, DT_DIR_MAX, ntable - 1);
	*first = (int)f;
	*count = (int)c;
	return DT_OK;
}

/* The entries of the range (get_range's), into *out (NULL for none). */
static dt_err
get_entries(dt_rbuf *r, const char *what, int num_servers, int first, int count,
            dt_node_entry **out)
{
	dt_node_entry *t;
	dt_err err;

	*out = NULL;
	if (count == 0)
		return dt__rbuf_err(r, what);
	/* (each entry takes a byte at least: refuse a count the block
	 * cannot hold before allocating for it) */
	if ((size_t)count > r->len - r->off)
		return dt__fail(DT_EPROTO,
		                "%s: %d entries do not fit in %zu bytes", what,
		                count, r->len - r->off);
	if ((t = dt__calloc((size_t)count, sizeof(*t))) == NULL)
		return DT_ENOMEM;
	for (int k = 0; k < count && !r->failed; k++) {
		uint8_t known = dt__rbuf_u8(r);
		uint32_t port = 0, pid = 0;

		t[k].id = first + k;
		dt__msg_place(first + k, num_servers, &t[k].role, &t[k].rank);
		if (known == 0 || r->failed)
			continue;
		dt__rbuf_str(r, t[k].host, sizeof(t[k].host));
		port = dt__rbuf_u32(r);
		pid = dt__rbuf_u32(r);
		dt__rbuf_str(r, t[k].hostid, sizeof(t[k].hostid));
		dt__rbuf_str(r, t[k].local, sizeof(t[k].local));
		if (r->failed)
			break;
		if (known != 1 || t[k].host[0] == '\0' || port < 1 ||
		    port > 65535 || pid > INT32_MAX ||
		    !valid_name(t[k].hostid) || !valid_name(t[k].local)) {
			free(t);
			return dt__fail(DT_EPROTO,
			                "%s: the entry of node %d (known %u, "
			                "port %u, pid %u) is malformed",
			                what, first + k, known, port, pid);
		}
		t[k].port = (int)port;
		t[k].pid = (int)pid;
		t[k].known = 1;
	}
	if ((err = dt__rbuf_err(r, what))) {
		free(t);
		return err;
	}
	*out = t;
	return DT_OK;
}

dt_err
dt__msg_assign_encode(const dt__msg_assign *a, int first, int count,
                      const dt_node_entry *e, dt_wbuf *w)
{
	dt__wbuf_u32(w, (uint32_t)a->id);
	dt__wbuf_u32(w, (uint32_t)a->num_servers);
	dt__wbuf_u32(w, (uint32_t)a->slots);
	dt__wbuf_u64(w, a->epoch);
	dt__wbuf_u32(w, (uint32_t)a->here);
	dt__wbuf_u32(w, (uint32_t)a->sched_pid);
	dt__wbuf_u32(w, (uint32_t)first);
	dt__wbuf_u32(w, (uint32_t)count);
	put_entries(count, e, w);
	return dt__wbuf_err(w);
}

/* ASSIGN's own fields and entries, read from r (both decoders'). */
static dt_err
assign_read(dt_rbuf *r, dt__msg_assign *a, int *first, int *count,
            dt_node_entry **out)
{
	uint32_t id, ns, nw, here, spid;
	uint64_t epoch;
	dt_err err;

	*out = NULL;
	memset(a, 0, sizeof(*a));
	id = dt__rbuf_u32(r);
	ns = dt__rbuf_u32(r);
	nw = dt__rbuf_u32(r);
	epoch = dt__rbuf_u64(r);
	here = dt__rbuf_u32(r);
	spid = dt__rbuf_u32(r);
	if ((err = dt__rbuf_err(r, "ASSIGN")))
		return err;
	if (ns > DT_MAX_ROLE_NODES || nw < 1 || nw > DT_MAX_ROLE_NODES)
		return dt__fail(DT_EPROTO,
		                "ASSIGN: job size of %u servers and %u workers",
		                ns, nw);
	if (id < 1 || id > ns + nw)
		return dt__fail(DT_EPROTO, "ASSIGN: bad node id %u", id);
	if (here < 1 || here > ns + nw)
		return dt__fail(DT_EPROTO,
		                "ASSIGN: %u nodes on this host, of %u", here,
		                ns + nw);
	if (spid > INT32_MAX)
		return dt__fail(DT_EPROTO, "ASSIGN: scheduler pid %u", spid);
	if ((err =
	         get_range(r, "ASSIGN", (int)(1 + ns + nw), 0, first, count)) ||
	    (err = get_entries(r, "ASSIGN", (int)ns, *first, *count, out)))
		return err;
	a->id = (int)id;
	a->num_servers = (int)ns;
	a->slots = (int)nw;
	a->epoch = epoch;
	a->here = (int)here;
	a->sched_pid = (int)spid;
	return DT_OK;
}

dt_err
dt__msg_assign_decode(const void *meta, size_t len, dt__msg_assign *a,
                      int *first, int *count, dt_node_entry **out)
{
	dt_rbuf r;

	dt__rbuf_init(&r, meta, len);
	return assign_read(&r, a, first, count, out);
}

dt_err
dt__msg_tree_encode(const dt__tree_place *p, dt_wbuf *w)
{
	dt__wbuf_u32(w, (uint32_t)p->parent);
	dt__wbuf_u32(w, (uint32_t)p->servers);
	dt__wbuf_u32(w, (uint32_t)p->workers);
	dt__wbuf_u32(w, (uint32_t)p->nkids);
	for (int c = 0; c < p->nkids; c++) {
		dt__wbuf_u32(w, (uint32_t)p->kid[c].id);
		dt__wbuf_u32(w, (uint32_t)p->kid[c].servers);
		dt__wbuf_u32(w, (uint32_t)p->kid[c].workers);
	}
	return dt__wbuf_err(w);
}

dt_err
dt__msg_tree_lost_encode(const dt__msg_tree_lost *l, dt_wbuf *w)
{
	dt__wbuf_u32(w, (uint32_t)l->lost);
	dt__wbuf_u32(w, (uint32_t)l->reason);
	dt__wbuf_u64(w, l->silent_ns);
	return dt__wbuf_err(w);
}

dt_err
dt__msg_tree_lost_decode(const void *meta, size_t len, int ntable,
                         dt__msg_tree_lost *l)
{
	uint32_t lost, reason;
	uint64_t silent;
	dt_rbuf r;
	dt_err err;

	memset(l, 0, sizeof(*l));
	if (len != 16)
		return dt__fail(DT_EPROTO, "TREE_LOST: %zu bytes (16)", len);
	dt__rbuf_init(&r, meta, len);
	lost = dt__rbuf_u32(&r);
	reason = dt__rbuf_u32(&r);
	silent = dt__rbuf_u64(&r);
	if ((err = dt__rbuf_err(&r, "TREE_LOST")))
		return err;
	if (ntable < 2 || lost < 1 || lost >= (uint32_t)ntable)
		return dt__fail(DT_EPROTO, "TREE_LOST: node %u (of %d)", lost,
		                ntable - 1);
	if (reason != DT_TREE_LOST_SILENT && reason != DT_TREE_LOST_CLOSED)
		return dt__fail(DT_EPROTO, "TREE_LOST: reason %u (1 or 2)",
		                reason);
	if (silent > DT_TREE_LOST_SILENT_MAX)
		return dt__fail(
		    DT_EPROTO, "TREE_LOST: silent for %llu ns (at most a week)",
		    (unsigned long long)silent);
	l->lost = (int)lost;
	l->reason = (int)reason;
	l->silent_ns = silent;
	return DT_OK;
}

/* One child of a TREE: in the job, not self nor the parent, after the
 * one before, its subtree not empty and within the job. */
static dt_err
tree_kid_check(const dt__tree_place *p, int c, int self, uint32_t ntable,
               uint32_t ns, uint32_t nw, uint32_t id, uint32_t s, uint32_t w)
{
	if (id < 1 || id >= ntable || (int)id == self || (int)id == p->parent ||
	    (c > 0 && (int)id <= p->kid[c - 1].id))
		return dt__fail(DT_EPROTO,
		                "TREE: child %d is node %u (node %d of %u, "
		                "parent %d)",
		                c, id, self, ntable - 1, p->parent);
	if (s > ns || w > nw || s + w == 0)
		return dt__fail(DT_EPROTO,
		                "TREE: child %u's subtree of %u servers and %u "
		                "workers (job: %u and %u)",
		                id, s, w, ns, nw);
	return DT_OK;
}

/*
 * A node's place in the control tree, read from r for node self of a job
 * of num_servers and num_workers: the checks of dt__msg_tree_decode, its
 * children counted against the bytes left in r before any is read.
 */
static dt_err
tree_read(dt_rbuf *r, int self, int num_servers, int num_workers,
          dt__tree_place *p)
{
	uint32_t ntable = 1 + (uint32_t)num_servers + (uint32_t)num_workers;
	uint32_t ns = (uint32_t)num_servers, nw = (uint32_t)num_workers;
	uint32_t parent, s, w, nkids;
	uint64_t sum_s, sum_w;
	dt_err err;

	memset(p, 0, sizeof(*p));
	parent = dt__rbuf_u32(r);
	s = dt__rbuf_u32(r);
	w = dt__rbuf_u32(r);
	nkids = dt__rbuf_u32(r);
	if ((err = dt__rbuf_err(r, "TREE")))
		return err;
	if (parent >= ntable || (int)parent == self)
		return dt__fail(DT_EPROTO, "TREE: parent %u of node %d (of %u)",
		                parent, self, ntable - 1);
	if (nkids > DT_TREE_KIDS_MAX || 12 * (size_t)nkids > r->len - r->off)
		return dt__fail(DT_EPROTO,
		                "TREE: %u children in %zu bytes (at most %d, "
		                "12 bytes each)",
		                nkids, r->len - r->off, DT_TREE_KIDS_MAX);
	p->parent = (int)parent;
	sum_s = self <= num_servers;
	sum_w = self > num_servers;
	for (uint32_t c = 0; c < nkids; c++) {
		uint32_t id = dt__rbuf_u32(r), ks = dt__rbuf_u32(r),
		         kw = dt__rbuf_u32(r);

		if ((err = tree_kid_check(p, (int)c, self, ntable, ns, nw, id,
		                          ks, kw)))
			return err;
		p->kid[c] = (dt__tree_kid){(int)id, (int)ks, (int)kw};
		p->nkids = (int)c + 1;
		sum_s += ks;
		sum_w += kw;
	}
	if (s > ns || w > nw || sum_s != s || sum_w != w)
		return dt__fail(DT_EPROTO,
		                "TREE: a subtree of %u servers and %u workers, "
		                "its node and children count %llu and %llu",
		                s, w, (unsigned long long)sum_s,
		                (unsigned long long)sum_w);
	p->servers = (int)s;
	p->workers = (int)w;
	return DT_OK;
}

dt_err
dt__msg_tree_decode(const void *meta, size_t len, int self, int num_servers,
                    int num_workers, dt__tree_place *p)
{
	dt_rbuf r;
	dt_err err;

	dt__rbuf_init(&r, meta, len);
	if ((err = tree_read(&r, self, num_servers, num_workers, p)))
		return err;
	if (r.off != r.len)
		return dt__fail(DT_EPROTO, "TREE: %zu bytes after %d children",
		                r.len - r.off, p->nkids);
	return DT_OK;
}

dt_err
dt__msg_assign_tree_encode(const dt__tree_place *p, const dt_node_entry *parent,
                           dt_wbuf *w)
{
	dt_node_entry none = {0};
	dt_err err;

	if ((err = dt__msg_tree_encode(p, w)))
		return err;
	put_entries(1, parent && p->parent > 0 ? parent : &none, w);
	return dt__wbuf_err(w);
}

dt_err
dt__msg_assign_tree_decode(const void *meta, size_t len, dt__msg_assign *a,
                           int *first, int *count, dt_node_entry **out,
                           dt__tree_place *p, dt_node_entry *parent)
{
	dt_node_entry *e = NULL;
	dt_rbuf r;
	dt_err err;

	memset(parent, 0, sizeof(*parent));
	dt__rbuf_init(&r, meta, len);
	if ((err = assign_read(&r, a, first, count, out)))
		return err;
	if ((err = tree_read(&r, a->id, a->num_servers, a->slots, p)) ||
	    (err = get_entries(&r, "ASSIGN", a->num_servers, p->parent, 1, &e)))
		goto fail;
	if (e[0].known && p->parent == 0) {
		err = dt__fail(DT_EPROTO,
		               "ASSIGN: an entry for the scheduler as the tree "
		               "parent");
		goto fail;
	}
	if (r.off != r.len) {
		err = dt__fail(DT_EPROTO, "ASSIGN: %zu bytes after the tree",
		               r.len - r.off);
		goto fail;
	}
	*parent = e[0];
	free(e);
	return DT_OK;
fail:
	free(e);
	free(*out);
	*out = NULL;
	return err;
}

dt_err
dt__msg_lookup_encode(int first, int count, dt_wbuf *w)
{
	dt__wbuf_u32(w, (uint32_t)first);
	dt__wbuf_u32(w, (uint32_t)count);
	return dt__wbuf_err(w);
}

dt_err
dt__msg_lookup_decode(const void *meta, size_t len, int ntable, int *first,
                      int *count)
{
	dt_rbuf r;
	dt_err err;

	dt__rbuf_init(&r, meta, len);
	if ((err = get_range(&r, "LOOKUP", ntable, 1, first, count)))
		return err;
	if (r.off != r.len)
		return dt__fail(DT_EPROTO, "LOOKUP: %zu bytes after the range",
		                r.len - r.off);
	return DT_OK;
}

dt_err
dt__msg_dir_encode(int first, int count, const dt_node_entry *e, dt_wbuf *w)
{
	dt__wbuf_u32(w, (uint32_t)first);
	dt__wbuf_u32(w, (uint32_t)count);
	put_entries(count, e, w);
	return dt__wbuf_err(w);
}

dt_err
dt__msg_dir_decode(const void *meta, size_t len, int num_servers, int ntable,
                   int *first, int *count, dt_node_entry **out)
{
	dt_rbuf r;
	dt_err err;

	*out = NULL;
	dt__rbuf_init(&r, meta, len);
	if ((err = get_range(&r, "LOOKUP answer", ntable, 1, first, count)))
		return err;
	return get_entries(&r, "LOOKUP answer", num_servers, *first, *count,
	                   out);
}

/* A range of ids as get_range's, up to max of them. */
static dt_err
get_wide_range(dt_rbuf *r, const char *what, int ntable, int max, int *first,
               int *count)
{
	uint32_t f = dt__rbuf_u32(r), c = dt__rbuf_u32(r);
	dt_err err;

	if ((err = dt__rbuf_err(r, what)))
		return err;
	if (c < 1 || c > (uint32_t)max || f < 1 || f >= (uint32_t)ntable ||
	    c > (uint32_t)ntable - f)
		return dt__fail(DT_EPROTO,
		                "%s: ids %u..+%u are not 1 to %d of the job's "
		                "1..%d",
		                what, f, c, max, ntable - 1);
	*first = (int)f;
	*count = (int)c;
	return DT_OK;
}

dt_err
dt__msg_hosts_lookup_decode(const void *meta, size_t len, int ntable,
                            int *first, int *count)
{
	dt_rbuf r;
	dt_err err;

	dt__rbuf_init(&r, meta, len);
	if ((err = get_wide_range(&r, "LOOKUP of hosts", ntable, DT_HOSTS_MAX,
	                          first, count)))
		return err;
	if (r.off != r.len)
		return dt__fail(DT_EPROTO,
		                "LOOKUP of hosts: %zu bytes after the range",
		                r.len - r.off);
	return DT_OK;
}

dt_err
dt__msg_hosts_encode(int first, int count, const uint32_t *hostno, dt_wbuf *w)
{
	uint32_t runs = 0;

	for (int i = 0; i < count; i++)
		runs += i == 0 || hostno[i] != hostno[i - 1];
	dt__wbuf_u32(w, (uint32_t)first);
	dt__wbuf_u32(w, (uint32_t)count);
	dt__wbuf_u32(w, runs);
	for (int i = 0, j; i < count; i = j) {
		for (j = i + 1; j < count && hostno[j] == hostno[i]; j++)
			;
		dt__wbuf_u32(w, (uint32_t)(j - i));
		dt__wbuf_u32(w, hostno[i]);
	}
	return dt__wbuf_err(w);
}

dt_err
dt__msg_hosts_decode(const void *meta, size_t len, int ntable, int *first,
                     int *count, uint32_t **out)
{
	const char *what = "LOOKUP of hosts, the answer";
	uint32_t runs, *v;
	size_t at = 0;
	dt_rbuf r;
	dt_err err;

	*out = NULL;
	dt__rbuf_init(&r, meta, len);
	if ((err =
	         get_wide_range(&r, what, ntable, DT_HOSTS_MAX, first, count)))
		return err;
	runs = dt__rbuf_u32(&r);
	if ((err = dt__rbuf_err(&r, what)))
		return err;
	/* (8 bytes a run: refuse a count the block cannot hold before
	 * allocating) */
	if (runs < 1 || runs > (uint32_t)*count ||
	    (size_t)runs * 8 != r.len - r.off)
		return dt__fail(DT_EPROTO,
		                "%s: %u runs for %d ids in %zu bytes", what,
		                runs, *count, r.len - r.off);
	if ((v = malloc(sizeof(*v) * (size_t)*count)) == NULL)
		return dt__fail(DT_ENOMEM, "%s: %d ids", what, *count);
	for (uint32_t k = 0; k < runs; k++) {
		uint32_t n = dt__rbuf_u32(&r), h = dt__rbuf_u32(&r);

		if (n < 1 || n > (size_t)*count - at ||
		    (h >= (uint32_t)ntable && h != DT_HOST_UNKNOWN)) {
			free(v);
			return dt__fail(DT_EPROTO,
			                "%s: run %u of %u ids, host %u, past "
			                "the range of %d or the job's %d ids",
			                what, k, n, h, *count, ntable);
		}
		for (uint32_t i = 0; i < n; i++)
			v[at++] = h;
	}
	if (at != (size_t)*count) {
		free(v);
		return dt__fail(DT_EPROTO, "%s: the runs cover %zu of %d ids",
		                what, at, *count);
	}
	*out = v;
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
