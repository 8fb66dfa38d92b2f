/*
 * node.c - joining a dtrain cluster as a server or worker, and the calls
 * every role shares: configuration from DMLC_* variables, barriers, the
 * orderly end, and the MXNet rule that a process started as a server or
 * scheduler serves that role and exits.
 *
 * Start-up of a member (docs/cluster.md has the whole protocol):
 *   1. listen on the advertised address, start the I/O thread;
 *   2. connect to the scheduler (retrying until DT_CONNECT_TIMEOUT) and
 *      send ADD_NODE with role, address and any rank request;
 *   3. receive NODE_TABLE: our id and rank, everyone's address;
 *   4. connect to the peers we talk to (a worker: every server and every
 *      worker of lower rank), each answered by HELLO_ACK;
 *   5. pass the start-up barrier over all nodes.
 * The scheduler's side of this is in scheduler.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/node_impl.h"

const char *
dt_role_name(dt_role role)
{
	switch (role) {
	case DT_ROLE_SCHEDULER:
		return "scheduler";
	case DT_ROLE_SERVER:
		return "server";
	case DT_ROLE_WORKER:
		return "worker";
	}
	return "?";
}

static int
role_group(dt_role r)
{
	return r == DT_ROLE_SCHEDULER ? DT_GROUP_SCHEDULER
	       : r == DT_ROLE_SERVER  ? DT_GROUP_SERVERS
	                              : DT_GROUP_WORKERS;
}

dt_err
dt_node_config_from_env(dt_node_config *cfg, int role_required)
{
	const char *role = dt__env_str("DMLC_ROLE");
	const char *s;
	long v;
	dt_err err;

	memset(cfg, 0, sizeof(*cfg));
	cfg->requested_rank = -1;
	cfg->listen_fd = -1;
	if (role == NULL) {
		if (role_required)
			return dt__fail(DT_ECONFIG,
			                "DMLC_ROLE is not set (scheduler, "
			                "server or worker)");
		cfg->role = DT_ROLE_WORKER;
	} else if (strcmp(role, "scheduler") == 0) {
		cfg->role = DT_ROLE_SCHEDULER;
	} else if (strcmp(role, "server") == 0) {
		cfg->role = DT_ROLE_SERVER;
	} else if (strcmp(role, "worker") == 0) {
		cfg->role = DT_ROLE_WORKER;
	} else {
		return dt__fail(DT_ECONFIG,
		                "DMLC_ROLE='%s': expected scheduler, server "
		                "or worker",
		                role);
	}
	s = dt__env_str("DMLC_PS_ROOT_URI");
	if (s == NULL)
		return dt__fail(DT_ECONFIG,
		                "DMLC_PS_ROOT_URI is not set (the scheduler's "
		                "address)");
	if (strlen(s) >= sizeof(cfg->root_uri))
		return dt__fail(DT_ECONFIG, "DMLC_PS_ROOT_URI is too long");
	strcpy(cfg->root_uri, s);
	if (dt__env_str("DMLC_PS_ROOT_PORT") == NULL)
		return dt__fail(DT_ECONFIG, "DMLC_PS_ROOT_PORT is not set (the "
		                            "scheduler's port)");
	if ((err = dt__env_long("DMLC_PS_ROOT_PORT", 0, 0, 65535, &v)))
		return err;
	cfg->root_port = (int)v;
	if (dt__env_str("DMLC_NUM_SERVER") == NULL)
		return dt__fail(DT_ECONFIG, "DMLC_NUM_SERVER is not set");
	if ((err = dt__env_long("DMLC_NUM_SERVER", 0, 0, 2048, &v)))
		return err;
	cfg->num_servers = (int)v;
	if (dt__env_str("DMLC_NUM_WORKER") == NULL)
		return dt__fail(DT_ECONFIG, "DMLC_NUM_WORKER is not set");
	if ((err = dt__env_long("DMLC_NUM_WORKER", 0, 1, 2048, &v)))
		return err;
	cfg->num_workers = (int)v;
	s = dt__env_str("DMLC_INTERFACE");
	if (s && strlen(s) >= sizeof(cfg->interface))
		return dt__fail(DT_ECONFIG, "DMLC_INTERFACE is too long");
	if (s)
		strcpy(cfg->interface, s);
	s = dt__env_str("DMLC_NODE_HOST");
	if (s && strlen(s) >= sizeof(cfg->node_host))
		return dt__fail(DT_ECONFIG, "DMLC_NODE_HOST is too long");
	if (s)
		strcpy(cfg->node_host, s);
	if ((err = dt__env_long("DMLC_PORT", 0, 0, 65535, &v)))
		return err;
	cfg->port = (int)v;
	if ((err = dt__env_long("PS_VERBOSE", 0, 0, 2, &v)))
		return err;
	cfg->verbose = (int)v;
	if ((err = dt__env_long("DT_CONNECT_TIMEOUT", 60, 1, 86400, &v)))
		return err;
	cfg->connect_timeout_ms = (int)v * 1000;
	if ((err = dt__env_long("DT_LISTEN_FD", -1, -1, 65535, &v)))
		return err;
	cfg->listen_fd = (int)v;

	/* A rank wish: set by dtrain launch, or by mpirun / srun. */
	const char *rank_var =
	    cfg->role == DT_ROLE_SERVER ? "DMLC_SERVER_ID" : "DMLC_WORKER_ID";
	const char *const sources[] = {rank_var, "OMPI_COMM_WORLD_RANK",
	                               "PMIX_RANK", "SLURM_PROCID"};
	if (cfg->role != DT_ROLE_SCHEDULER) {
		for (size_t i = 0; i < DT_ARRAY_LEN(sources); i++) {
			if (dt__env_str(sources[i]) == NULL)
				continue;
			if ((err = dt__env_long(sources[i], -1, 0, 4095, &v)))
				return err;
			cfg->requested_rank = (int)v;
			break;
		}
	}
	return DT_OK;
}

