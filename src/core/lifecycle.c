/*
 * lifecycle.c - a node from start to stop: the transport's hooks, which
 * hand each message to the scheduler's side (scheduler.c), the member's
 * side (member.c) or the app owning its command (app.c); dt_node_start,
 * serve and stop; and the MXNet rule that a process started as a server or
 * scheduler serves that role and ends (dt_node_init_from_env).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/file.h"
#include "core/node_impl.h"

/*
 * Only a peer that said HELLO (or the scheduler) may send an app's
 * message: hang up on anyone else, as soon as the header is in (1 if it
 * did). Checked where a payload would be placed and where a message is
 * delivered, since a message without payload reaches only the latter.
 */
static int
refuse_stranger(dt_node *n, dt_conn *c, unsigned cmd)
{
	if (dt__cmd_is_control(cmd) || dt__conn_peer(c) >= 0)
		return 0;
	dt__log(0, "dropping %s: %s before HELLO", dt__conn_addr(c),
	        dt__cmd_name(cmd));
	dt__van_close(n->van, c);
	return 1;
}

static void *
hook_payload_dest(void *arg, dt_conn *c, const dt_msg_hdr *h,
                  const uint8_t *meta)
{
	dt_node *n = arg;
	const dt__node_app *app;
	dt__app_hooks hk;

	/* A stranger's payload is never read. Control messages carry their
	 * data in the metadata, never in a payload, and an app that is not
	 * attached takes none: such a payload is read away, never stored. */
	if (refuse_stranger(n, c, h->cmd))
		return DT_VAN_DISCARD;
	/* PS_RESEND: judged here, once, for a frame with a payload; on_msg
	 * finds the verdict in the connection's note. */
	dt_msg_hdr hh = *h;
	int v = dt__link_judge(n, c, &hh, &meta, 1);

	dt__conn_set_note(c, v > 0 ? 2 : 1);
	if (v < 0) {
		dt__log(0, "dropping %s: %s", dt__conn_addr(c), dt_errmsg());
		dt__van_close(n->van, c);
	}
	if (v <= 0 || dt__cmd_is_control(hh.cmd) ||
	    (app = dt__node_app_of(n, hh.cmd)) == NULL)
		return DT_VAN_DISCARD;
	hk = app->hooks;
	if ((h->flags & DT_F_LINK) && !hk.dest_pure)
		return NULL; /* (see dest_pure in core.h) */
	if (hk.payload_dest) {
		void *dest = hk.payload_dest(hk.arg, n, c, &hh, meta);

		/* A streamed payload is used as it comes; with PS_RESEND a
		 * frame cut by a broken connection comes again whole, so its
		 * first part must not be used twice: buffer it, unless the
		 * app skips what it used (stream_resumable). With recovery
		 * the frame may never come again (its sender lost for good,
		 * then replaced): buffer it. */
		if (dest == DT_VAN_STREAM && (h->flags & DT_F_LINK) &&
		    (!hk.stream_resumable || n->recover))
			dest = NULL;
		return dest;
	}
	return NULL;
}

static void
hook_payload_chunk(void *arg, dt_conn *c, const dt_msg_hdr *h, const void *data,
                   uint64_t off, size_t len)
{
	dt_node *n = arg;
	const dt__node_app *app = dt__node_app_of(n, h->cmd);
	dt__app_hooks hk;
	dt_msg_hdr hh = *h;

	if (app == NULL)
		return;
	if (hh.flags & DT_F_LINK) { /* judged and kept in payload_dest */
		hh.flags &= (uint16_t)~DT_F_LINK;
		hh.meta_len -= DT_LINK_BLOCK;
	}
	hk = app->hooks;
	if (hk.payload_chunk)
		hk.payload_chunk(hk.arg, n, c, &hh, data, off, len);
}

static void dispatch(dt_node *n, dt_conn *c, dt_msg *m);

/* Count the frame by its sender before handing it on (what it wakes sees
 * it counted); a frame that names its connection's peer (HELLO) once it
 * is handled. Heartbeats are not counted on either side (watch.c sends
 * them to connections not yet named), nor a leaving worker's BYE (it goes
 * after the worker's end-of-job report, and may reach a peer before or
 * after that peer's own). */
