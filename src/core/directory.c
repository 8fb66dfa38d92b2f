/*
 * directory.c - where the nodes of a job listen, without a table sent to
 * every node. The scheduler holds every node's entry (scheduler.c fills
 * them as nodes join); a node that joins gets a small reply, ASSIGN: its
 * id (its role and rank follow from it, msg.h: dt__msg_place), the job's
 * sizes, the membership epoch, the count of job nodes on its host, and
 * the scheduler's pid (the address it was dialled at is the rest of its
 * entry), and the entries it needs at once: a worker the servers it dials at
 * its start, a server none; in a job with a control tree, also the node's
 * place in it and its tree parent's entry (the one reply of the join). Any
 * other entry a member needs (a worker it dials on demand, reach.c; a peer it
 * dials again, link.c; the hosts of the collectives' ranks) it asks of the
 * scheduler with LOOKUP, for a range of ids, and keeps: an entry once known
 * here is not asked again.
 *
 * An entry that changes reaches the members by a push, as before: a
 * restarted node's new address comes in NODE_UPDATE to every node
 * (PS_RESEND's links keep it, link.c), a worker seated in a running
 * elastic job in NODE_UPDATE to the members (elastic.c). The scheduler
 * writes the new address into its own table too, so a LOOKUP made later
 * gets it.
 *
 * Threads: the scheduler answers LOOKUP on its I/O thread, reading its
 * table under node->mu (a seat may write it there). A member's entry is
 * written once, by the I/O thread under node->mu, its fields before its
 * `known` flag (stored with release order), so a reader that loads
 * `known` with acquire order reads a whole entry without the lock. A
 * lookup waits on node->cv for the scheduler's answer, so the I/O thread
 * itself never looks up (it would wait for what only it can read).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/msg.h"
#include "core/node_impl.h"
#include "core/sched_impl.h"

static int
entry_known(const dt_node_entry *e)
{
	return __atomic_load_n(&e->known, __ATOMIC_ACQUIRE);
}

/* A row's id, role and rank (its place follows from its id). */
static void
set_place(dt_node_entry *e, int id, int num_servers)
{
	e->id = id;
	dt__msg_place(id, num_servers, &e->role, &e->rank);
}

/* Write an address into the entry e of this member's table (node mu
 * held), once: an entry known is never rewritten, so readers without the
 * lock see it whole. */
static void
learn_locked(const dt_node *n, int id, const dt_node_entry *from)
{
	dt_node_entry *e = &n->table[id];

	if (entry_known(e))
		return;
	set_place(e, id, n->num_servers);
	snprintf(e->host, DT_HOST_MAX, "%s", from->host);
	e->port = from->port;
	e->pid = from->pid;
	snprintf(e->hostid, DT_HOSTID_MAX, "%s", from->hostid);
	snprintf(e->local, DT_LOCAL_MAX, "%s", from->local);
	__atomic_store_n(&e->known, 1, __ATOMIC_RELEASE);
}

void
dt__dir_learn(dt_node *n, int id, const char *host, int port, int pid,
              const char *hostid, const char *local)
{
	dt_node_entry from = {.port = port, .pid = pid};

	if (n->table == NULL || id < 0 || id >= n->ntable)
		return;
	snprintf(from.host, DT_HOST_MAX, "%s", host);
	snprintf(from.hostid, DT_HOSTID_MAX, "%s", hostid);
	snprintf(from.local, DT_LOCAL_MAX, "%s", local);
	pthread_mutex_lock(&n->mu);
	learn_locked(n, id, &from);
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
}

/* ---- The scheduler's side ---- */

dt_err
dt__dir_host_counts(dt_node *n, int *here)
{
	dt__host_key *v = malloc(sizeof(*v) * (size_t)n->ntable);
	int count = 0;

	if (v == NULL)
		return DT_ENOMEM;
	/* Sorted by host, the nodes of one host are a run: O(N log N) once
	 * for the whole job, rather than a scan of the table per node. */
	for (int k = 1; k < n->ntable; k++) {
		here[k] = 0;
		if (n->table[k].known)
			v[count++] = (dt__host_key){n->table[k].host, k};
	}
	here[0] = 0;
	qsort(v, (size_t)count, sizeof(*v), dt__host_key_cmp);
	for (int a = 0, b; a < count; a = b) {
		for (b = a + 1; b < count && strcmp(v[a].host, v[b].host) == 0;
		     b++)
			;
		for (int k = a; k < b; k++)
			here[v[k].id] = b - a;
	}
	free(v);
	return DT_OK;
}