const char *
dt__node_name(const dt_node *n, int id, char *buf, size_t cap)
{
	if (id == 0)
		snprintf(buf, cap, "scheduler");
	else if (n->table && id > 0 && id < n->ntable)
		snprintf(buf, cap, "%s %d", dt_role_name(n->table[id].role),
		         n->table[id].rank);
	else
		snprintf(buf, cap, "node %d", id);
	return buf;
}

void
dt__node_set_fatal(dt_node *n, dt_err err, const char *fmt, ...)
{
	va_list ap;
	int first;

	pthread_mutex_lock(&n->mu);
	first = n->fatal == DT_OK;
	if (first) {
		n->fatal = err;
		va_start(ap, fmt);
		vsnprintf(n->fatal_msg, sizeof(n->fatal_msg), fmt, ap);
		va_end(ap);
	}
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
	if (!first)
		return;
	dt__log(0, "%s", n->fatal_msg);
	dt__node_fail_apps(n, -1, err);
}

dt_err
dt__node_check(dt_node *n)
{
	dt_err err;

	pthread_mutex_lock(&n->mu);
	err = n->fatal;
	if (err)
		dt__fail(err, "%s", n->fatal_msg);
	pthread_mutex_unlock(&n->mu);
	return err;
}

dt_err
dt__node_fatal(dt_node *n, char *msg, size_t cap)
{
	dt_err err;

	pthread_mutex_lock(&n->mu);
	err = n->fatal;
	snprintf(msg, cap, "%s", n->fatal_msg);
	pthread_mutex_unlock(&n->mu);
	return err;
}

int
dt__node_id(const dt_node *n)
{
	return n->id;
}

const dt_node_entry *
dt__node_entry(const dt_node *n, int id)
{
	if (n->table == NULL || id < 0 || id >= n->ntable)
		return NULL;
	return &n->table[id];
}

int
dt__node_server_id(const dt_node *n, int rank)
{
	(void)n;
	return 1 + rank;
}

int
dt__node_worker_id(const dt_node *n, int rank)
{
	return 1 + n->num_servers + rank;
}

void
dt__node_close(dt_node *n, dt_conn *c)
{
	dt__van_close(n->van, c);
}

void
dt__node_close_peer(dt_node *n, int id)
{
	dt_conn *c;

	if (id < 0 || id >= n->ntable || n->peers == NULL)
		return;
	if ((c = __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE)) != NULL)
		dt__van_close(n->van, c);
}

void
dt__node_cork(dt_node *n)
{
	dt__van_cork(n->van);
}

