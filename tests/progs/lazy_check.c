/*
 * lazy_check.c - connections between workers made on demand, run under
 * `dtrain launch -n N -s 0` by tests/integration/lazy_links.sh.
 *
 *   lazy_check all   three rounds in which every rank sends to every
 *                    other at once before receiving (each pair dials
 *                    itself from both ends at the same moment), every
 *                    byte checked; then an allreduce of 1 Mi floats and
 *                    one of 3 floats, checked exactly
 *   lazy_check ring  each rank sends to the next rank of a ring and
 *                    receives from the previous one, twice: the job then
 *                    needs one connection per rank
 *   lazy_check gone  (the node API alone, no collectives) the last rank
 *                    leaves at once (exit 0, before anyone dialled it);
 *                    rank 0 waits until that process has gone, then
 *                    sends it a text: the send must fail, naming the
 *                    worker, within DT_CONNECT_TIMEOUT (LAZY_CHECK_DIR:
 *                    where the last rank writes its pid)
 *   lazy_check hosts (a communicator on a node) its start asks for the
 *                    ranks' hosts alone: the local rank and size are
 *                    right and no worker's address is known after it but
 *                    those of its partners (the start's own allreduce);
 *                    then an allreduce, checked
 *   lazy_check first (the node API alone) each rank sends a text to the
 *                    next rank of a ring, whose address it never had:
 *                    the scheduler's assignment gives a worker the
 *                    servers' only, so the send looks the peer up
 *                    (LOOKUP) before it dials; the entry must be unknown
 *                    before and known after; then a barrier of the
 *                    workers and a clean stop
 * Prints "lazy_check rank R: N checks, F failed"; exit status 0 when
 * every check passed.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "dtrain/coll.h"
#include "dtrain/node.h"

static int rank_, size_, failures, checks;

#define FAIL(...)                                                              \
	do {                                                                   \
		fprintf(stderr, "lazy_check rank %d: FAIL: ", rank_);          \
		fprintf(stderr, __VA_ARGS__);                                  \
		fputc('\n', stderr);                                           \
		failures++;                                                    \
	} while (0)

/* Element i of what rank `from` sends rank `to` in round r: exact in a
 * float (below 2^24). */
static float
value(int from, int to, int r, size_t i)
{
	return (float)((from * 131 + to * 17 + r * 7 + (int)(i % 4093)) %
	               100000);
}

static int
ok(const char *what, dt_err err)
{
	checks++;
	if (err == DT_OK)
		return 1;
	FAIL("%s: %s: %s", what, dt_errname(err), dt_errmsg());
	return 0;
}

/* Every rank sends to every other at once, then receives from each. */
static void
all_round(dt_coll *c, int r, size_t count)
{
	float **out = calloc((size_t)size_, sizeof(*out));
	float **in = calloc((size_t)size_, sizeof(*in));
	dt_coll_handle **hs = calloc((size_t)size_, sizeof(*hs));
	dt_coll_handle **hr = calloc((size_t)size_, sizeof(*hr));

	if (!out || !in || !hs || !hr) {
		FAIL("out of memory");
		goto out;
	}
	for (int p = 0; p < size_; p++) {
		if (p == rank_)
			continue;
		out[p] = malloc(count * sizeof(float));
		in[p] = calloc(count, sizeof(float));
		if (!out[p] || !in[p]) {
			FAIL("out of memory");
			goto out;
		}
		for (size_t i = 0; i < count; i++)
			out[p][i] = value(rank_, p, r, i);
	}
	/* (sends first, to every peer: both ends of each pair dial) */
	for (int p = 0; p < size_; p++)
		if (p != rank_ &&
		    !ok("all: send",
		        dt_coll_send_async(c, out[p], count, DT_FLOAT32, p, r,
		                           &hs[p])))
			hs[p] = NULL;
	for (int p = 0; p < size_; p++)
		if (p != rank_ &&
		    !ok("all: recv",
		        dt_coll_recv_async(c, in[p], count, DT_FLOAT32, p, r,
		                           &hr[p])))
			hr[p] = NULL;
	for (int p = 0; p < size_; p++) {
		if (p == rank_)
			continue;
		if (hs[p])
			ok("all: wait send", dt_coll_wait(hs[p]));
		if (hr[p] && ok("all: wait recv", dt_coll_wait(hr[p]))) {
			checks++;
			for (size_t i = 0; i < count; i++)
				if (in[p][i] != value(p, rank_, r, i)) {
					FAIL("round %d: element %zu from rank "
					     "%d is %g, expected %g",
					     r, i, p, (double)in[p][i],
					     (double)value(p, rank_, r, i));
					break;
				}
		}
	}
out:
	for (int p = 0; out && in && p < size_; p++) {
		free(out[p]);
		free(in[p]);
	}
	free(out);
	free(in);
	free(hs);
	free(hr);
}

