/*
 * node.c - the services of a node that every part of the core and the apps
 * above use (core.h): names, the table, sending to a node id, the fatal
 * error that ends every wait, waiting with a deadline, and the public
 * getters. It calls nothing of the roles (member.c, scheduler.c) or of the
 * start-up (lifecycle.c).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/node_impl.h"

const char *
dt__node_name(const dt_node *n, int id, char *buf, size_t cap)
{
	if (id == 0)
		snprintf(buf, cap, "scheduler");
	else if (n->table && id > 0 && id < n->ntable)
		snprintf(buf, cap, "%s %d", dt_role_name(dt__id_role(n, id)),
		         dt__id_rank(n, id));
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
	/* A node that has failed (an ABORT, a lost scheduler) dials nobody
	 * any more: its start-up or a redial ends now, not at its deadline.
	 * (The scheduler dials only to call parked workers back, and an
	 * abort is what it then tells them: join_park.c.) */
	if (n->van && n->role != DT_ROLE_SCHEDULER)
		dt__van_stop_dials(n->van);
	dt__link_clear(n); /* nothing kept refers to the waits failed here */
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

uint64_t
dt__node_wait_ns(const dt_node *n)
{
	return n->wait_ns;
}

int
dt__node_recover(const dt_node *n)
{
	return n->recover;
}

int
dt__node_rejoined(const dt_node *n)
{
	return n->rejoined;
}

const dt_node_entry *
dt__node_entry(const dt_node *n, int id)
{
	if (n->table == NULL || id < 0 || id >= n->ntable ||
	    !__atomic_load_n(&n->table[id].known, __ATOMIC_ACQUIRE))
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

int
dt__node_peer_pid(dt_node *n, int id)
{
	dt_conn *c;

	if (id < 0 || id >= n->ntable || n->peers == NULL)
		return 0;
	/* The kernel vouches for a pid through a same-host connection:
	 * one to a worker is made now if it was not yet (reach.c). */
	if (__atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE) == NULL &&
	    dt__reach_lazy(n, id) && dt__link_fresh(n, id))
		(void)dt__reach_peer(n, id);
	if ((c = __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE)) == NULL)
		return 0;
	return dt__conn_peer_pid(c);
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

void
dt__node_log_text(dt_node *n, int peer, const dt_msg *m)
{
	char name[64], text[4097];

	dt__log(0, "message from %s: %s",
	        dt__node_name(n, peer, name, sizeof(name)),
	        dt__printable(m->meta ? (const char *)m->meta : "", text,
	                      sizeof(text)));
}

void
dt__node_before_write(dt_node *n, const void *p, size_t bytes)
{
	dt__link_unpin(n, p, bytes);
}

dt_err
dt__node_send(dt_node *n, int id, dt_msg_hdr *h, const void *meta,
              uint32_t meta_len, const struct iovec *iov, int iovcnt)
{
	return dt__node_send_ex(n, id, h, meta, meta_len, iov, iovcnt, 0);
}

void
dt__node_note_lost_server(dt_node *n, int peer)
{
	if (n->role != DT_ROLE_WORKER || peer <= 0)
		return;
	pthread_mutex_lock(&n->mu);
	if (n->table && peer < n->ntable &&
	    dt__id_role(n, peer) == DT_ROLE_SERVER && n->lost_server[0] == '\0')
		snprintf(n->lost_server, sizeof(n->lost_server), "server %d",
		         dt__id_rank(n, peer));
	pthread_mutex_unlock(&n->mu);
}