dt_err
dt__node_uncork(dt_node *n)
{
	return dt__van_uncork(n->van);
}

void
dt__node_wait_gen(dt_node *n, dt_gen *g, pthread_mutex_t *mu,
                  pthread_cond_t *cv, uint64_t until_ns)
{
	dt__van_wait(n ? n->van : NULL, g, mu, cv, until_ns);
}

dt_err
dt__node_send(dt_node *n, int id, dt_msg_hdr *h, const void *meta,
              uint32_t meta_len, const struct iovec *iov, int iovcnt)
{
	char name[64];
	dt_conn *c;

	if (id < 0 || id >= n->ntable ||
	    (c = __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE)) == NULL)
		return dt__fail(DT_ESTATE, "no connection to %s",
		                dt__node_name(n, id, name, sizeof(name)));
	h->sender = (uint32_t)n->id;
	h->recver = (uint32_t)id;
	return dt__van_send(n->van, c, h, meta, meta_len, iov, iovcnt);
}

static void *
hook_payload_dest(void *arg, dt_conn *c, const dt_msg_hdr *h,
                  const uint8_t *meta)
{
	dt_node *n = arg;
	const dt__node_app *app;
	dt__app_hooks hk;

	/* Control messages carry their data in the metadata, never in a
	 * payload; nobody but a peer that said HELLO may send an app's; and
	 * an app that is not attached takes none. Read such a payload away
	 * rather than let a stranger's header make this node allocate up to
	 * DT_MAX_MESSAGE (on_msg then drops the message). */
	if (dt__cmd_is_control(h->cmd) || dt__conn_peer(c) < 0 ||
	    (app = dt__node_app_of(n, h->cmd)) == NULL)
		return DT_VAN_DISCARD;
	hk = app->hooks;
	if (hk.payload_dest)
		return hk.payload_dest(hk.arg, n, c, h, meta);
	return NULL;
}

static void
hook_payload_chunk(void *arg, dt_conn *c, const dt_msg_hdr *h, const void *data,
                   uint64_t off, size_t len)
{
	dt_node *n = arg;
	const dt__node_app *app = dt__node_app_of(n, h->cmd);
	dt__app_hooks hk;

	if (app == NULL)
		return;
	hk = app->hooks;
	if (hk.payload_chunk)
		hk.payload_chunk(hk.arg, n, c, h, data, off, len);
}

/* The waiting calls' spin (common/spin.h) suits a machine with a processor
 * for each busy process of the job; count ours on this host. */
static void
fit_spin(dt_node *n)
{
	int here = 0;

	for (int id = 1; id < n->ntable; id++)
		if (strcmp(n->table[id].host, n->host) == 0)
			here++;
	if (dt__spin_fit(here))
		DT_LOG(1,
		       "%d servers and workers on this host for %ld "
		       "processors: waiting calls sleep at once (set "
		       "DT_SPIN_US to choose)",
		       here, sysconf(_SC_NPROCESSORS_ONLN));
}

/* Member side: the NODE_TABLE message. */
static dt_err
parse_table(dt_node *n, const dt_msg *m)
{
	int id, ns, nw, count;
	dt_node_entry *t;
	dt_err err;

	if ((err = dt__msg_node_table_decode(m->meta, m->hdr.meta_len, &id,
	                                     &ns, &nw, &t)))
		return err;
	if (ns != n->cfg.num_servers || nw != n->cfg.num_workers) {
		free(t);
		return dt__fail(DT_ECONFIG,
		                "the scheduler runs a job of %d servers and %d "
		                "workers, but this node was started with "
		                "DMLC_NUM_SERVER=%d DMLC_NUM_WORKER=%d",
		                ns, nw, n->cfg.num_servers, n->cfg.num_workers);
	}
	count = 1 + ns + nw;
	if (t[id].role != n->role) {
		free(t);
		return dt__fail(DT_EPROTO,
		                "NODE_TABLE gives this %s the "
		                "role of another",
		                dt_role_name(n->role));
	}
	n->peers = dt__calloc(count, sizeof(dt_conn *));
	if (n->peers == NULL) {
		free(t);
		return DT_ENOMEM;
	}
	pthread_mutex_lock(&n->mu);
	n->table = t;
	n->ntable = count;
	n->num_servers = ns;
	n->num_workers = nw;
	n->id = id;
	n->rank = t[id].rank;
	pthread_mutex_unlock(&n->mu);
	return DT_OK;
}

