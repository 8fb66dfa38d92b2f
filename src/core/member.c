/*
 * member.c - a server's or worker's side of the cluster protocol
 * (docs/cluster.md has the whole protocol; scheduler.c the other side):
 *   1. connect to the scheduler (retrying until DT_CONNECT_TIMEOUT) and
 *      send ADD_NODE with role, address and any rank request;
 *   2. receive ASSIGN: our id and rank, the job's sizes and, a worker,
 *      the servers' addresses (directory.c; any other address is looked
 *      up when first needed), and in a large job the node's place in the
 *      control tree with its parent's address: the one reply of the join;
 *   3. connect to the servers (a worker), each answered by HELLO_ACK;
 *      another worker is dialled when this one first sends to it
 *      (reach.c), except by a worker taking a lost one's place, which
 *      dials the workers of lower rank as well (recovery);
 *   4. start the apps meant for this role, then pass the start-up barrier
 *      over all nodes.
 * Then the control messages of a running job: barriers (over the control
 * tree in a large job: tree_barrier.c), TERMINATE, ABORT.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/node_impl.h"
#include "net/transport.h"

static int
role_group(dt_role r)
{
	return r == DT_ROLE_SCHEDULER ? DT_GROUP_SCHEDULER
	       : r == DT_ROLE_SERVER  ? DT_GROUP_SERVERS
	                              : DT_GROUP_WORKERS;
}

/* The waiting calls' spin (common/spin.h) suits a machine with a processor
 * for each busy process of the job; the scheduler counted ours on this
 * host (ASSIGN). */
static void
fit_spin(dt_node *n)
{
	dt__shm_fit(n->here); /* (and the rings of links made from now on) */
	if (dt__spin_fit(n->here))
		DT_LOG(1,
		       "%d servers and workers on this host for %ld "
		       "processors: waiting calls give the processor away "
		       "while they poll (set DT_SPIN_US to choose)",
		       n->here, sysconf(_SC_NPROCESSORS_ONLN));
}

/* A worker's HELLO that came before this node's assignment. */
struct dt__early_hello {
	dt_conn *c;
	uint32_t id;
	uint64_t gen;
};

static void on_hello(dt_node *n, dt_conn *c, dt_msg *m);

/*
 * A worker may get its assignment, dial a server and say HELLO before the
 * server has its own: the scheduler sends the assignments one after the
 * other, and a busy server reads its connection to the scheduler late.
 * Such a HELLO is kept (the connection waits unanswered) and answered
 * when the assignment comes, as if it came then; at most one per node of
 * the job (a connection that says HELLO has proved the job's key). 1 if
 * it was kept.
 */
static int
park_hello(dt_node *n, dt_conn *c, const dt_msg *m)
{
	int kept = 0;

	/* (a parked join's tree children may be called back and dial this
	 * node before its own call back is read: up to a host leader's
	 * children are kept too, where a refused dial would be tried again
	 * every 20 ms) */
	pthread_mutex_lock(&n->mu);
	int most = n->cfg.num_servers + dt__elastic_slots(n) +
	           (n->join_parked ? DT_TREE_KIDS_MAX : 0);

	if (!n->have_table && n->nearly < most) {
		if (n->nearly == n->early_cap) {
			int cap = n->early_cap ? 2 * n->early_cap : 16;
			struct dt__early_hello *e =
			    realloc(n->early, sizeof(*e) * (size_t)cap);

			if (e) {
				n->early = e;
				n->early_cap = cap;
			}
		}
		if (n->nearly < n->early_cap) {
			n->early[n->nearly++] = (struct dt__early_hello){
			    c, m->hdr.sender, m->hdr.arg0};
			kept = 1;
		}
	}
	pthread_mutex_unlock(&n->mu);
	return kept;
}

void
dt__member_forget_hello(dt_node *n, dt_conn *c)
{
	pthread_mutex_lock(&n->mu);
	for (int i = 0; i < n->nearly; i++)
		if (n->early[i].c == c)
			n->early[i--] = n->early[--n->nearly];
	pthread_mutex_unlock(&n->mu);
}