static void
hook_on_msg(void *arg, dt_conn *c, dt_msg *m)
{
	dt_node *n = arg;
	uint64_t bytes =
	    DT_HDR_SIZE + (uint64_t)m->hdr.meta_len + m->hdr.payload_len;
	int count = 1 + n->num_servers + dt__elastic_slots(n);
	int from = dt__conn_peer(c);

	if (m->hdr.cmd == DT_CMD_HEARTBEAT || m->hdr.cmd == DT_CMD_BYE) {
		dispatch(n, c, m);
		return;
	}
	if (from >= 0 && from < count)
		dt__ctr_recv(&n->ctr[from], bytes);
	dispatch(n, c, m);
	if (from < 0 && (from = dt__conn_peer(c)) >= 0 && from < count)
		dt__ctr_recv(&n->ctr[from], bytes);
}

static void
dispatch(dt_node *n, dt_conn *c, dt_msg *m)
{
	if ((m->hdr.flags & DT_F_LINK) && m->hdr.payload_len > 0) {
		uint64_t note = dt__conn_note(c);

		dt__conn_set_note(c, 0);
		if (note != 2 || !dt__link_commit(n, c))
			return; /* dropped by the links (or never judged) */
		m->hdr.flags &= (uint16_t)~DT_F_LINK;
		m->hdr.meta_len -= DT_LINK_BLOCK;
		m->meta += DT_LINK_BLOCK;
	} else if (m->hdr.flags & DT_F_LINK) {
		int v = dt__link_judge(n, c, &m->hdr, &m->meta, 0);

		if (v < 0) {
			dt__log(0, "dropping %s: %s", dt__conn_addr(c),
			        dt_errmsg());
			dt__van_close(n->van, c);
		}
		if (v <= 0)
			return;
	}
	if (!dt__cmd_is_control(m->hdr.cmd)) {
		const dt__node_app *app;
		dt__app_hooks hk = {0};

		if (refuse_stranger(n, c, m->hdr.cmd))
			return;
		if ((app = dt__node_app_of(n, m->hdr.cmd)) != NULL)
			hk = app->hooks;
		if (hk.on_msg)
			hk.on_msg(hk.arg, n, c, m);
		else
			dt__log(0, "no handler for %s from %s",
			        dt__cmd_name(m->hdr.cmd), dt__conn_addr(c));
		return;
	}
	if (n->role == DT_ROLE_SCHEDULER)
		dt__sched_on_msg(n, c, m);
	else
		dt__member_on_msg(n, c, m);
}

/* The member's side of a lost peer (see dt__node_peer_lost). */
static void
member_lost(dt_node *n, int peer, const char *addr, const char *why)
{
	char name[64];
	int joined;
	const char *auth = dt__env_str("DTRAIN_AUTH");

	pthread_mutex_lock(&n->mu);
	joined = n->have_table;
	pthread_mutex_unlock(&n->mu);
	if (peer == 0) {
		char tail[256] = "";

		if (why)
			snprintf(tail, sizeof(tail), " (%s)", why);
		if (!joined && auth && strcmp(auth, "none") == 0)
			snprintf(tail + strlen(tail),
			         sizeof(tail) - strlen(tail),
			         " before joining (this node runs with "
			         "DTRAIN_AUTH=none: does the job require "
			         "authentication?)");
		dt__node_set_fatal(n, DT_EPEER,
		                   "lost the connection to the scheduler at "
		                   "%s%s",
		                   addr, tail);
		return;
	}
	/* A worker that lost a server it talks to fails what waits on it. */
	char cause[DT_HOST_MAX + 128];

	dt__node_name(n, peer, name, sizeof(name));
	DT_LOG(1, "connection to %s closed%s%s", name, why ? ": " : "",
	       why ? why : "");
	if (dt__watch_root_silent(n, cause, sizeof(cause))) {
		/* The peer most likely left because the scheduler froze: say
		 * so, and end the job here too. */
		dt__node_set_fatal(n, DT_EPEER,
		                   "lost the connection to %s; the %s", name,
		                   cause);
		return;
	}
	/* A tree child's link closed while the job runs: the parent tells
	 * its own parent (the scheduler's ABORT follows, naming the child). */
	if (joined && dt__tree_child(n, peer) >= 0 &&
	    !dt__tree_child_done(n, peer) && dt__node_check(n) == DT_OK &&
	    dt__tree_report_lost(n, peer, DT_TREE_LOST_CLOSED, 0))
		dt__log(0, "cannot tell the tree parent that %s was lost: %s",
		        name, dt_errmsg());
	if (joined)
		dt__watch_parent_gone(n, peer);
	if (dt__watch_defer_loss(n, peer))
		return;
	dt__node_fail_apps(n, peer, DT_EPEER);
}