int
dt__dir_host_count(dt_node *n, int id)
{
	int here = 0;

	/* (one node joining a running job, or taking a lost one's place:
	 * a scan of the table for that one event) */
	for (int k = 1; k < n->ntable; k++)
		if (k == id ||
		    (n->table[k].known &&
		     strcmp(n->table[k].host, n->table[id].host) == 0))
			here++;
	return here;
}

/*
 * (mu held) Node id's place in the control tree, after its assignment,
 * with its parent's entry when the node would otherwise have to look it
 * up: a parent of id `given` or more (a worker's assignment carries the
 * servers below that; a server's none), so that a node's join at the
 * scheduler is one ADD_NODE and one ASSIGN.
 */
static dt_err
put_place(dt_node *n, int id, int given, dt_wbuf *w)
{
	dt__tree_place p;

	dt__tree_place_of(&n->sched->tree, id, &p);
	return dt__msg_assign_tree_encode(
	    &p, p.parent >= given ? &n->table[p.parent] : NULL, w);
}

dt_err
dt__dir_send_assign(dt_node *n, dt_conn *c, int id, int here, uint64_t arg1,
                    uint64_t arg2)
{
	int slots = n->ntable - 1 - n->num_servers;
	int first = 1, count = 0;
	int tree = n->tree_wait && id < n->sched->tree.count;
	dt_wbuf w;
	dt_err err;

	dt__msg_assign a = {.id = id,
	                    .num_servers = n->num_servers,
	                    .slots = slots,
	                    .here = here > 0 ? here : 1,
	                    .sched_pid = n->table[0].pid};
	/* A worker dials every server at its start: their entries come
	 * with it, as many as one message carries (it looks up the rest). */
	if (id > n->num_servers)
		count =
		    n->num_servers < DT_DIR_MAX ? n->num_servers : DT_DIR_MAX;
	dt__wbuf_init(&w);
	pthread_mutex_lock(&n->mu);
	if (here < 1)
		a.here = dt__dir_host_count(n, id);
	a.epoch = n->el_epoch;
	err = dt__msg_assign_encode(&a, first, count, n->table + first, &w);
	if (err == DT_OK && tree)
		err = put_place(n, id, first + count, &w);
	pthread_mutex_unlock(&n->mu);
	if (err == DT_OK) {
		/* (key 1: its place in the control tree is in it) */
		dt_msg_hdr h = {.cmd = DT_CMD_ASSIGN,
		                .flags = DT_F_RESPONSE,
		                .recver = (uint32_t)id,
		                .arg1 = arg1,
		                .arg2 = arg2,
		                .key = tree ? 1 : 0};

		err = c ? dt__van_send(n->van, c, &h, w.data, (uint32_t)w.len,
		                       NULL, 0)
		        : dt__node_send(n, id, &h, w.data, (uint32_t)w.len,
		                        NULL, 0);
	}
	dt__wbuf_fini(&w);
	return err;
}

void
dt__dir_sched_changed(dt_node *n)
{
	free(n->sched->hostno);
	n->sched->hostno = NULL;
}

/* The host of an entry: its host id, else its address. */
static const char *
entry_host(const dt_node_entry *e)
{
	return e->hostid[0] ? e->hostid : e->host;
}

static uint64_t
host_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

/*
 * (mu held) The hosts of the entries first..first+count-1, numbered by
 * first appearance, into v: one pass with an open-addressing table of the
 * hosts seen (2 slots an id at least), so a range of W ids costs O(W).
 */
static dt_err
number_hosts(const dt_node *n, int first, int count, uint32_t *v)
{
	size_t cap = 16, mask;
	int *slot, hosts = 0; /* slot: an id of that host + 1, 0 empty */

	while (cap < 2 * (size_t)count)
		cap *= 2;
	if ((slot = calloc(cap, sizeof(*slot))) == NULL)
		return dt__fail(DT_ENOMEM, "numbering %d hosts", count);
	mask = cap - 1;
	for (int i = 0; i < count; i++) {
		const dt_node_entry *e = &n->table[first + i];
		const char *h = entry_host(e);
		size_t k;

		if (!entry_known(e)) {
			v[i] = DT_HOST_UNKNOWN;
			continue;
		}
		for (k = host_hash(h) & mask; slot[k]; k = (k + 1) & mask)
			if (strcmp(entry_host(&n->table[slot[k] - 1]), h) == 0)
				break;
		if (slot[k] == 0) {
			slot[k] = first + i + 1;
			v[i] = (uint32_t)hosts++;
		} else {
			v[i] = v[slot[k] - 1 - first];
		}
	}
	free(slot);
	return DT_OK;
}