/* The assignment is in: the HELLOs kept meanwhile, answered in order. */
static void
answer_early(dt_node *n)
{
	for (;;) {
		struct dt__early_hello e;
		dt_msg m = {0};

		pthread_mutex_lock(&n->mu);
		if (n->nearly == 0) {
			pthread_mutex_unlock(&n->mu);
			return;
		}
		e = n->early[0];
		memmove(n->early, n->early + 1,
		        sizeof(*n->early) * (size_t)--n->nearly);
		pthread_mutex_unlock(&n->mu);
		m.hdr.cmd = DT_CMD_HELLO;
		m.hdr.sender = e.id;
		m.hdr.arg0 = e.gen;
		on_hello(n, e.c, &m);
	}
}

/* JOIN_PARK: the scheduler parks this worker's join (a large job,
 * join_park.c). The ticket is kept, and the connection closed at once:
 * the scheduler waits for that close before it calls back, so a HELLO
 * with the ticket finds it known. */
static void
on_join_park(dt_node *n, dt_conn *c, const dt_msg *m)
{
	int ok;

	pthread_mutex_lock(&n->mu);
	ok = dt__conn_peer(c) == 0 && !n->have_table && !n->join_parked &&
	     n->role == DT_ROLE_WORKER && m->hdr.meta_len == DT_JOIN_TICKET;
	if (ok) {
		memcpy(n->join_ticket, m->meta, DT_JOIN_TICKET);
		n->join_parked = 1;
		/* (its close is no loss of the scheduler, lifecycle.c) */
		dt__conn_set_peer(c, -1);
		__atomic_store_n(&n->root, NULL, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&n->cv);
	}
	pthread_mutex_unlock(&n->mu);
	if (ok)
		DT_LOG(1, "the scheduler parked this node's join: it calls "
		          "back with the assignment once every node joined");
	else
		dt__log(0, "dropping %s: unexpected JOIN_PARK",
		        dt__conn_addr(c));
	dt__van_close(n->van, c);
}

/* A HELLO from node 0 on a connection accepted here: the scheduler
 * calling back a parked join, with its ticket; 1 if taken (the
 * connection is then the scheduler's, and its ASSIGN follows). */