/*
 * A peer that said BYE before its connection closed finished its part of
 * the job: at the end of a job, nodes leave in whatever order the
 * scheduler's answers reach them, and one still waiting for its last
 * barrier sees the others go. That is no loss, even while the scheduler
 * is slow to speak (which member_lost would take for a frozen scheduler).
 * The apps are still told, so that nothing waits on that peer any more:
 * only a wait that could never have ended fails. Returns whether the
 * peer had said BYE.
 */
static int
peer_left(dt_node *n, int peer)
{
	char name[64];

	if (n->said_bye == NULL || peer <= 0 || peer >= n->ntable ||
	    !__atomic_load_n(&n->said_bye[peer], __ATOMIC_ACQUIRE))
		return 0;
	DT_LOG(1, "connection to %s closed: it has left the job",
	       dt__node_name(n, peer, name, sizeof(name)));
	dt__node_fail_apps(n, peer, DT_ECLOSED);
	return 1;
}

/* Without PS_RESEND's links (which say BYE themselves, in order with
 * everything they carry), a worker that is done says BYE to each peer it
 * is connected to, on that connection, after all it sent there: the peer
 * reads it before the close (peer_left). */
static void
say_bye(dt_node *n)
{
	dt_conn *few[64], **cs = few;
	int k;

	if (n->links || n->peers == NULL)
		return;
	/* (the peers it holds a connection to, found among the van's open
	 * ones: not a look at every node of the job) */
	k = dt__van_open_conns(n->van, few, (int)DT_ARRAY_LEN(few));
	if (k > (int)DT_ARRAY_LEN(few)) {
		dt_conn **all = malloc(sizeof(*all) * (size_t)k);

		/* (out of memory: BYE to the first ones only) */
		if (all == NULL)
			k = (int)DT_ARRAY_LEN(few);
		else
			cs = all,
			k = DT_MIN(k, dt__van_open_conns(n->van, all, k));
	}
	for (int i = 0; i < k; i++) {
		dt_msg_hdr h = {.cmd = DT_CMD_BYE};
		int id = dt__conn_peer(cs[i]);

		if (id > 0 && id < n->ntable && id != n->id &&
		    __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE) == cs[i])
			(void)dt__node_send(n, id, &h, NULL, 0, NULL, 0);
	}
	if (cs != few)
		free(cs);
}

/* A worker that finished tells the scheduler (WORKER_DONE), or over the
 * control tree its parent, once its subtree's workers are done too
 * (tree_end.c); then it leaves, saying BYE to its peers. */
static dt_err
worker_done(dt_node *n)
{
	dt_msg_hdr h = {.cmd = DT_CMD_WORKER_DONE, .flags = DT_F_REQUEST};
	int tree = __atomic_load_n(&n->tree, __ATOMIC_ACQUIRE) != NULL;
	dt_err err = DT_OK;

	if (tree)
		err = dt__tree_leave(n);
	else
		DT_LOG(1, "%s is done; telling the scheduler", dt__log_name());
	/* Leave quietly from here on: closing is expected. */
	pthread_mutex_lock(&n->mu);
	n->stopping = 1;
	pthread_mutex_unlock(&n->mu);
	if (!tree)
		err = dt__node_send(n, 0, &h, NULL, 0, NULL, 0);
	if (err == DT_OK || !tree)
		say_bye(n);
	return err;
}

