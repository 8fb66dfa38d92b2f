/*
 * scale_sim.c - many real nodes in one process, for bench/scale_sim.sh and
 * tests/integration/scale_sim.sh. Each simulated node is a dt_node started
 * from its own config (dt_node_start) against a scheduler run elsewhere:
 * it runs the real join, start-up barrier, barriers, heartbeats and
 * leaving, and one driver thread here makes its calls. The nodes share
 * the library's threads (DT_SHARED_LOOP=1 unless set: one I/O, one
 * handshake and one heartbeat thread for all the nodes of the process;
 * with DT_SHARED_LOOP=0, three threads per node, as a real node has).
 *
 * The nodes go through the phases together, one phase per line "go" read
 * on standard input: phase 0 joins (dt_node_start, which returns after
 * the start-up barrier over every node), phases 1..B are barriers over
 * the servers and workers, and the last one leaves (a worker stops; a
 * server serves until every worker has left, then stops). At the end of
 * each phase, once every node of the process is through it, it prints
 * one JSON line: when the nodes entered and left the phase (the wall
 * clock, ns), each node's time in it (us), how many failed and the first
 * error, and the frames and bytes the nodes received from the scheduler
 * (node id 0) during it, and sent to it (dt_node_stats; heartbeats are
 * not counted there); after the join, its nodes' ids. End of input stops
 * whatever nodes are left.
 *
 *   scale_sim --workers 100 --servers 2 --barriers 3 --host 127.0.0.2
 *
 * The job comes from the environment as for any node (DMLC_PS_ROOT_URI,
 * DMLC_PS_ROOT_PORT, DMLC_NUM_WORKER, DMLC_NUM_SERVER, DTRAIN_SECRET).
 * Unless they are set, DTRAIN_TRANSPORT=tcp (simulated nodes must not
 * share memory rings with each other, as nodes of different hosts could
 * not), and DT_SPIN_US=0 and DT_WAIT_DIRECT=0: a waiting node sleeps, as
 * it would on a host of its own, instead of polling a processor that
 * thousands of others share (on the shared loops it always does).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "dtrain/dtrain.h"

/* Most nodes in one process: the descriptors (and, without the shared
 * loops, the threads) of more would exceed the usual limits long before. */
#define MAX_NODES    20000
#define MAX_BARRIERS 1000
/* A driver thread's stack: the calls it makes use a few KiB. */
#define DRIVER_STACK (256u << 10)

typedef struct sim_node {
	pthread_t th;
	int index;
	dt_role role;
	dt_node *node;
	int failed; /* 1 once a call failed: later phases skip it */
	int id;     /* its node id once it joined (0: not joined) */
	/* this phase */
	uint64_t t_in, t_out;
	uint64_t rx_msgs, rx_bytes, tx_msgs; /* from/to id 0, this phase */
	uint64_t c_rx_msgs, c_rx_bytes, c_tx_msgs; /* cumulative so far */
	char err[256];
} sim_node;

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int gate;    /* phases released so far */
	int quit;    /* end of input: stop what is left */
	int pending; /* nodes still in the released phase */
	int nphases; /* 1 + barriers + 1 */
	int groups;
	dt_node_config base;
	char host[64];
	int nnodes;
	sim_node *nodes;
	long gap_us; /* --start-gap-us: between two nodes' starts */
} sim = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static uint64_t
wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* What the node received from and sent to the scheduler so far. */
static void
count_root(sim_node *s)
{
	dt_stats st;

	if (s->node == NULL || dt_node_stats(s->node, &st) != DT_OK)
		return;
	if (st.npeers > 0) {
		uint64_t m = st.peers[0].msgs_recv, b = st.peers[0].bytes_recv;
		uint64_t t = st.peers[0].msgs_sent;

		s->rx_msgs = m - s->c_rx_msgs;
		s->rx_bytes = b - s->c_rx_bytes;
		s->tx_msgs = t - s->c_tx_msgs;
		s->c_rx_msgs = m;
		s->c_rx_bytes = b;
		s->c_tx_msgs = t;
	}
	dt_stats_fini(&st);
}

static void
fail_node(sim_node *s, const char *what)
{
	s->failed = 1;
	snprintf(s->err, sizeof(s->err), "%s %d: %s: %s", dt_role_name(s->role),
	         s->index, what, dt_errmsg());
}