dt_err
dt__node_send_ex(dt_node *n, int id, dt_msg_hdr *h, const void *meta,
                 uint32_t meta_len, const struct iovec *iov, int iovcnt,
                 unsigned flags)
{
	char name[64];
	dt_conn *c;

	/* (a BYE is not counted: lifecycle.c, hook_on_msg) */
	if (id >= 0 && id < n->ntable && n->ctr && h->cmd != DT_CMD_BYE) {
		uint64_t bytes = DT_HDR_SIZE + (uint64_t)meta_len;

		for (int i = 0; i < iovcnt; i++)
			bytes += iov[i].iov_len;
		dt__ctr_sent(&n->ctr[id], bytes);
	}
	/* A worker's first message to another makes their connection
	 * (reach.c); with PS_RESEND, only the link's first one: a lost one
	 * is the links' to dial again. */
	if (id >= 0 && id < n->ntable && n->peers &&
	    __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE) == NULL &&
	    dt__reach_lazy(n, id) && dt__link_fresh(n, id)) {
		dt_err err = dt__reach_peer(n, id);

		if (err)
			return err;
	}
	/* Over the control tree, the scheduler's idle connection is dialled
	 * again (root.c). */
	if (id == 0 && n->role != DT_ROLE_SCHEDULER && n->peers &&
	    __atomic_load_n(&n->peers[0], __ATOMIC_ACQUIRE) == NULL) {
		dt_err err = dt__root_reopen(n);

		if (err)
			return err;
	}
	if (id >= 0 && id < n->ntable && id != n->id &&
	    dt__link_wants(n, h->cmd))
		return dt__link_send(n, id, h, meta, meta_len, iov, iovcnt,
		                     (flags & DT_SEND_STABLE) != 0);
	if (id < 0 || id >= n->ntable ||
	    (c = __atomic_load_n(&n->peers[id], __ATOMIC_ACQUIRE)) == NULL) {
		dt__node_note_lost_server(n, id);
		return dt__fail(DT_ESTATE, "no connection to %s",
		                dt__node_name(n, id, name, sizeof(name)));
	}
	h->sender = (uint32_t)n->id;
	h->recver = (uint32_t)id;
	return dt__van_send(n->van, c, h, meta, meta_len, iov, iovcnt);
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
		/* Wake at least every 100 ms to check the deadline (and any
		 * state a waker changed without a broadcast). On the shared
		 * loops, where one process runs hundreds of nodes, every 5 s
		 * or at the deadline: each change a waiter waits for is
		 * broadcast, and 100,000 waiting threads woken ten times a
		 * second were most of a simulated join's processor time. */
		uint64_t step =
		    dt__van_shared(n->van) ? 5000000000ull : 100000000ull;
		uint64_t now = dt__now_ns();
		if (deadline_ns && deadline_ns > now &&
		    deadline_ns - now < step)
			step = deadline_ns - now;
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += (time_t)(step / 1000000000ull);
		ts.tv_nsec += (long)(step % 1000000000ull);
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
dt_err
dt__node_wait_count(dt_node *n, const void *flag, int is64, uint64_t want,
                    uint64_t deadline_ns, const char *what)
{
	count_goal g = {flag, is64, want};

	return dt__node_wait(n, count_reached, &g, deadline_ns, what);
}

dt_role
dt_node_role(const dt_node *n)
{
	return n ? n->role : (dt_role)-1;
}

int
dt_node_rank(const dt_node *n)
{
	return n ? n->rank : -1;
}

int
dt_node_num_workers(const dt_node *n)
{
	return n ? n->num_workers : -1;
}

int
dt_node_num_servers(const dt_node *n)
{
	return n ? n->num_servers : -1;
}

dt_err
dt_node_send_text(dt_node *n, dt_role dst_role, int dst_rank, const char *text)
{
	int id;
	size_t len;

	if (n == NULL || text == NULL)
		return dt__fail(DT_EINVAL, "dt_node_send_text: %s is NULL",
		                n ? "text" : "node");
	len = strlen(text);

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

void
dt__host_id(char *out, size_t cap)
{
	const char *env = dt__env_str("DT_HOST_ID");
	char boot[64] = "";
	struct stat st;
	FILE *f;

	*out = '\0';
	if (env && *env) {
		/* (a test's second host; the ADD_NODE checks its letters) */
		snprintf(out, cap, "%s", env);
		return;
	}
	if ((f = fopen("/proc/sys/kernel/random/boot_id", "re")) == NULL)
		return;
	if (fgets(boot, sizeof(boot), f) == NULL)
		boot[0] = '\0';
	fclose(f);
	boot[strcspn(boot, "\n")] = '\0';
	if (boot[0] == '\0' || stat("/proc/self/ns/net", &st) != 0)
		return;
	snprintf(out, cap, "%s/%llu", boot, (unsigned long long)st.st_ino);
}

const char *
dt__node_local_of(const dt_node *n, const char *hostid, const char *local)
{
	return n->hostid[0] && n->local[0] && strcmp(hostid, n->hostid) == 0
	           ? local
	           : "";
}