static int
on_call_back(dt_node *n, dt_conn *c, const dt_msg *m)
{
	int ok;

	pthread_mutex_lock(&n->mu);
	ok = n->join_parked == 1 && !n->have_table && dt__conn_peer(c) == -1 &&
	     m->hdr.meta_len == DT_JOIN_TICKET && m->meta != NULL &&
	     dt__same_bytes(m->meta, n->join_ticket, DT_JOIN_TICKET);
	if (ok) {
		n->join_parked = 2;
		dt__conn_set_peer(c, 0);
		__atomic_store_n(&n->root, c, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&n->mu);
	if (ok)
		DT_LOG(1, "the scheduler called back from %s",
		       dt__conn_addr(c));
	return ok;
}

/* The scheduler's assignment: this process is in the job. */
static void
on_assign(dt_node *n, dt_conn *c, dt_msg *m)
{
	dt__tree_place *place = NULL;
	dt_err err;

	if (n->have_table || dt__conn_peer(c) != 0) {
		dt__van_close(n->van, c);
		return;
	}
	if ((err = dt__dir_on_assign(n, m, &place)) != DT_OK) {
		dt__node_set_fatal(n, DT_EPROTO, "cannot join the cluster: %s",
		                   dt_errmsg());
		return;
	}
	/* key 1: the node's place in the control tree is in it (never in an
	 * elastic job's, nor in a lost node's successor's) */
	if (place && (n->elastic || m->hdr.arg2 != 0)) {
		free(place);
		place = NULL;
	}
	__atomic_store_n(&n->peers[0], c, __ATOMIC_RELEASE);
	/* arg2: this process takes a lost node's place (recovery) */
	n->gen = m->hdr.arg2;
	n->rejoined = m->hdr.arg2 != 0;
	/* arg1: this worker joins a running elastic job */
	n->el_joiner = n->elastic && m->hdr.arg1 == 1;
	n->tree_wait = place != NULL;
	if ((err = dt__link_create(n)) != DT_OK ||
	    (err = dt__reach_create(n)) != DT_OK) {
		free(place);
		dt__node_set_fatal(n, err, "cannot join the cluster: %s",
		                   dt_errmsg());
		return;
	}
	/* (before the table is published: a HELLO kept meanwhile is
	 * answered knowing the place, a server's child server by it) */
	if (place)
		dt__tree_set_place(n, place);
	pthread_mutex_lock(&n->mu);
	n->have_table = 1;
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	answer_early(n);
}

/* A worker's HELLO: its first connection to this node, a worker that dials
 * again (PS_RESEND) or one in a lost worker's place (recovery). */
static void
on_hello(dt_node *n, dt_conn *c, dt_msg *m)
{
	char name[64];
	uint32_t id = m->hdr.sender;

	if (id == 0) {
		if (on_call_back(n, c, m))
			return;
		dt__log(0,
		        "dropping %s: HELLO as the scheduler without this "
		        "node's ticket",
		        dt__conn_addr(c));
		dt__van_close(n->van, c);
		return;
	}
	/* (before this node's assignment: answered when it comes) */
	if (dt__conn_peer(c) == -1 && park_hello(n, c, m))
		return;
	/* Recovery: a new process in a lost worker's place may say
	 * HELLO before the scheduler's NODE_UPDATE about it comes:
	 * its link starts again here (arg0: its count of restarts). */
	if (n->recover && n->links && n->have_table && id > 0 &&
	    id < (uint32_t)n->ntable && dt__conn_peer(c) == -1 &&
	    dt__id_role(n, id) == DT_ROLE_WORKER && (int)id > n->id &&
	    dt__link_newer_gen(n, (int)id, m->hdr.arg0)) {
		dt__log(0, "%s came back (it says HELLO)",
		        dt__node_name(n, (int)id, name, sizeof(name)));
		dt__link_restart_peer(n, (int)id, NULL, NULL, 0, NULL);
		dt__node_restart_apps(n, (int)id);
	}
	/* A worker's first connection to another (reach.c). */
	if (n->have_table && id > 0 && id < (uint32_t)n->ntable) {
		int v = dt__reach_on_hello(n, c, (int)id);

		if (v == 0) {
			dt__van_close(n->van, c);
			return;
		}
		if (v == 1)
			return;
	}
	/* PS_RESEND: a worker dials again after a lost connection. */
	if (n->links && n->have_table && id > 0 && id < (uint32_t)n->ntable &&
	    dt__conn_peer(c) == -1 && dt__id_role(n, id) == DT_ROLE_WORKER &&
	    (int)id > n->id && dt__link_adopt(n, c, (int)id)) {
		dt_msg_hdr h = {.cmd = DT_CMD_HELLO_ACK,
		                .flags = DT_F_RESPONSE};
		dt__node_send(n, (int)id, &h, NULL, 0, NULL, 0);
		return;
	}

	/* Only workers dial, and only nodes of lower id; one
	 * connection per node (a second HELLO naming a live node is
	 * refused, not allowed to replace it). */
	if (!n->have_table || id == 0 || id >= (uint32_t)n->ntable ||
	    dt__conn_peer(c) != -1 || dt__id_role(n, id) != DT_ROLE_WORKER ||
	    (int)id <= n->id ||
	    __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE) != NULL) {
		/* Two workers that dialled each other at once: our
		 * dial won (the lower id's), and the higher one's
		 * HELLO came after it was up. Expected; not news. */
		int lost_race =
		    n->have_table && id < (uint32_t)n->ntable &&
		    (int)id > n->id && dt__reach_lazy(n, (int)id) &&
		    dt__conn_peer(c) == -1 &&
		    __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE) != NULL;

		if (lost_race)
			DT_LOG(1,
			       "closing %s: node %u dialled this node "
			       "while this node's dial to it won",
			       dt__conn_addr(c), id);
		else
			dt__log(0,
			        "dropping %s: unexpected HELLO from "
			        "node %u",
			        dt__conn_addr(c), id);
		dt__van_close(n->van, c);
		return;
	}
	dt__conn_set_peer(c, (int)id);
	__atomic_store_n(&n->said_bye[id], 0, __ATOMIC_RELEASE);
	__atomic_store_n(&n->peers[id], c, __ATOMIC_RELEASE);
	DT_LOG(1, "%s connected from %s",
	       dt__node_name(n, (int)id, name, sizeof(name)), dt__conn_addr(c));
	dt_msg_hdr h = {.cmd = DT_CMD_HELLO_ACK, .flags = DT_F_RESPONSE};
	dt__node_send(n, (int)id, &h, NULL, 0, NULL, 0);
}