/* One phase of one node. */
static void
run_phase(sim_node *s, int phase)
{
	dt_err err = DT_OK;

	s->rx_msgs = s->rx_bytes = s->tx_msgs = 0;
	if (phase == 0 && sim.gap_us > 0) {
		/* (the process's nodes start one after the other: node i
		 * after i gaps) */
		uint64_t ns =
		    (uint64_t)s->index * (uint64_t)sim.gap_us * 1000ull;
		struct timespec ts = {(time_t)(ns / 1000000000ull),
		                      (long)(ns % 1000000000ull)};

		nanosleep(&ts, NULL);
	}
	s->t_in = wall_ns();
	if (phase == 0) {
		dt_node_config cfg = sim.base;

		cfg.role = s->role;
		cfg.requested_rank = -1;
		snprintf(cfg.node_host, sizeof(cfg.node_host), "%s", sim.host);
		if ((err = dt_node_start(&cfg, &s->node)) != DT_OK) {
			s->node = NULL;
			fail_node(s, "join");
		} else {
			s->id = 1 + dt_node_rank(s->node) +
			        (s->role == DT_ROLE_WORKER
			             ? dt_node_num_servers(s->node)
			             : 0);
		}
	} else if (phase < sim.nphases - 1) {
		if ((err = dt_node_barrier(s->node, sim.groups)) != DT_OK)
			fail_node(s, "barrier");
	} else {
		/* (read before the node goes) */
		count_root(s);
		if (s->role == DT_ROLE_SERVER &&
		    (err = dt_node_serve(s->node)) != DT_OK)
			fail_node(s, "serve");
		dt_err e2 = dt_node_stop(s->node);

		s->node = NULL;
		if (e2 != DT_OK && !s->failed)
			fail_node(s, "leave");
	}
	s->t_out = wall_ns();
	if (phase < sim.nphases - 1)
		count_root(s);
}

static void *
driver_main(void *arg)
{
	sim_node *s = arg;

	for (int phase = 0; phase < sim.nphases; phase++) {
		pthread_mutex_lock(&sim.mu);
		while (sim.gate <= phase && !sim.quit)
			pthread_cond_wait(&sim.cv, &sim.mu);
		int quit = sim.quit && sim.gate <= phase;
		pthread_mutex_unlock(&sim.mu);
		if (quit)
			break;
		if (!s->failed)
			run_phase(s, phase);
		pthread_mutex_lock(&sim.mu);
		if (--sim.pending == 0)
			pthread_cond_broadcast(&sim.cv);
		pthread_mutex_unlock(&sim.mu);
	}
	if (s->node) {
		dt_node_stop(s->node);
		s->node = NULL;
	}
	return NULL;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static const char *
phase_name(int phase, char *buf, size_t cap)
{
	if (phase == 0)
		return "join";
	if (phase == sim.nphases - 1)
		return "leave";
	snprintf(buf, cap, "barrier%d", phase);
	return buf;
}

/* Print a JSON string's body: the error text may hold anything. */
static void
json_str(const char *p)
{
	for (; *p; p++) {
		unsigned char c = (unsigned char)*p;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
}

/* The phase's JSON line: what every node of this process did in it. */
static void
report(int phase, uint64_t *lat)
{
	uint64_t in_min = UINT64_MAX, in_max = 0, out_min = UINT64_MAX;
	uint64_t out_max = 0, rxm = 0, rxb = 0, txm = 0;
	int ok = 0, failed = 0, nlat = 0;
	const char *first = NULL;
	char name[32];

	for (int i = 0; i < sim.nnodes; i++) {
		sim_node *s = &sim.nodes[i];

		if (s->failed && s->err[0] && first == NULL)
			first = s->err;
		if (s->t_out == 0 || s->t_in == 0) {
			failed++;
			continue;
		}
		in_min = s->t_in < in_min ? s->t_in : in_min;
		in_max = s->t_in > in_max ? s->t_in : in_max;
		out_min = s->t_out < out_min ? s->t_out : out_min;
		out_max = s->t_out > out_max ? s->t_out : out_max;
		rxm += s->rx_msgs;
		rxb += s->rx_bytes;
		txm += s->tx_msgs;
		if (s->failed) {
			failed++;
		} else {
			ok++;
			lat[nlat++] = (s->t_out - s->t_in) / 1000;
		}
	}
	qsort(lat, (size_t)nlat, sizeof(*lat), cmp_u64);
	printf("{\"phase\": %d, \"name\": \"%s\", \"nodes\": %d, \"ok\": %d, "
	       "\"failed\": %d, \"in_min\": %" PRIu64 ", \"in_max\": %" PRIu64
	       ", \"out_min\": %" PRIu64 ", \"out_max\": %" PRIu64
	       ", \"rx_root_msgs\": %" PRIu64 ", \"rx_root_bytes\": %" PRIu64
	       ", \"tx_root_msgs\": %" PRIu64 ", \"lat_us\": [",
	       phase, phase_name(phase, name, sizeof(name)), sim.nnodes, ok,
	       failed, ok ? in_min : 0, in_max, ok ? out_min : 0, out_max, rxm,
	       rxb, txm);
	for (int i = 0; i < nlat; i++)
		printf("%s%" PRIu64, i ? ", " : "", lat[i]);
	/* (after the join, the node ids its nodes got: the driver works
	 * out from them where the control tree's links are) */
	if (phase == 0) {
		printf("], \"ids\": [");
		for (int i = 0, k = 0; i < sim.nnodes; i++)
			if (sim.nodes[i].id > 0)
				printf("%s%d", k++ ? ", " : "",
				       sim.nodes[i].id);
	}
	printf("], \"error\": \"");
	json_str(first ? first : "");
	printf("\"}\n");
	fflush(stdout);
}

static int
parse_args(int argc, char **argv, int *nw, int *ns, int *nb)
{
	*nw = 0, *ns = 0, *nb = 1;
	snprintf(sim.host, sizeof(sim.host), "127.0.0.1");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;
		long x;

		if (v == NULL)
			goto usage;
		if (strcmp(a, "--host") == 0) {
			if (strlen(v) >= sizeof(sim.host))
				goto usage;
			snprintf(sim.host, sizeof(sim.host), "%s", v);
			i++;
			continue;
		}
		errno = 0;
		x = strtol(v, &end, 10);
		if (errno || *end || end == v || x < 0 ||
		    x > (strcmp(a, "--start-gap-us") == 0 ? 60000000L
		                                          : MAX_NODES))
			goto usage;
		if (strcmp(a, "--start-gap-us") == 0)
			sim.gap_us = x;
		else if (strcmp(a, "--workers") == 0)
			*nw = (int)x;
		else if (strcmp(a, "--servers") == 0)
			*ns = (int)x;
		else if (strcmp(a, "--barriers") == 0 && x <= MAX_BARRIERS)
			*nb = (int)x;
		else
			goto usage;
		i++;
	}
	if (*nw + *ns >= 1 && *nw + *ns <= MAX_NODES)
		return 0;
usage:
	fprintf(stderr,
	        "usage: scale_sim [--workers N] [--servers N] "
	        "[--barriers N (1)] [--host ADDR (127.0.0.1)] "
	        "[--start-gap-us US (0)]\n"
	        "  (1 to %d nodes; at most %d barriers; the job's "
	        "DMLC_* variables and DTRAIN_SECRET set)\n",
	        MAX_NODES, MAX_BARRIERS);
	return -1;
}

/* Room for every node's descriptors: as many as the hard limit allows. */
static void
raise_nofile(void)
{
	struct rlimit r;

	if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &r);
	}
}