void
dt__node_peer_lost(dt_node *n, int peer, const char *why)
{
	char addr[DT_HOST_MAX + 16];
	int quiet;

	if (n->role == DT_ROLE_SCHEDULER) {
		dt__sched_peer_lost(n, peer, why);
		return;
	}
	pthread_mutex_lock(&n->mu);
	quiet = n->terminated || n->stopping;
	pthread_mutex_unlock(&n->mu);
	if (quiet)
		return;
	snprintf(addr, sizeof(addr), "%s:%d", n->cfg.root_uri,
	         n->cfg.root_port);
	member_lost(n, peer, addr, why);
}

static void
hook_on_close(void *arg, dt_conn *c, dt_err why)
{
	dt_node *n = arg;
	int peer = dt__conn_peer(c);
	int quiet;

	if (n->role == DT_ROLE_SCHEDULER) {
		dt__sched_on_close(n, c, why);
		return;
	}
	if (peer < 0) {
		dt__reach_on_close(n, c); /* a dial refused, perhaps */
		dt__member_forget_hello(n, c);
		return;
	}
	pthread_mutex_lock(&n->mu);
	quiet = n->terminated || n->stopping;
	pthread_mutex_unlock(&n->mu);
	/* PS_RESEND: wait for a new connection rather than call it lost,
	 * also while this node stops (its last messages and BYE are still
	 * to be acknowledged). */
	if (dt__link_on_close(n, c, peer))
		return;
	if (peer > 0 && peer < n->ntable)
		__atomic_compare_exchange_n(&n->peers[peer], &(dt_conn *){c},
		                            NULL, 0, __ATOMIC_ACQ_REL,
		                            __ATOMIC_ACQUIRE);
	if (quiet || peer_left(n, peer))
		return;
	member_lost(n, peer, dt__conn_addr(c), NULL);
}

/* Stop the I/O thread, then free everything the node owns. */
static void
node_free(dt_node *n)
{
	int failed;

	pthread_mutex_lock(&n->mu);
	failed = n->fatal != DT_OK;
	n->stopping = 1;
	pthread_mutex_unlock(&n->mu);
	if (n->role == DT_ROLE_SCHEDULER && failed)
		dt__sched_tree_linger(n);
	/* PS_RESEND: what this node sent reaches its peers before it goes. */
	if (!failed)
		dt__link_finish(n, dt__now_ns() + 10 * n->rs_timeout_ns +
		                       2000000000ull);
	dt__watch_stop(n);
	if (n->van)
		dt__van_stop_dials(n->van); /* a redial in flight ends now */
	dt__link_stop(n);
	dt__van_destroy(n->van); /* no I/O thread from here on */
	if (n->role == DT_ROLE_SCHEDULER) {
		char why[600];

		snprintf(why, sizeof(why), "job failed: %s", n->fatal_msg);
		dt__report_sched_finish(n, failed ? why : NULL);
	}
	dt__report_member_end(n);
	dt__tree_report_free(n);
	dt__watch_free(n);
	dt__link_destroy(n);
	dt__reach_free(n);
	dt__apps_stop(n);
	dt__sched_free(n);
	dt__elastic_free(n);
	dt__free_sparse(n->table);
	free(n->early);
	free(n->tree);
	dt__free_sparse(n->peers);
	dt__free_sparse(n->said_bye);
	free(n->hosts_v);
	dt__free_sparse(n->ctr);
	pthread_mutex_destroy(&n->mu);
	pthread_cond_destroy(&n->cv);
	free(n);
}

/* The limits a node lives by, from the environment: how long a call may
 * wait, how long a connection may take to say who it is, and how many
 * may be waiting to say so at once, sized to the job: every node joins
 * the scheduler at once when a job starts, and a worker's peers may all
 * dial it at once. */