/* NODE_UPDATE: a new process took node key's place (recovery), or a
 * worker joins a running elastic job. */
static void
on_node_update(dt_node *n, dt_conn *c, dt_msg *m)
{
	char name[64];
	/* Recovery: a new process took node key's place. */
	dt__msg_add_node a;
	uint64_t id = m->hdr.key;

	if (n->elastic) { /* a worker joins the running job */
		dt__elastic_member_on_update(n, c, m);
		return;
	}
	if (dt__conn_peer(c) != 0 || !n->recover)
		return;
	if (id == 0 || id >= (uint64_t)n->ntable || id == (uint64_t)n->id ||
	    dt__msg_add_node_decode(m->meta, m->hdr.meta_len, &a) ||
	    a.role != dt__id_role(n, id)) {
		dt__log(0, "ignoring a malformed NODE_UPDATE");
		return;
	}
	/* (a node that had not looked it up yet keeps the new address in
	 * its table; one that had, in the peer's link, which its dials read
	 * first) */
	dt__dir_learn(n, (int)id, a.host, a.port, a.pid, a.hostid, a.local);
	if (!dt__link_newer_gen(n, (int)id, m->hdr.arg0)) {
		/* (its HELLO came first and started the link again) */
		dt__link_set_addr(n, (int)id, a.host, a.port,
		                  dt__node_local_of(n, a.hostid, a.local));
		return;
	}
	dt__log(0, "%s came back: pid %d at %s:%d",
	        dt__node_name(n, (int)id, name, sizeof(name)), a.pid, a.host,
	        a.port);
	/*
	 * The apps hear of the new process before its link starts again.
	 * A KVStore worker holds back its requests to a restarted server
	 * until the server says what its checkpoint holds, then sends the
	 * replay first (kv/client_replay.c). Were the link restarted first,
	 * a request sent between the two would be numbered on the new link
	 * and reach the new server ahead of the replay - and again inside
	 * it, counted twice. In this order a request checked before the mark
	 * is numbered on the old link and dropped with it (the replay sends
	 * it), and one checked after it waits for the replay. (A caller
	 * between its check and its send while both happen still numbers
	 * its request on the new link: closing that needs the check and the
	 * numbering under one lock.) The hooks only mark state; they send
	 * nothing to the peer.
	 */
	dt__node_restart_apps(n, (int)id);
	dt__link_restart_peer(n, (int)id, NULL, a.host, a.port,
	                      dt__node_local_of(n, a.hostid, a.local));
}

/* A barrier's release: from the scheduler, or over the tree from the
 * parent (which this node forwards to its children first). */
static void
on_barrier_done(dt_node *n, dt_conn *c, const dt_msg *m)
{
	if (m->hdr.arg0 < 1 || m->hdr.arg0 > 7)
		return;
	if (n->tree ? !dt__tree_on_done(n, c, m) : dt__conn_peer(c) != 0)
		return;
	if (!(m->hdr.arg0 & (uint64_t)role_group(n->role)))
		return;
	pthread_mutex_lock(&n->mu);
	n->barrier_err[m->hdr.arg0] =
	    m->hdr.key ? (int)dt__err_from_wire(m->hdr.key, DT_EPEER) : 0;
	dt__printable(m->meta ? (const char *)m->meta : "",
	              n->barrier_msg[m->hdr.arg0],
	              sizeof(n->barrier_msg[m->hdr.arg0]));
	n->barrier_done[m->hdr.arg0]++;
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
}

/* A peer leaving: PS_RESEND's links take its BYE; else it is noted, only
 * from the connection that is this peer's now (a BYE on an old one says
 * nothing about the current one). */