static void
allreduce_check(dt_coll *c, size_t count)
{
	float *buf = malloc(count * sizeof(float));

	if (buf == NULL) {
		FAIL("out of memory");
		return;
	}
	for (size_t i = 0; i < count; i++)
		buf[i] = (float)((size_t)rank_ + i % 1000);
	if (ok("allreduce", dt_coll_allreduce(c, buf, buf, count, DT_FLOAT32,
	                                      DT_COLL_SUM))) {
		checks++;
		for (size_t i = 0; i < count; i++) {
			float want = (float)((size_t)size_ * (i % 1000) +
			                     (size_t)size_ * (size_ - 1) / 2);

			if (buf[i] != want) {
				FAIL("allreduce of %zu: element %zu is %g, "
				     "expected %g",
				     count, i, (double)buf[i], (double)want);
				break;
			}
		}
	}
	free(buf);
}

static void
ring(dt_coll *c)
{
	int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
	float out[1000], in[1000];

	for (int r = 0; r < 2; r++) {
		dt_coll_handle *hs, *hr;

		for (int i = 0; i < 1000; i++)
			out[i] = value(rank_, next, r, (size_t)i);
		if (!ok("ring: send",
		        dt_coll_send_async(c, out, 1000, DT_FLOAT32, next, r,
		                           &hs)))
			return;
		if (!ok("ring: recv",
		        dt_coll_recv_async(c, in, 1000, DT_FLOAT32, prev, r,
		                           &hr)))
			return;
		ok("ring: wait send", dt_coll_wait(hs));
		if (!ok("ring: wait recv", dt_coll_wait(hr)))
			continue;
		checks++;
		for (int i = 0; i < 1000; i++)
			if (in[i] != value(prev, rank_, r, (size_t)i)) {
				FAIL("ring round %d: element %d from rank %d",
				     r, i, prev);
				break;
			}
	}
}

/* Whether process pid has ended (a zombie not yet reaped by the launcher
 * counts: it holds no connection). */