/* (I/O thread) A LOOKUP of hosts: answered from the numbers of the
 * job's hosts, made at the first one (O(N) once) and kept until an entry
 * changes; each answer costs its range. */
static void
on_hosts_lookup(dt_node *n, int peer, const dt_msg *m)
{
	dt_sched *s = n->sched;
	int first, count;
	char name[64];
	dt_wbuf w;
	dt_err err;

	if ((err = dt__msg_hosts_lookup_decode(m->meta, m->hdr.meta_len,
	                                       n->ntable, &first, &count))) {
		dt__log(0, "ignoring a LOOKUP of hosts from %s: %s",
		        dt__node_name(n, peer, name, sizeof(name)),
		        dt_errmsg());
		return;
	}
	dt__wbuf_init(&w);
	pthread_mutex_lock(&n->mu);
	if (s->hostno == NULL) {
		uint32_t *v = malloc(sizeof(*v) * (size_t)n->ntable);

		if (v == NULL)
			err = dt__fail(DT_ENOMEM, "numbering %d hosts",
			               n->ntable);
		else if ((err = number_hosts(n, 1, n->ntable - 1, v + 1)))
			free(v);
		else
			v[0] = DT_HOST_UNKNOWN, s->hostno = v;
	}
	if (err == DT_OK)
		err = dt__msg_hosts_encode(first, count, s->hostno + first, &w);
	pthread_mutex_unlock(&n->mu);
	if (err == DT_OK) {
		dt_msg_hdr h = {.cmd = DT_CMD_LOOKUP,
		                .flags = DT_F_RESPONSE,
		                .arg0 = DT_LOOKUP_HOSTS,
		                .key = m->hdr.key};

		(void)dt__node_send(n, peer, &h, w.data, (uint32_t)w.len, NULL,
		                    0);
	} else {
		dt__log(0, "a LOOKUP of hosts from %s unanswered: %s",
		        dt__node_name(n, peer, name, sizeof(name)),
		        dt_errmsg());
	}
	dt__wbuf_fini(&w);
}

void
dt__dir_sched_on_lookup(dt_node *n, dt_conn *c, const dt_msg *m)
{
	int peer = dt__conn_peer(c), first, count;
	char name[64];
	dt_wbuf w;
	dt_err err;

	/* (only a node of the job asks; a stranger's bytes go no further) */
	if (peer <= 0 || !(m->hdr.flags & DT_F_REQUEST))
		return;
	if (m->hdr.arg0 == DT_LOOKUP_HOSTS) {
		on_hosts_lookup(n, peer, m);
		return;
	}
	if ((err = dt__msg_lookup_decode(m->meta, m->hdr.meta_len, n->ntable,
	                                 &first, &count))) {
		dt__log(0, "ignoring a LOOKUP from %s: %s",
		        dt__node_name(n, peer, name, sizeof(name)),
		        dt_errmsg());
		return;
	}
	dt__wbuf_init(&w);
	pthread_mutex_lock(&n->mu);
	err = dt__msg_dir_encode(first, count, n->table + first, &w);
	pthread_mutex_unlock(&n->mu);
	if (err == DT_OK) {
		dt_msg_hdr h = {.cmd = DT_CMD_LOOKUP,
		                .flags = DT_F_RESPONSE,
		                .key = m->hdr.key};

		(void)dt__node_send(n, peer, &h, w.data, (uint32_t)w.len, NULL,
		                    0);
	}
	dt__wbuf_fini(&w);
}

/* ---- A member's side ---- */

/* ASSIGN's body, with the node's place in the control tree when its
 * header says it holds one (*place, allocated; else NULL). */