static void
on_bye(dt_node *n, dt_conn *c)
{
	int peer = dt__conn_peer(c);

	if (n->links) {
		if (peer >= 0)
			dt__link_bye_from(n, peer);
		return;
	}
	if (peer > 0 && peer < n->ntable && n->said_bye &&
	    __atomic_load_n(&n->peers[peer], __ATOMIC_ACQUIRE) == c)
		__atomic_store_n(&n->said_bye[peer], 1, __ATOMIC_RELEASE);
}

void
dt__member_on_msg(dt_node *n, dt_conn *c, dt_msg *m)
{
	switch (m->hdr.cmd) {
	case DT_CMD_MEMBERSHIP:
		dt__elastic_member_on_msg(n, c, m);
		return;
	case DT_CMD_GROW:
		dt__elastic_member_on_grow(n, c, m);
		return;
	case DT_CMD_ASSIGN:
		on_assign(n, c, m);
		return;
	case DT_CMD_JOIN_PARK:
		on_join_park(n, c, m);
		return;
	case DT_CMD_LOOKUP:
		dt__dir_on_answer(n, c, m);
		return;
	case DT_CMD_BARRIER:
		dt__tree_on_barrier(n, c, m);
		return;
	case DT_CMD_TREE_LOST:
		dt__tree_on_lost(n, c, m);
		return;
	case DT_CMD_HELLO:
		on_hello(n, c, m);
		return;
	case DT_CMD_HELLO_ACK:
		if (dt__reach_on_ack(n, c, m))
			return;
		pthread_mutex_lock(&n->mu);
		n->hello_acks++;
		pthread_cond_broadcast(&n->cv);
		pthread_mutex_unlock(&n->mu);
		return;
	case DT_CMD_BARRIER_DONE:
		on_barrier_done(n, c, m);
		return;
	case DT_CMD_NODE_UPDATE:
		on_node_update(n, c, m);
		return;
	case DT_CMD_TERMINATE:
		/* (from the scheduler, or over the control tree) */
		if (!dt__tree_on_terminate(n, c))
			return;
		DT_LOG(1, "the scheduler ends the job");
		pthread_mutex_lock(&n->mu);
		n->terminated = 1;
		pthread_cond_broadcast(&n->cv);
		pthread_mutex_unlock(&n->mu);
		return;
	case DT_CMD_ABORT:
		(void)dt__tree_on_abort(n, c, m);
		return;
	case DT_CMD_WORKER_DONE:
		dt__tree_on_worker_done(n, c, m);
		return;
	case DT_CMD_REPORT: /* (a tree child's merged counters) */
		dt__tree_on_report(n, c, m);
		return;
	case DT_CMD_CLOCK:
		dt__report_on_clock(n, c, m);
		return;
	case DT_CMD_HEARTBEAT:
	case DT_CMD_ACK: /* (a PS_RESEND ACK is taken in lifecycle.c) */
		return;  /* its bytes were the point (watch.c) */
	case DT_CMD_BYE:
		on_bye(n, c);
		return;
	case DT_CMD_TEXT:
		/* From a connection that said who it is, named by that. */
		if (dt__conn_peer(c) < 0) {
			dt__log(0, "dropping %s: TEXT before HELLO",
			        dt__conn_addr(c));
			dt__van_close(n->van, c);
			return;
		}
		dt__node_log_text(n, dt__conn_peer(c), m);
		return;
	default:
		dt__log(0, "ignoring %s from %s", dt__cmd_name(m->hdr.cmd),
		        dt__conn_addr(c));
	}
}

dt_err
dt_node_barrier(dt_node *n, int groups)
{
	return dt__node_barrier_status(n, groups, DT_OK, NULL);
}