static dt_err
node_limits(dt_node *n)
{
	long secs, pending, wait;
	long nodes = 1 + (long)n->cfg.num_servers + n->cfg.num_workers;
	dt_err err;

	if ((err =
	         dt__env_long("DT_WAIT_TIMEOUT", 3600, 1, 30L * 86400, &wait)))
		return err;
	n->wait_ns = (uint64_t)wait * 1000000000ull;
	if ((err = dt__env_long("DT_HANDSHAKE_TIMEOUT", 10, 1, 86400, &secs)) ||
	    (err = dt__env_long("DT_MAX_PENDING_CONNS",
	                        DT_MAX(256, DT_MIN(nodes, 65536)), 1, 65536,
	                        &pending)))
		return err;
	dt__van_guard(n->van, (uint64_t)secs * 1000000000ull, (int)pending);
	if ((err = dt__watch_config(&n->hb_interval_ns, &n->hb_timeout_ns)) ||
	    (err = dt__watch_stats_config(&n->stats_interval_ns)) ||
	    (err = dt__link_config(n)) || (err = dt__elastic_config(n)))
		return err;
	/* Counters by node id, sized once the job's bound on workers is
	 * known (an elastic job's rows for those that may join). */
	n->ctr = dt__calloc_sparse(1 + (size_t)n->cfg.num_servers +
	                               (size_t)dt__elastic_slots(n),
	                           sizeof(*n->ctr));
	return n->ctr ? DT_OK : DT_ENOMEM;
}

/* The scheduler: listen where the job's nodes reach it, and serve. */
static dt_err
start_scheduler(dt_node *n)
{
	const dt_node_config *cfg = &n->cfg;
	/* (a Service's name is not this pod's to bind: listen_host) */
	const char *bind =
	    cfg->listen_host[0] ? cfg->listen_host : cfg->root_uri;
	dt_err err;

	snprintf(n->host, sizeof(n->host), "%s", cfg->root_uri);
	err = dt__van_listen(n->van, bind, cfg->root_port, cfg->listen_fd,
	                     &n->port);
	if (err == DT_ESYS && cfg->listen_fd < 0 &&
	    strstr(dt_errmsg(), "assign requested address")) {
		/* (dt__fail formats before it records) */
		dt__fail(err,
		         "%s (DMLC_PS_ROOT_URI names another machine's "
		         "address, as a Kubernetes Service does: set "
		         "DMLC_USE_KUBERNETES=1 or DTRAIN_SCHEDULER_BIND "
		         "to listen on this one's)",
		         dt_errmsg());
	}
	if (err)
		return err;
	if ((err = dt__sched_create(n)) || (err = dt__report_sched_open(n)) ||
	    (err = dt__van_start(n->van)) || (err = dt__watch_start(n)))
		return err;
	DT_LOG(1,
	       "scheduler listening on %s:%d%s%s%s for %d servers and "
	       "%d workers",
	       bind, n->port, bind != cfg->root_uri ? " (reached as " : "",
	       bind != cfg->root_uri ? cfg->root_uri : "",
	       bind != cfg->root_uri ? ")" : "", cfg->num_servers,
	       cfg->num_workers);
	if (cfg->root_port == 0 && cfg->listen_fd < 0)
		dt__log(0,
		        "DMLC_PS_ROOT_PORT=0: listening on port %d; "
		        "start the other nodes with "
		        "DMLC_PS_ROOT_PORT=%d",
		        n->port, n->port);
	return dt__sched_start(n);
}

/* A server or a worker: listen at the address its peers can reach (and
 * for same-host peers over shared memory), then join the scheduler. */