static void
member_on_msg(dt_node *n, dt_conn *c, dt_msg *m)
{
	char name[64];
	dt_err err;

	switch (m->hdr.cmd) {
	case DT_CMD_NODE_TABLE:
		if (n->have_table || dt__conn_peer(c) != 0) {
			dt__van_close(n->van, c);
			return;
		}
		if ((err = parse_table(n, m)) != DT_OK) {
			dt__node_set_fatal(n, DT_EPROTO,
			                   "cannot join the cluster: %s",
			                   dt_errmsg());
			return;
		}
		__atomic_store_n(&n->peers[0], c, __ATOMIC_RELEASE);
		pthread_mutex_lock(&n->mu);
		n->have_table = 1;
		pthread_cond_broadcast(&n->cv);
		pthread_mutex_unlock(&n->mu);
		return;
	case DT_CMD_HELLO: {
		uint32_t id = m->hdr.sender;

		if (!n->have_table || id == 0 || (int)id >= n->ntable ||
		    dt__conn_peer(c) != -1) {
			dt__log(0, "dropping %s: unexpected HELLO from node %u",
			        dt__conn_addr(c), id);
			dt__van_close(n->van, c);
			return;
		}
		dt__conn_set_peer(c, (int)id);
		__atomic_store_n(&n->peers[id], c, __ATOMIC_RELEASE);
		DT_LOG(1, "%s connected from %s",
		       dt__node_name(n, (int)id, name, sizeof(name)),
		       dt__conn_addr(c));
		dt_msg_hdr h = {.cmd = DT_CMD_HELLO_ACK,
		                .flags = DT_F_RESPONSE};
		dt__node_send(n, (int)id, &h, NULL, 0, NULL, 0);
		return;
	}
	case DT_CMD_HELLO_ACK:
		pthread_mutex_lock(&n->mu);
		n->hello_acks++;
		pthread_cond_broadcast(&n->cv);
		pthread_mutex_unlock(&n->mu);
		return;
	case DT_CMD_BARRIER_DONE:
		if (m->hdr.arg0 < 1 || m->hdr.arg0 > 7 || dt__conn_peer(c) != 0)
			return;
		pthread_mutex_lock(&n->mu);
		n->barrier_done[m->hdr.arg0]++;
		pthread_cond_broadcast(&n->cv);
		pthread_mutex_unlock(&n->mu);
		return;
	case DT_CMD_TERMINATE:
		if (dt__conn_peer(c) != 0)
			return;
		DT_LOG(1, "the scheduler ends the job");
		pthread_mutex_lock(&n->mu);
		n->terminated = 1;
		pthread_cond_broadcast(&n->cv);
		pthread_mutex_unlock(&n->mu);
		return;
	case DT_CMD_ABORT:
		if (dt__conn_peer(c) != 0)
			return;
		dt__node_set_fatal(n, DT_EPEER,
		                   "job aborted by the scheduler: %s",
		                   m->meta ? (const char *)m->meta : "?");
		return;
	case DT_CMD_TEXT:
		dt__log(
		    0, "message from %s: %s",
		    dt__node_name(n, (int)m->hdr.sender, name, sizeof(name)),
		    m->meta ? (const char *)m->meta : "");
		return;
	default:
		dt__log(0, "ignoring %s from %s", dt__cmd_name(m->hdr.cmd),
		        dt__conn_addr(c));
	}
}