dt_err
dt__node_barrier_status(dt_node *n, int groups, dt_err mine, const char *msg)
{
	uint64_t want;
	dt_err err;

	if (n == NULL)
		return dt__fail(DT_EINVAL, "barrier: node is NULL");
	if (groups < 1 || groups > DT_GROUP_ALL)
		return dt__fail(DT_EINVAL, "barrier: bad group mask %d",
		                groups);
	if (!(groups & role_group(n->role)))
		return dt__fail(DT_EINVAL,
		                "barrier: a %s is not in group mask %d",
		                dt_role_name(n->role), groups);
	if ((err = dt__node_check(n)))
		return err;
	if (n->role == DT_ROLE_SCHEDULER)
		return dt__fail(DT_ENOTSUP,
		                "the scheduler joins barriers by serving");
	/* A worker joining a running elastic job meets the members at their
	 * commit, not in their barriers: its first barrier over the workers
	 * (its communicator listens) says it is ready, and ends once a
	 * membership takes it in. */
	if (n->el_joiner && groups == DT_GROUP_WORKERS &&
	    !dt__elastic_member(n, n->id))
		return dt__elastic_joiner_ready(n);
	pthread_mutex_lock(&n->mu);
	want = ++n->barrier_sent[groups];
	pthread_mutex_unlock(&n->mu);
	uint64_t t0 = dt__now_ns();
	dt_msg_hdr h = {.cmd = DT_CMD_BARRIER,
	                .flags = DT_F_REQUEST,
	                .arg0 = (uint64_t)groups,
	                .key = (uint64_t)mine};
	char text[256];

	snprintf(text, sizeof(text), "%s", mine && msg ? msg : "");
	/* (over the control tree: counted here, sent on when this node's
	 * subtree is whole, tree_barrier.c) */
	err = n->tree ? dt__tree_arrive(n, groups, mine, msg)
	              : dt__node_send(n, 0, &h, text, (uint32_t)strlen(text),
	                              NULL, 0);
	if (err)
		return err;
	err = dt__node_wait_count(n, &n->barrier_done[groups], 1, want,
	                          dt__now_ns() + n->wait_ns, "a barrier");
	if (err == DT_ETIMEDOUT) {
		/* The barriers' count is off from here on: the node is done. */
		dt__node_set_fatal(
		    n, DT_ETIMEDOUT,
		    "barrier #%llu over group mask %d: not every "
		    "node arrived within DT_WAIT_TIMEOUT=%llu s",
		    (unsigned long long)want, groups,
		    (unsigned long long)(n->wait_ns / 1000000000ull));
		return dt__fail(DT_ETIMEDOUT, "%s", n->fatal_msg);
	}
	if (err)
		return err;
	dt__trace_span(DT_EV_BARRIER, DT_TID_MAIN, t0, (uint64_t)groups,
	               DT_EVF_KEY, 0, 0);
	DT_LOG(1, "passed barrier #%llu over group mask %d",
	       (unsigned long long)want, groups);
	pthread_mutex_lock(&n->mu);
	err = (dt_err)n->barrier_err[groups];
	snprintf(text, sizeof(text), "%s", n->barrier_msg[groups]);
	pthread_mutex_unlock(&n->mu);
	if (err)
		return dt__fail(err, "%s", text);
	return DT_OK;
}

/* This process's place token (DTRAIN_NODE_TOKEN, "" if unset): a restart
 * must present its predecessor's (docs/fault-tolerance.md). The same
 * letters as a host id, so that the scheduler's decoder takes it. */
static dt_err
place_token(char *out, size_t cap)
{
	const char *s = dt__env_str("DTRAIN_NODE_TOKEN");
	size_t len = s ? strlen(s) : 0;

	out[0] = '\0';
	if (s == NULL)
		return DT_OK;
	if (len < 16 || len >= cap || len >= DT_NODE_TOKEN_MAX)
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_NODE_TOKEN has %zu bytes: it must have "
		                "16 to %d",
		                len, DT_NODE_TOKEN_MAX - 1);
	if (strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	              "0123456789.:/-_") != len)
		return dt__fail(
		    DT_ECONFIG,
		    "DTRAIN_NODE_TOKEN may hold only letters, digits "
		    "and . : / - _");
	memcpy(out, s, len + 1);
	return DT_OK;
}

/* Dial the scheduler (rank 0's rendezvous under mpirun/srun): the
 * connection becomes the node's root. */