static dt_err
start_member(dt_node *n)
{
	const dt_node_config *cfg = &n->cfg;
	const char *host_hint;
	dt_err err;

	if ((err = dt__report_member_begin(n)))
		return err;
	host_hint = cfg->node_host[0] ? cfg->node_host : NULL;
	if (!host_hint && !cfg->interface[0] &&
	    (strcmp(cfg->root_uri, "127.0.0.1") == 0 ||
	     strcmp(cfg->root_uri, "localhost") == 0))
		host_hint = "127.0.0.1"; /* a single-host job */
	if ((err = dt__net_local_addr(host_hint, cfg->interface, n->host,
	                              sizeof(n->host))) ||
	    (err = dt__van_listen(n->van, n->host, cfg->port, -1, &n->port)))
		return err;
	/* Peers on this host: shared memory (DTRAIN_TRANSPORT). */
	dt__host_id(n->hostid, sizeof(n->hostid));
	if (n->hostid[0] &&
	    dt__van_listen_local(n->van, n->local, sizeof(n->local))) {
		dt__log(0, "no shared memory with peers on this host: %s",
		        dt_errmsg());
		n->local[0] = '\0';
	}
	if ((err = dt__van_start(n->van)) || (err = dt__watch_start(n)))
		return err;
	DT_LOG(1, "%s listening on %s:%d", dt_role_name(n->role), n->host,
	       n->port);
	if ((err = dt__member_start(n)))
		return err;
	dt__trace_span(DT_EV_BOOTSTRAP, DT_TID_MAIN, n->start_ns, 0, 0, 0, 0);
	return dt__report_clock_sync(n);
}

dt_err
dt_node_start(const dt_node_config *cfg, dt_node **out)
{
	dt_van_hooks hooks = {0};
	dt_node *n;
	dt_err err;

	if (out == NULL || cfg == NULL)
		return dt__fail(DT_EINVAL, "dt_node_start: %s is NULL",
		                out ? "cfg" : "out");
	*out = NULL;
	if (cfg->num_workers < 1)
		return dt__fail(DT_ECONFIG,
		                "DMLC_NUM_WORKER must be at least 1");
	/* A descriptor per peer, and a few more: raise the soft limit toward
	 * the hard one when the job needs more than it allows (as servers
	 * do). */
	(void)dt__nofile_raise(
	    2ul * (unsigned long)(cfg->num_servers + cfg->num_workers) + 256,
	    NULL);
	n = dt__calloc(1, sizeof(*n));
	if (n == NULL)
		return DT_ENOMEM;
	n->cfg = *cfg;
	n->role = cfg->role;
	n->id = cfg->role == DT_ROLE_SCHEDULER ? 0 : -1;
	n->rank = cfg->role == DT_ROLE_SCHEDULER ? 0 : -1;
	n->num_servers = cfg->num_servers;
	n->num_workers = cfg->num_workers;
	pthread_mutex_init(&n->mu, NULL);
	pthread_cond_init(&n->cv, NULL);
	n->start_ns = dt__now_ns();
	if (cfg->verbose > dt__verbose)
		dt__verbose = cfg->verbose;
	dt__log_set_name(cfg->role == DT_ROLE_SCHEDULER
	                     ? "scheduler"
	                     : dt_role_name(cfg->role));

	hooks.arg = n;
	hooks.on_msg = hook_on_msg;
	hooks.payload_dest = hook_payload_dest;
	hooks.payload_chunk = hook_payload_chunk;
	hooks.on_close = hook_on_close;
	if ((err = dt__van_create(&hooks, &n->van)) || (err = node_limits(n)) ||
	    (err = cfg->role == DT_ROLE_SCHEDULER ? start_scheduler(n)
	                                          : start_member(n)))
		goto fail;
	*out = n;
	return DT_OK;
fail : {
	dt__err_kept k;

	dt__err_keep(&k, err);
	node_free(n);
	return dt__err_restore(&k);
}
}

dt_err
dt_node_serve(dt_node *n)
{
	dt_err err;

	if (n == NULL)
		return dt__fail(DT_EINVAL, "dt_node_serve: node is NULL");
	if (n->role == DT_ROLE_SCHEDULER)
		return dt__sched_serve(n);
	if (n->role != DT_ROLE_SERVER)
		return dt__fail(DT_ESTATE, "dt_node_serve: a worker does not "
		                           "serve");
	err = dt__node_wait_count(n, &n->terminated, 0, 1, 0,
	                          "the end of the job");
	if (err == DT_OK)
		DT_LOG(1, "%s: job over", dt__log_name());
	return err;
}