/* Release phase p and wait until every node is through it. */
static void
step(int p)
{
	pthread_mutex_lock(&sim.mu);
	sim.pending = sim.nnodes;
	sim.gate = p + 1;
	pthread_cond_broadcast(&sim.cv);
	while (sim.pending > 0)
		pthread_cond_wait(&sim.cv, &sim.mu);
	pthread_mutex_unlock(&sim.mu);
}

static int
start_drivers(int nw, int ns)
{
	pthread_attr_t attr;
	int rc = 0;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, DRIVER_STACK);
	for (int i = 0; i < sim.nnodes; i++) {
		sim_node *s = &sim.nodes[i];

		s->index = i;
		/* (servers spread among the workers) */
		s->role = ns > 0 && i % ((nw + ns) / ns) == 0 &&
		                  i / ((nw + ns) / ns) < ns
		              ? DT_ROLE_SERVER
		              : DT_ROLE_WORKER;
		if ((rc = pthread_create(&s->th, &attr, driver_main, s))) {
			fprintf(stderr, "scale_sim: thread %d: %s\n", i,
			        strerror(rc));
			sim.nnodes = i;
			break;
		}
	}
	pthread_attr_destroy(&attr);
	return rc;
}

int
main(int argc, char **argv)
{
	char line[64];
	int nw, ns, nb, rc = 0;
	uint64_t *lat;

	if (parse_args(argc, argv, &nw, &ns, &nb))
		return 2;
	setenv("DTRAIN_TRANSPORT", "tcp", 0);
	setenv("DT_SPIN_US", "0", 0);
	setenv("DT_WAIT_DIRECT", "0", 0);
	setenv("DT_SHARED_LOOP", "1", 0);
	raise_nofile();
	if (dt_node_config_from_env(&sim.base, 0) != DT_OK) {
		fprintf(stderr, "scale_sim: %s\n", dt_errmsg());
		return 2;
	}
	sim.groups =
	    DT_GROUP_WORKERS | (sim.base.num_servers ? DT_GROUP_SERVERS : 0);
	sim.nphases = nb + 2;
	sim.nnodes = nw + ns;
	sim.nodes = calloc((size_t)sim.nnodes, sizeof(*sim.nodes));
	lat = calloc((size_t)sim.nnodes, sizeof(*lat));
	if (sim.nodes == NULL || lat == NULL) {
		fprintf(stderr, "scale_sim: out of memory for %d nodes\n",
		        sim.nnodes);
		return 1;
	}
	if (start_drivers(nw, ns))
		rc = 1;
	printf("{\"ready\": %d, \"workers\": %d, \"servers\": %d}\n",
	       sim.nnodes, nw, ns);
	fflush(stdout);
	for (int p = 0; rc == 0 && p < sim.nphases; p++) {
		if (fgets(line, sizeof(line), stdin) == NULL)
			break;
		step(p);
		report(p, lat);
	}
	pthread_mutex_lock(&sim.mu);
	sim.quit = 1;
	pthread_cond_broadcast(&sim.cv);
	pthread_mutex_unlock(&sim.mu);
	for (int i = 0; i < sim.nnodes; i++) {
		pthread_join(sim.nodes[i].th, NULL);
		if (sim.nodes[i].failed)
			rc = 1;
	}
	if (sim.gate < sim.nphases)
		rc = 1;
	free(sim.nodes);
	free(lat);
	return rc;
}