static dt_err
assign_decode(const dt_msg *m, dt__msg_assign *a, int *first, int *count,
              dt_node_entry **given, dt__tree_place **place,
              dt_node_entry *parent)
{
	dt_err err;

	*place = NULL;
	memset(parent, 0, sizeof(*parent));
	if (m->hdr.key != 1)
		return dt__msg_assign_decode(m->meta, m->hdr.meta_len, a, first,
		                             count, given);
	if ((*place = dt__malloc(sizeof(**place))) == NULL)
		return dt__fail(DT_ENOMEM, "no memory for the control tree");
	if ((err =
	         dt__msg_assign_tree_decode(m->meta, m->hdr.meta_len, a, first,
	                                    count, given, *place, parent))) {
		free(*place);
		*place = NULL;
	}
	return err;
}

dt_err
dt__dir_on_assign(dt_node *n, const dt_msg *m, dt__tree_place **place)
{
	dt__msg_assign a;
	dt_node_entry *given, *t, parent;
	int first, count, ntable;
	dt_err err;

	if ((err =
	         assign_decode(m, &a, &first, &count, &given, place, &parent)))
		return err;
	/* (an elastic job has a row for every worker it may grow to,
	 * DTRAIN_ELASTIC_MAX) */
	if (a.num_servers != n->cfg.num_servers ||
	    a.slots != dt__elastic_slots(n)) {
		free(given);
		free(*place);
		*place = NULL;
		if (n->elastic)
			return dt__fail(
			    DT_ECONFIG,
			    "the scheduler runs a job of %d servers "
			    "and room for %d workers, but this node "
			    "was started with DMLC_NUM_SERVER=%d "
			    "DTRAIN_ELASTIC_MAX=%d",
			    a.num_servers, a.slots, n->cfg.num_servers,
			    dt__elastic_slots(n));
		return dt__fail(DT_ECONFIG,
		                "the scheduler runs a job of %d servers and %d "
		                "workers, but this node was started with "
		                "DMLC_NUM_SERVER=%d DMLC_NUM_WORKER=%d",
		                a.num_servers, a.slots, n->cfg.num_servers,
		                n->cfg.num_workers);
	}
	ntable = 1 + a.num_servers + a.slots;
	dt_role role;
	int rank;
	dt__msg_place(a.id, a.num_servers, &role, &rank);
	if (role != n->role) {
		free(given);
		free(*place);
		*place = NULL;
		return dt__fail(DT_EPROTO,
		                "ASSIGN gives this %s the role of another",
		                dt_role_name(n->role));
	}
	t = dt__calloc_sparse((size_t)ntable, sizeof(*t));
	n->peers = dt__calloc_sparse((size_t)ntable, sizeof(dt_conn *));
	n->said_bye = dt__calloc_sparse((size_t)ntable, 1);
	if (t == NULL || n->peers == NULL || n->said_bye == NULL) {
		dt__free_sparse(t);
		dt__free_sparse(n->peers);
		dt__free_sparse(n->said_bye);
		n->peers = NULL;
		n->said_bye = NULL;
		free(given);
		free(*place);
		*place = NULL;
		return DT_ENOMEM;
	}
	/* The addresses known so far: the scheduler's (dialled already),
	 * this node's own and those given. No other row is written (an
	 * unknown row stays zero: untouched pages of a large table cost no
	 * memory), and a row's place follows from its id (dt__id_role). */
	for (int k = 0; k < count; k++)
		if (given[k].known && first + k != a.id) {
			t[first + k] = given[k];
			set_place(&t[first + k], first + k, a.num_servers);
		}
	/* (the tree parent's, which it dials before the start-up barrier) */
	if (*place && parent.known && parent.id != a.id) {
		t[parent.id] = parent;
		set_place(&t[parent.id], parent.id, a.num_servers);
	}
	set_place(&t[0], 0, a.num_servers);
	set_place(&t[a.id], a.id, a.num_servers);
	snprintf(t[0].host, DT_HOST_MAX, "%s", n->cfg.root_uri);
	t[0].port = n->cfg.root_port;
	t[0].pid = a.sched_pid;
	t[0].known = 1;
	snprintf(t[a.id].host, DT_HOST_MAX, "%s", n->host);
	t[a.id].port = n->port;
	t[a.id].pid = (int)getpid();
	snprintf(t[a.id].hostid, DT_HOSTID_MAX, "%s", n->hostid);
	snprintf(t[a.id].local, DT_LOCAL_MAX, "%s", n->local);
	t[a.id].known = 1;
	free(given);
	pthread_mutex_lock(&n->mu);
	n->table = t;
	n->ntable = ntable;
	n->num_servers = a.num_servers;
	n->id = a.id;
	n->rank = rank;
	n->here = a.here;
	n->assign_epoch = a.epoch;
	pthread_mutex_unlock(&n->mu);
	return DT_OK;
}