dt_err
dt_node_stop(dt_node *n)
{
	dt_err err;

	if (n == NULL)
		return DT_OK;
	err = n->role == DT_ROLE_SCHEDULER ? DT_OK : dt__node_check(n);
	/* (peers[0] is NULL before the table, with PS_RESEND while the
	 * scheduler's connection is being dialled again, and over the tree
	 * while it is closed idle: root.c) */
	/* The end-of-job report (DTRAIN_STATS, DTRAIN_TIMELINE), before a
	 * worker says it is done or a terminated server leaves. */
	pthread_mutex_lock(&n->mu);
	int terminated = n->terminated;
	pthread_mutex_unlock(&n->mu);
	if (n->role != DT_ROLE_SCHEDULER && n->peers && err == DT_OK &&
	    (n->links || n->root_park ||
	     __atomic_load_n(&n->peers[0], __ATOMIC_ACQUIRE)) &&
	    (n->role == DT_ROLE_WORKER || terminated) &&
	    dt__report_member_send(n))
		dt__log(0, "the end-of-job report was not sent: %s",
		        dt_errmsg());
	char lost[sizeof(n->lost_server)];

	/* (without links, a server's connection gone at the end is one lost
	 * too, whichever thread saw it first) */
	if (n->role == DT_ROLE_WORKER && n->peers && n->table && !n->links)
		for (int id = 1; id <= n->num_servers && id < n->ntable; id++)
			if (dt__id_role(n, id) == DT_ROLE_SERVER &&
			    !__atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE))
				dt__node_note_lost_server(n, id);
	pthread_mutex_lock(&n->mu);
	memcpy(lost, n->lost_server, sizeof(lost));
	pthread_mutex_unlock(&n->mu);
	if (n->role == DT_ROLE_WORKER && err == DT_OK && lost[0]) {
		/* Its connection to the scheduler closes without a word: the
		 * scheduler ends the job (or, with recovery, waits for a new
		 * worker in its place) instead of the others waiting for
		 * pushes this worker will never send. */
		dt__log(0,
		        "%s stops after losing %s: not telling the "
		        "scheduler it is done",
		        dt__log_name(), lost);
	} else if (n->role == DT_ROLE_WORKER && n->peers &&
	           (n->links || n->root_park ||
	            __atomic_load_n(&n->peers[0], __ATOMIC_ACQUIRE)) &&
	           err == DT_OK) {
		err = worker_done(n);
	}
	node_free(n);
	return err;
}

dt_err
dt__node_join_env(dt_node **out, int *served)
{
	dt_node_config cfg;
	dt_node *n;
	dt_err err;

	*out = NULL;
	*served = 0;
	if (dt__env_str("DMLC_ROLE") == NULL &&
	    dt__env_str("DMLC_PS_ROOT_URI") == NULL)
		return DT_OK; /* a single process */
	if ((err = dt_node_config_from_env(&cfg, 1)))
		return err;
	if ((err = dt_node_start(&cfg, &n)))
		return err;
	if (cfg.role == DT_ROLE_WORKER) {
		*out = n;
		return DT_OK;
	}
	/* MXNet: a scheduler or server process serves its role to the end. */
	*served = 1;
	err = dt_node_serve(n);
	if (err) {
		dt__err_kept k;

		dt__fail(err, "%s: %s", dt_role_name(cfg.role), dt_errmsg());
		dt__err_keep(&k, err);
		dt_node_stop(n);
		return dt__err_restore(&k);
	}
	return dt_node_stop(n);
}

void
dt__exit_served(dt_err err)
{
	if (err)
		fprintf(stderr, "dtrain %s\n", dt_errmsg());
	fflush(NULL);
	if (err)
		_exit(1);
	exit(0);
}

dt_err
dt_node_init_from_env(dt_node **out)
{
	int served;
	dt_err err;

	if (out == NULL)
		return dt__fail(DT_EINVAL,
		                "dt_node_init_from_env: out is NULL");
	err = dt__node_join_env(out, &served);

	/* The MXNet contract: a server or scheduler process ends here. */
	if (served)
		dt__exit_served(err);
	return err;
}