static int
ended(int pid)
{
	char path[64], state = '?';
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if ((f = fopen(path, "r")) == NULL)
		return kill(pid, 0) != 0 && errno == ESRCH;
	if (fscanf(f, "%*d (%*[^)]) %c", &state) != 1)
		state = '?';
	fclose(f);
	return state == 'Z' || state == 'X';
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The last rank leaves before anyone dialled it; rank 0 then sends to it.
 * Returns 1 when this process is to leave at once. */
static int
gone(dt_node *node)
{
	const char *dir = getenv("LAZY_CHECK_DIR");
	char path[4096];
	int last = size_ - 1;
	FILE *fp;

	if (dir == NULL) {
		FAIL("gone: LAZY_CHECK_DIR is not set");
		return 0;
	}
	snprintf(path, sizeof(path), "%s/pid", dir);
	if (rank_ == last) {
		char tmp[4200];

		snprintf(tmp, sizeof(tmp), "%s.tmp", path);
		if ((fp = fopen(tmp, "w")) == NULL)
			return 1;
		fprintf(fp, "%d\n", (int)getpid());
		fclose(fp);
		rename(tmp, path);
		return 1;
	}
	/* (polled with deadlines: the test's own limit is far longer) */
	double t0 = now_s();

	if (rank_ != 0) {
		/* The others stay until rank 0 has tried: one that left
		 * would be a second loss. */
		snprintf(path, sizeof(path), "%s/done", dir);
		while (now_s() - t0 < 90 && access(path, F_OK) != 0) {
			struct timespec nap = {0, 20000000};

			nanosleep(&nap, NULL);
		}
		return 0;
	}
	int pid = 0;

	while (now_s() - t0 < 60) {
		if (pid == 0 && (fp = fopen(path, "r")) != NULL) {
			if (fscanf(fp, "%d", &pid) != 1)
				pid = 0;
			fclose(fp);
		}
		if (pid > 0 && ended(pid))
			break;
		struct timespec nap = {0, 20000000};

		nanosleep(&nap, NULL);
	}
	checks++;
	if (pid <= 0 || !ended(pid)) {
		FAIL("gone: rank %d did not leave within 60 s", last);
		return 0;
	}
	t0 = now_s();
	dt_err err = dt_node_send_text(node, DT_ROLE_WORKER, last, "hello");
	double took = now_s() - t0;
	char want_rank[32], want_worker[32];

	snprintf(want_rank, sizeof(want_rank), "rank %d", last);
	snprintf(want_worker, sizeof(want_worker), "worker %d", last);
	checks++;
	if (err == DT_OK)
		FAIL("gone: a send to rank %d, which has left, succeeded",
		     last);
	else if (!strstr(dt_errmsg(), want_rank) &&
	         !strstr(dt_errmsg(), want_worker))
		FAIL("gone: the error does not name the peer: %s", dt_errmsg());
	else
		printf("lazy_check rank 0: send to a gone rank: %s: %s "
		       "(%.1f s)\n",
		       dt_errname(err), dt_errmsg(), took);
	snprintf(path, sizeof(path), "%s/done", dir);
	if ((fp = fopen(path, "w")) != NULL)
		fclose(fp);
	return 0;
}

/* The first send to a worker whose address this one never had. */
static void
first(dt_node *node)
{
	int next = (rank_ + 1) % size_;
	int id = 1 + dt_node_num_servers(node) + next;
	char text[64];

	checks++;
	if (dt__node_entry(node, id) != NULL)
		FAIL("first: the address of rank %d is known before any send",
		     next);
	snprintf(text, sizeof(text), "first text from rank %d", rank_);
	ok("first: a text to the next rank",
	   dt_node_send_text(node, DT_ROLE_WORKER, next, text));
	checks++;
	if (dt__node_entry(node, id) == NULL)
		FAIL("first: the address of rank %d is unknown after the send",
		     next);
	/* (every text is in before anyone stops) */
	ok("first: the workers' barrier",
	   dt_node_barrier(node, DT_GROUP_WORKERS));
}

/* A communicator's start asks the scheduler for its ranks' hosts alone:
 * every rank is on this host (local rank and size), and no other
 * worker's address is known here after it; then an allreduce. (Run with
 * DT_COLL_CMA=0: same-host reads would ask for every rank's entry.) */
static void
hosts(dt_node *node)
{
	int base = 1 + dt_node_num_servers(node), known = 0;
	dt_coll *c;

	if (!ok("hosts: init", dt_coll_init_node(node, &c)))
		return;
	checks++;
	if (dt_coll_local_size(c) != size_ || dt_coll_local_rank(c) != rank_)
		FAIL("hosts: local rank %d of %d, not %d of %d",
		     dt_coll_local_rank(c), dt_coll_local_size(c), rank_,
		     size_);
	for (int r = 0; r < size_; r++)
		known += r != rank_ && dt__node_entry(node, base + r) != NULL;
	/* (the start's own small allreduce, by recursive doubling, has
	 * dialled log2(size) partners: those are known, no more) */
	int partners = 0;
	for (int k = 1; k < size_; k *= 2)
		partners++;
	checks++;
	if (known > partners)
		FAIL("hosts: %d other workers' addresses known after the "
		     "start (its partners: %d)",
		     known, partners);
	allreduce_check(c, 1000);
	ok("hosts: finalize", dt_coll_finalize(c));
}

int
main(int argc, char **argv)
{
	dt_coll *c;
	dt_err err;

	if (argc != 2 || (strcmp(argv[1], "all") && strcmp(argv[1], "ring") &&
	                  strcmp(argv[1], "gone") && strcmp(argv[1], "first") &&
	                  strcmp(argv[1], "hosts"))) {
		fprintf(stderr,
		        "usage: lazy_check all|ring|gone|first|hosts\n");
		return 2;
	}
	if (strcmp(argv[1], "first") == 0 || strcmp(argv[1], "hosts") == 0) {
		dt_node *node;

		if (dt_node_init_from_env(&node) != DT_OK || node == NULL) {
			fprintf(stderr, "lazy_check: %s\n",
			        node ? dt_errmsg()
			             : "run it under dtrain launch");
			return 1;
		}
		rank_ = dt_node_rank(node);
		size_ = dt_node_num_workers(node);
		if (size_ < 2)
			FAIL("needs 2 ranks or more");
		else if (strcmp(argv[1], "first") == 0)
			first(node);
		else
			hosts(node);
		ok("stop", dt_node_stop(node));
		printf("lazy_check rank %d: %d checks, %d failed\n", rank_,
		       checks, failures);
		return failures ? 1 : 0;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (strcmp(argv[1], "gone") == 0) {
		dt_node *node;

		if (dt_node_init_from_env(&node) != DT_OK || node == NULL) {
			fprintf(stderr, "lazy_check: %s\n",
			        node ? dt_errmsg()
			             : "run it under dtrain launch");
			return 1;
		}
		rank_ = dt_node_rank(node);
		size_ = dt_node_num_workers(node);
		if (size_ < 2)
			FAIL("needs 2 ranks or more");
		else if (gone(node)) {
			printf("lazy_check rank %d: leaving at once\n", rank_);
			fflush(NULL);
			_exit(0);
		}
		printf("lazy_check rank %d: %d checks, %d failed\n", rank_,
		       checks, failures);
		fflush(NULL);
		_exit(failures ? 1 : 0); /* (the job has lost a worker) */
	}
	if ((err = dt_coll_init(&c))) {
		fprintf(stderr, "lazy_check: init: %s\n", dt_errmsg());
		return 1;
	}
	rank_ = dt_coll_rank(c);
	size_ = dt_coll_size(c);
	if (size_ < 2) {
		FAIL("needs 2 ranks or more");
	} else if (strcmp(argv[1], "all") == 0) {
		for (int r = 0; r < 3; r++)
			all_round(c, r, r == 1 ? 70000 : 100);
		allreduce_check(c, 1 << 20);
		allreduce_check(c, 3);
	} else {
		ring(c);
	}
	if ((err = dt_coll_finalize(c)))
		FAIL("finalize: %s: %s", dt_errname(err), dt_errmsg());
	printf("lazy_check rank %d: %d checks, %d failed\n", rank_, checks,
	       failures);
	return failures ? 1 : 0;
}