static dt_err
connect_root(dt_node *n)
{
	dt_conn *sc;
	dt_err err = dt__van_connect(
	    n->van, n->cfg.root_uri, n->cfg.root_port, NULL,
	    n->cfg.connect_timeout_ms,
	    n->cfg.root_var[0] ? "rank 0's rendezvous" : "scheduler", &sc);

	if (err) {
		char where[320];

		if (n->cfg.root_var[0])
			snprintf(where, sizeof(where), "%s=%s:%d",
			         n->cfg.root_var, n->cfg.root_uri,
			         n->cfg.root_port);
		else
			snprintf(where, sizeof(where),
			         "DMLC_PS_ROOT_URI=%s DMLC_PS_ROOT_PORT=%d",
			         n->cfg.root_uri, n->cfg.root_port);
		return dt__fail(
		    err, "%s (%s%s)", dt_errmsg(), where,
		    err == DT_EAUTH
		        ? ""
		        : "; raise DT_CONNECT_TIMEOUT to wait longer");
	}
	dt__conn_set_peer(sc, 0);
	__atomic_store_n(&n->root, sc, __ATOMIC_RELEASE); /* heartbeats */
	DT_LOG(1, "connected to the scheduler at %s:%d", n->cfg.root_uri,
	       n->cfg.root_port);
	return DT_OK;
}

static int
assigned_or_parked(dt_node *n, const void *arg)
{
	(void)arg;
	return n->have_table || n->join_parked;
}

/* The assignment: on the connection to the scheduler, whose close ends
 * the wait; or, once the join is parked (a large job), called back
 * within twice DT_JOIN_TIMEOUT (the scheduler's wait for every node,
 * then for its call backs). */
static dt_err
wait_assignment(dt_node *n)
{
	long join_s;
	dt_err err;

	if ((err = dt__node_wait(n, assigned_or_parked, NULL, 0,
	                         "the scheduler's assignment")))
		return err;
	pthread_mutex_lock(&n->mu);
	int parked = !n->have_table;
	pthread_mutex_unlock(&n->mu);
	if (!parked)
		return DT_OK;
	if ((err = dt__env_long("DT_JOIN_TIMEOUT", 300, 1, 86400, &join_s)))
		return err;
	err = dt__node_wait_count(n, &n->have_table, 0, 1,
	                          dt__now_ns() +
	                              2 * (uint64_t)join_s * 1000000000ull,
	                          "the scheduler's call back");
	if (err == DT_ETIMEDOUT)
		return dt__fail(
		    err,
		    "the scheduler parked this worker's join and "
		    "did not call back with its assignment within "
		    "2 x DT_JOIN_TIMEOUT=%ld s (DMLC_PS_ROOT_URI=%s "
		    "DMLC_PS_ROOT_PORT=%d)",
		    join_s, n->cfg.root_uri, n->cfg.root_port);
	return err;
}

/* ADD_NODE to the scheduler, then wait for the assignment (ASSIGN). */
static dt_err
ask_to_join(dt_node *n)
{
	char token[DT_NODE_TOKEN_MAX] = "", name[64];
	dt_wbuf w;
	dt_err err;

	if ((err = place_token(token, sizeof(token))))
		return err;
	dt__msg_add_node a = {.role = n->role,
	                      .want = n->cfg.requested_rank,
	                      .port = n->port,
	                      .pid = (int)getpid(),
	                      .num_servers = n->cfg.num_servers,
	                      .num_workers = n->cfg.num_workers};
	snprintf(a.host, sizeof(a.host), "%s", n->host);
	snprintf(a.hostid, sizeof(a.hostid), "%s", n->hostid);
	snprintf(a.local, sizeof(a.local), "%s", n->local);
	memcpy(a.token, token, sizeof(a.token));
	dt__wbuf_init(&w);
	dt_msg_hdr h = {.cmd = DT_CMD_ADD_NODE, .flags = DT_F_REQUEST};
	h.recver = 0;
	err = dt__msg_add_node_encode(&a, &w);
	if (!err)
		err = dt__van_send(n->van,
		                   __atomic_load_n(&n->root, __ATOMIC_ACQUIRE),
		                   &h, w.data, (uint32_t)w.len, NULL, 0);
	dt__wbuf_fini(&w);
	if (err)
		return err;
	DT_LOG(1, "asked the scheduler to add this %s at %s:%d",
	       dt_role_name(n->role), n->host, n->port);

	if ((err = wait_assignment(n)))
		return err;
	snprintf(name, sizeof(name), "%s %d", dt_role_name(n->role), n->rank);
	dt__log_set_name(name);
	fit_spin(n);
	if (n->elastic)
		DT_LOG(1,
		       "joined the cluster as %s (node id %d) of %d servers "
		       "and up to %d workers, at membership epoch %llu",
		       name, n->id, n->num_servers, dt__elastic_slots(n),
		       (unsigned long long)n->assign_epoch);
	else
		DT_LOG(1,
		       "joined the cluster as %s (node id %d) of %d servers "
		       "and %d workers",
		       name, n->id, n->num_servers, n->num_workers);
	return DT_OK;
}