/* The answer to a LOOKUP of hosts: kept for the lookup waiting for it. */
static void
on_hosts_answer(dt_node *n, const dt_msg *m)
{
	uint32_t *v;
	int first, count;

	if (dt__msg_hosts_decode(m->meta, m->hdr.meta_len, n->ntable, &first,
	                         &count, &v)) {
		/* (the lookup that waits for it fails by its deadline) */
		dt__log(0,
		        "ignoring a malformed answer to a LOOKUP of hosts: %s",
		        dt_errmsg());
		return;
	}
	pthread_mutex_lock(&n->mu);
	free(n->hosts_v);
	n->hosts_v = v;
	n->hosts_first = first;
	n->hosts_count = count;
	n->hosts_tag = m->hdr.key;
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
}

void
dt__dir_on_answer(dt_node *n, dt_conn *c, const dt_msg *m)
{
	dt_node_entry *got;
	int first, count;

	if (dt__conn_peer(c) != 0 || !(m->hdr.flags & DT_F_RESPONSE) ||
	    n->table == NULL)
		return;
	if (m->hdr.arg0 == DT_LOOKUP_HOSTS) {
		on_hosts_answer(n, m);
		return;
	}
	if (dt__msg_dir_decode(m->meta, m->hdr.meta_len, n->num_servers,
	                       n->ntable, &first, &count, &got)) {
		/* (the scheduler is trusted once it authenticated, but a
		 * malformed answer is still only logged: the lookup that
		 * waits for it fails by its deadline, naming the node) */
		dt__log(0, "ignoring a malformed LOOKUP answer: %s",
		        dt_errmsg());
		return;
	}
	pthread_mutex_lock(&n->mu);
	for (int k = 0; k < count; k++)
		if (got[k].known)
			learn_locked(n, first + k, &got[k]);
	if (m->hdr.key > n->dir_answered)
		n->dir_answered = m->hdr.key;
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	free(got);
}

/* The first id of [first, end) whose entry is not known here, or end. */
static int
first_unknown(const dt_node *n, int first, int end)
{
	for (int id = first; id < end; id++)
		if (!entry_known(&n->table[id]))
			return id;
	return end;
}

static int
answered(dt_node *n, const void *arg)
{
	return n->dir_answered >= *(const uint64_t *)arg;
}

/* (mu held, dt__node_wait) Take the slot of LOOKUPs of hosts if free. */
static int
claim_hosts(dt_node *n, const void *arg)
{
	(void)arg;
	if (n->hosts_busy)
		return 0;
	n->hosts_busy = 1;
	return 1;
}

static int
hosts_answered(dt_node *n, const void *arg)
{
	return n->hosts_tag == *(const uint64_t *)arg;
}