static void
hook_on_msg(void *arg, dt_conn *c, dt_msg *m)
{
	dt_node *n = arg;

	if (!dt__cmd_is_control(m->hdr.cmd)) {
		const dt__node_app *app;
		dt__app_hooks hk = {0};

		/* Only a peer that said HELLO (or the scheduler) may talk. */
		if (dt__conn_peer(c) < 0) {
			dt__log(0, "dropping %s: %s before HELLO",
			        dt__conn_addr(c), dt__cmd_name(m->hdr.cmd));
			dt__van_close(n->van, c);
			return;
		}
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
		member_on_msg(n, c, m);
}

static void
hook_on_close(void *arg, dt_conn *c, dt_err why)
{
	dt_node *n = arg;
	int peer = dt__conn_peer(c);
	char name[64];
	int quiet;

	if (n->role == DT_ROLE_SCHEDULER) {
		dt__sched_on_close(n, c, why);
		return;
	}
	if (peer < 0)
		return;
	if (peer > 0 && peer < n->ntable)
		__atomic_compare_exchange_n(&n->peers[peer], &(dt_conn *){c},
		                            NULL, 0, __ATOMIC_ACQ_REL,
		                            __ATOMIC_ACQUIRE);
	pthread_mutex_lock(&n->mu);
	quiet = n->terminated || n->stopping;
	pthread_mutex_unlock(&n->mu);
	if (peer == 0 && !quiet) {
		dt__node_set_fatal(n, DT_EPEER,
		                   "lost the connection to the scheduler at "
		                   "%s",
		                   dt__conn_addr(c));
		return;
	}
	/* A worker that lost a server it talks to fails what waits on it. */
	if (peer > 0 && !quiet) {
		dt__node_name(n, peer, name, sizeof(name));
		DT_LOG(1, "connection to %s closed", name);
		dt__node_fail_apps(n, peer, DT_EPEER);
	}
}

dt_err
dt__node_wait(dt_node *n, int (*done)(dt_node *, const void *), const void *arg,
              uint64_t deadline_ns, const char *what)
{
	dt_err err = DT_OK;

	pthread_mutex_lock(&n->mu);
	while (!done(n, arg)) {
		if (n->fatal) {
			err = dt__fail(n->fatal, "%s", n->fatal_msg);
			break;
		}
		if (deadline_ns && dt__now_ns() >= deadline_ns) {
			err = dt__fail(DT_ETIMEDOUT, "timed out waiting for %s",
			               what);
			break;
		}
		/* Wake at least every 100 ms to check the deadline. */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&n->cv, &n->mu, &ts);
	}
	pthread_mutex_unlock(&n->mu);
	return err;
}

typedef struct count_goal {
	const void *flag;
	int is64;
	uint64_t want;
} count_goal;

static int
count_reached(dt_node *n, const void *arg)
{
	const count_goal *g = arg;
	uint64_t v = g->is64 ? *(const uint64_t *)g->flag
	                     : (uint64_t) * (const int *)g->flag;

	(void)n;
	return v >= g->want;
}

/* Wait until *flag (an int, or a uint64_t if is64) reaches want. */
static dt_err
wait_count(dt_node *n, const void *flag, int is64, uint64_t want,
           uint64_t deadline_ns, const char *what)
{
	count_goal g = {flag, is64, want};

	return dt__node_wait(n, count_reached, &g, deadline_ns, what);
}

dt_err
dt_node_barrier(dt_node *n, int groups)
{
	uint64_t want;
	dt_err err;

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
	pthread_mutex_lock(&n->mu);
	want = ++n->barrier_sent[groups];
	pthread_mutex_unlock(&n->mu);
	dt_msg_hdr h = {.cmd = DT_CMD_BARRIER,
	                .flags = DT_F_REQUEST,
	                .arg0 = (uint64_t)groups};
	if ((err = dt__node_send(n, 0, &h, NULL, 0, NULL, 0)))
		return err;
	err = wait_count(n, &n->barrier_done[groups], 1, want, 0, "a barrier");
	if (err == DT_OK)
		DT_LOG(1, "passed barrier #%llu over group mask %d",
		       (unsigned long long)want, groups);
	return err;
}