/*
 * A worker connects to the servers. A KV worker talks to every one of
 * them (keys are spread over all), so they are dialled now, in one go;
 * other workers on demand (reach.c). A worker in a lost one's place dials
 * the workers of lower rank too: with PS_RESEND those that talked to its
 * predecessor wait for it to dial again. *need: the HELLOs sent.
 */
static dt_err
dial_servers(dt_node *n, int *need)
{
	int last = n->rejoined ? n->id : 1 + n->num_servers;
	char name[64];
	dt_err err;

	/* (the servers' addresses came with the assignment, as many as it
	 * carries; the rest, and the workers', are asked for) */
	if ((err = dt__node_lookup(n, 1, last - 1)))
		return err;
	for (int id = 1; id < last; id++) {
		dt_node_entry *e = &n->table[id];
		dt_conn *c;

		err = dt__van_connect(n->van, e->host, e->port,
		                      dt__node_local_of(n, e->hostid, e->local),
		                      n->cfg.connect_timeout_ms,
		                      dt__node_name(n, id, name, sizeof(name)),
		                      &c);
		/* (stopped: the node failed meanwhile, and says why) */
		if (err == DT_ESHUTDOWN) {
			dt_err fatal = dt__node_check(n);

			return fatal ? fatal : err;
		}
		if (err)
			return err;
		dt__conn_set_peer(c, id);
		__atomic_store_n(&n->peers[id], c, __ATOMIC_RELEASE);
		dt__link_note_conn(n, id);
		dt_msg_hdr hh = {
		    .cmd = DT_CMD_HELLO, .flags = DT_F_REQUEST, .arg0 = n->gen};
		if ((err = dt__node_send(n, id, &hh, NULL, 0, NULL, 0)))
			return err;
		(*need)++;
		DT_LOG(1, "connected to %s at %s", name, dt__conn_addr(c));
	}
	return DT_OK;
}

dt_err
dt__member_start(dt_node *n)
{
	uint64_t deadline;
	dt_err err;
	int need = 0;

	if ((err = connect_root(n)) || (err = ask_to_join(n)))
		return err;
	deadline =
	    dt__now_ns() + (uint64_t)n->cfg.connect_timeout_ms * 1000000ull;
	if (n->role == DT_ROLE_WORKER && (err = dial_servers(n, &need)))
		return err;
	if ((err = dt__node_wait_count(n, &n->hello_acks, 0, (uint64_t)need,
	                               deadline, "peers to answer HELLO")))
		return err;
	/* (the control tree's edge to the parent, before the start-up
	 * barrier goes over it) */
	if ((err = dt__tree_join(n)))
		return err;
	/* (a parked join: the scheduler's connection is idle from here) */
	dt__root_park_joined(n);
	if ((err = dt__apps_start(n)))
		return err;
	DT_LOG(1, "%s is connected to its peers", dt__log_name());
	/* (the others passed the start-up barrier long ago) */
	if (!n->rejoined && !n->el_joiner &&
	    (err = dt_node_barrier(n, DT_GROUP_ALL)))
		return err;
	/* (over the control tree, the scheduler's connection is idle from
	 * here on: root.c) */
	dt__root_park(n);
	DT_LOG(1, "%s is ready", dt__log_name());
	return DT_OK;
}