dt_err
dt__node_lookup_hosts(dt_node *n, int first, int count, uint32_t *out)
{
	uint64_t deadline =
	    dt__now_ns() + (uint64_t)n->cfg.connect_timeout_ms * 1000000ull;
	dt_err err = DT_OK;

	if (n->role == DT_ROLE_SCHEDULER)
		return dt__fail(DT_ESTATE, "the scheduler looks up no hosts");
	if (n->table == NULL || first < 1 || count < 0 ||
	    count > n->ntable - first)
		return dt__fail(DT_EINVAL,
		                "lookup of the hosts of node ids %d..+%d: not "
		                "in this job's table",
		                first, count);
	if (dt__van_dispatching(n->van))
		return dt__fail(DT_ESTATE, "the I/O thread does not wait for "
		                           "the scheduler's answer");
	/* (one at a time: the answer's slot is the node's) */
	if ((err = dt__node_wait(n, claim_hosts, NULL, deadline,
	                         "another LOOKUP of hosts to end")))
		return err;
	/* (over the control tree, its idle connection may be closed:
	 * dialled again for the answers, root.c) */
	int held = (err = dt__root_hold(n)) == DT_OK;
	for (int at = first; at < first + count && err == DT_OK;) {
		int span = DT_MIN(first + count - at, DT_HOSTS_MAX);
		uint64_t tag;
		dt_wbuf w;

		pthread_mutex_lock(&n->mu);
		tag = ++n->dir_asked;
		pthread_mutex_unlock(&n->mu);
		dt_msg_hdr h = {.cmd = DT_CMD_LOOKUP,
		                .flags = DT_F_REQUEST,
		                .arg0 = DT_LOOKUP_HOSTS,
		                .key = tag};
		dt__wbuf_init(&w);
		err = dt__msg_lookup_encode(at, span, &w);
		if (err == DT_OK)
			err = dt__node_send(n, 0, &h, w.data, (uint32_t)w.len,
			                    NULL, 0);
		dt__wbuf_fini(&w);
		if (err == DT_OK)
			err =
			    dt__node_wait(n, hosts_answered, &tag, deadline,
			                  "the scheduler's answer to a LOOKUP "
			                  "of hosts");
		if (err)
			break;
		pthread_mutex_lock(&n->mu);
		if (n->hosts_first != at || n->hosts_count != span)
			err =
			    dt__fail(DT_EPROTO,
			             "the scheduler answered a LOOKUP of the "
			             "hosts of ids %d..+%d with %d..+%d",
			             at, span, n->hosts_first, n->hosts_count);
		else
			memcpy(out + (at - first), n->hosts_v,
			       sizeof(*out) * (size_t)span);
		free(n->hosts_v);
		n->hosts_v = NULL;
		pthread_mutex_unlock(&n->mu);
		at += span;
	}
	if (held)
		dt__root_release(n);
	pthread_mutex_lock(&n->mu);
	n->hosts_busy = 0;
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	return err;
}

dt_err
dt__node_lookup(dt_node *n, int first, int count)
{
	uint64_t deadline =
	    dt__now_ns() + (uint64_t)n->cfg.connect_timeout_ms * 1000000ull;
	int end = first + count, id, pos = first, missing = -1, held = 0;
	char name[64];
	dt_err err = DT_OK;

	if (n->role == DT_ROLE_SCHEDULER || count <= 0)
		return DT_OK;
	if (n->table == NULL || first < 0 || count > n->ntable - first)
		return dt__fail(DT_EINVAL,
		                "lookup of node ids %d..+%d: not in this job's "
		                "table",
		                first, count);
	while ((id = first_unknown(n, pos, end)) < end) {
		int span = end - id < DT_DIR_MAX ? end - id : DT_DIR_MAX;
		uint64_t tag;
		dt_wbuf w;

		dt__node_name(n, id, name, sizeof(name));
		if (dt__van_dispatching(n->van)) {
			err = dt__fail(DT_ESTATE,
			               "the address of %s is not known here "
			               "yet, and the I/O thread does not wait "
			               "for the scheduler's answer",
			               name);
			break;
		}
		/* (over the control tree, its idle connection may be closed:
		 * dialled again for the answers, root.c) */
		if (!held && (err = dt__root_hold(n)))
			break;
		held = 1;
		pthread_mutex_lock(&n->mu);
		tag = ++n->dir_asked;
		pthread_mutex_unlock(&n->mu);
		dt_msg_hdr h = {
		    .cmd = DT_CMD_LOOKUP, .flags = DT_F_REQUEST, .key = tag};
		dt__wbuf_init(&w);
		err = dt__msg_lookup_encode(id, span, &w);
		if (err == DT_OK)
			err = dt__node_send(n, 0, &h, w.data, (uint32_t)w.len,
			                    NULL, 0);
		dt__wbuf_fini(&w);
		if (err == DT_OK)
			err = dt__node_wait(n, answered, &tag, deadline,
			                    "the scheduler's answer to LOOKUP");
		if (err)
			break;
		/* (answered: an entry still unknown is one the scheduler
		 * does not know either) */
		int left = first_unknown(n, id, id + span);
		if (left < id + span && missing < 0)
			missing = left;
		pos = id + span;
	}
	if (held)
		dt__root_release(n);
	if (err)
		return err;
	if (missing >= 0)
		return dt__fail(DT_EPEER,
		                "the scheduler knows no address of %s (node id "
		                "%d): it is not in the job",
		                dt__node_name(n, missing, name, sizeof(name)),
		                missing);
	return DT_OK;
}