static dt_err
member_start(dt_node *n)
{
	uint64_t deadline;
	dt_conn *sc;
	dt_wbuf w;
	dt_err err;
	char name[64];
	int need = 0;

	err = dt__van_connect(n->van, n->cfg.root_uri, n->cfg.root_port,
	                      n->cfg.connect_timeout_ms, "scheduler", &sc);
	if (err)
		return dt__fail(err,
		                "%s (DMLC_PS_ROOT_URI=%s DMLC_PS_ROOT_PORT=%d; "
		                "raise DT_CONNECT_TIMEOUT to wait longer)",
		                dt_errmsg(), n->cfg.root_uri, n->cfg.root_port);
	dt__conn_set_peer(sc, 0);
	DT_LOG(1, "connected to the scheduler at %s:%d", n->cfg.root_uri,
	       n->cfg.root_port);

	dt__msg_add_node a = {.role = n->role,
	                      .want = n->cfg.requested_rank,
	                      .port = n->port,
	                      .pid = (int)getpid(),
	                      .num_servers = n->cfg.num_servers,
	                      .num_workers = n->cfg.num_workers};
	snprintf(a.host, sizeof(a.host), "%s", n->host);
	dt__wbuf_init(&w);
	dt_msg_hdr h = {.cmd = DT_CMD_ADD_NODE, .flags = DT_F_REQUEST};
	h.recver = 0;
	err = dt__msg_add_node_encode(&a, &w);
	if (!err)
		err = dt__van_send(n->van, sc, &h, w.data, (uint32_t)w.len,
		                   NULL, 0);
	dt__wbuf_fini(&w);
	if (err)
		return err;
	DT_LOG(1, "asked the scheduler to add this %s at %s:%d",
	       dt_role_name(n->role), n->host, n->port);

	if ((err = wait_count(n, &n->have_table, 0, 1, 0, "the node table")))
		return err;
	snprintf(name, sizeof(name), "%s %d", dt_role_name(n->role), n->rank);
	dt__log_set_name(name);
	fit_spin(n);
	DT_LOG(1,
	       "joined the cluster as %s (node id %d) of %d servers and %d "
	       "workers",
	       name, n->id, n->num_servers, n->num_workers);

	/* Connect to the peers this node talks to. */
	deadline =
	    dt__now_ns() + (uint64_t)n->cfg.connect_timeout_ms * 1000000ull;
	if (n->role == DT_ROLE_WORKER) {
		for (int id = 1; id < n->id; id++) {
			dt_node_entry *e = &n->table[id];
			dt_conn *c;

			err = dt__van_connect(
			    n->van, e->host, e->port, n->cfg.connect_timeout_ms,
			    dt__node_name(n, id, name, sizeof(name)), &c);
			if (err)
				return err;
			dt__conn_set_peer(c, id);
			__atomic_store_n(&n->peers[id], c, __ATOMIC_RELEASE);
			dt_msg_hdr hh = {.cmd = DT_CMD_HELLO,
			                 .flags = DT_F_REQUEST};
			if ((err = dt__node_send(n, id, &hh, NULL, 0, NULL, 0)))
				return err;
			need++;
			DT_LOG(1, "connected to %s at %s:%d", name, e->host,
			       e->port);
		}
	}
	if ((err = wait_count(n, &n->hello_acks, 0, (uint64_t)need, deadline,
	                      "peers to answer HELLO")))
		return err;
	if ((err = dt__apps_start(n)))
		return err;
	DT_LOG(1, "%s is connected to its peers", dt__log_name());
	if ((err = dt_node_barrier(n, DT_GROUP_ALL)))
		return err;
	DT_LOG(1, "%s is ready", dt__log_name());
	return DT_OK;
}

/* Stop the I/O thread, then free everything the node owns. */
static void
node_free(dt_node *n)
{
	pthread_mutex_lock(&n->mu);
	n->stopping = 1;
	pthread_mutex_unlock(&n->mu);
	dt__van_destroy(n->van); /* no I/O thread from here on */
	dt__apps_stop(n);
	dt__sched_free(n);
	free(n->table);
	free(n->peers);
	pthread_mutex_destroy(&n->mu);
	pthread_cond_destroy(&n->cv);
	free(n);
}

dt_err
dt_node_start(const dt_node_config *cfg, dt_node **out)
{
	dt_van_hooks hooks = {0};
	dt_node *n;
	dt_err err;
	const char *host_hint;

	*out = NULL;
	if (cfg->num_workers < 1)
		return dt__fail(DT_ECONFIG,
		                "DMLC_NUM_WORKER must be at least 1");
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
	if ((err = dt__van_create(&hooks, &n->van)))
		goto fail;

	if (cfg->role == DT_ROLE_SCHEDULER) {
		snprintf(n->host, sizeof(n->host), "%s", cfg->root_uri);
		err = dt__van_listen(n->van, cfg->root_uri, cfg->root_port,
		                     cfg->listen_fd, &n->port);
		if (err)
			goto fail;
		if ((err = dt__sched_create(n)))
			goto fail;
		if ((err = dt__van_start(n->van)))
			goto fail;
		DT_LOG(1,
		       "scheduler listening on %s:%d for %d servers and %d "
		       "workers",
		       n->host, n->port, cfg->num_servers, cfg->num_workers);
		if ((err = dt__sched_start(n)))
			goto fail;
		*out = n;
		return DT_OK;
	}

	/* Advertise the address peers can reach; listen only there. */
	host_hint = cfg->node_host[0] ? cfg->node_host : NULL;
	if (!host_hint && !cfg->interface[0] &&
	    (strcmp(cfg->root_uri, "127.0.0.1") == 0 ||
	     strcmp(cfg->root_uri, "localhost") == 0))
		host_hint = "127.0.0.1"; /* a single-host job */
	err = dt__net_local_addr(host_hint, cfg->interface, n->host,
	                         sizeof(n->host));
	if (err)
		goto fail;
	if ((err = dt__van_listen(n->van, n->host, cfg->port, -1, &n->port)))
		goto fail;
	if ((err = dt__van_start(n->van)))
		goto fail;
	DT_LOG(1, "%s listening on %s:%d", dt_role_name(n->role), n->host,
	       n->port);
	if ((err = member_start(n)))
		goto fail;
	*out = n;
	return DT_OK;
fail : {
	char msg[512];

	snprintf(msg, sizeof(msg), "%s", dt_errmsg());
	node_free(n);
	return dt__fail(err, "%s", msg);
}
}

dt_err
dt_node_serve(dt_node *n)
{
	dt_err err;

	if (n->role == DT_ROLE_SCHEDULER)
		return dt__sched_serve(n);
	if (n->role != DT_ROLE_SERVER)
		return dt__fail(DT_ESTATE, "dt_node_serve: a worker does not "
		                           "serve");
	err = wait_count(n, &n->terminated, 0, 1, 0, "the end of the job");
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
	if (n->role == DT_ROLE_WORKER && n->peers && n->peers[0] &&
	    err == DT_OK) {
		dt_msg_hdr h = {.cmd = DT_CMD_WORKER_DONE,
		                .flags = DT_F_REQUEST};
		DT_LOG(1, "%s is done; telling the scheduler", dt__log_name());
		/* Leave quietly from here on: closing is expected. */
		pthread_mutex_lock(&n->mu);
		n->stopping = 1;
		pthread_mutex_unlock(&n->mu);
		err = dt__node_send(n, 0, &h, NULL, 0, NULL, 0);
	}
	node_free(n);
	return err;
}

dt_role
dt_node_role(const dt_node *n)
{
	return n->role;
}

int
dt_node_rank(const dt_node *n)
{
	return n->rank;
}

int
dt_node_num_workers(const dt_node *n)
{
	return n->num_workers;
}

int
dt_node_num_servers(const dt_node *n)
{
	return n->num_servers;
}

dt_err
dt_node_send_text(dt_node *n, dt_role dst_role, int dst_rank, const char *text)
{
	int id;
	size_t len = strlen(text);

	if (dst_role == DT_ROLE_SCHEDULER)
		id = 0;
	else if (dst_role == DT_ROLE_SERVER && dst_rank >= 0 &&
	         dst_rank < n->num_servers)
		id = dt__node_server_id(n, dst_rank);
	else if (dst_role == DT_ROLE_WORKER && dst_rank >= 0 &&
	         dst_rank < n->num_workers)
		id = dt__node_worker_id(n, dst_rank);
	else
		return dt__fail(DT_EINVAL, "send_text: no %s of rank %d",
		                dt_role_name(dst_role), dst_rank);
	if (len > 4096)
		return dt__fail(DT_EINVAL,
		                "send_text: text of %zu bytes is too "
		                "long (4096 at most)",
		                len);
	dt_msg_hdr h = {.cmd = DT_CMD_TEXT};
	return dt__node_send(n, id, &h, text, (uint32_t)len, NULL, 0);
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
		char msg[512];

		snprintf(msg, sizeof(msg), "%s: %s", dt_role_name(cfg.role),
		         dt_errmsg());
		dt_node_stop(n);
		return dt__fail(err, "%s", msg);
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
	dt_err err = dt__node_join_env(out, &served);

	/* The MXNet contract: a server or scheduler process ends here. */
	if (served)
		dt__exit_served(err);
	return err;
}
