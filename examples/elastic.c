/*
 * elastic.c - elastic training in the collectives mode: a linear model
 * learnt by SGD with momentum over an allreduce, that goes on when a
 * worker is taken away (dtrain/elastic.h, docs/elastic.md).
 *
 *   dtrain launch -n 3 -s 0 --min-workers 2 -- build/examples/elastic \
 *       --steps 400 --save w.bin
 *
 * The data are N synthetic samples (x in [-1, 1)^D from a seeded generator,
 * y = <w*, x> + b*). Each epoch's order is the sampler's permutation of
 * (seed, epoch); at every step the workers of the membership take the next
 * global batch of batch x workers samples of it, worker r the slice r.
 * What makes up the training state - the weights, the momentum, the
 * position in the data (epoch, samples consumed) and, with
 * --count-samples, how often each sample was trained on this epoch - is
 * registered with dt_elastic and committed every --commit-every steps.
 * When a worker is lost, every survivor's allreduce fails with
 * DT_EMEMBERSHIP; each restores the last commit of the new rank 0 and
 * deals the rest of the epoch to the workers that remain.
 *
 * Test knobs: --die-at STEP --die-rank R makes launch rank R kill itself
 * (SIGKILL) before that step (up to 4 such pairs); --count-samples gathers the
 * indices every worker trained on at each step and checks at each epoch's end
 * that no sample was trained on twice and that only the tail under one global
 * batch was left out (rank 0 prints "samples: epoch E: ...").
 * --hold-at STEP --hold-file F makes every rank wait before that step's
 * commit until file F exists (at most 120 s; up to 4 pairs): a test starts
 * workers that join the running job meanwhile, and lets the job go on once
 * they are waiting (they join at that commit or the next). Each rank
 * prints "elastic: holding before step S" when it starts to wait.
 * --join-after F makes a worker that joins the running job wait for file F
 * (at most 120 s) before its first restore, as if it were loading its data:
 * it has asked to join, and is ready only then (the members take it in at
 * that step, dt_elastic_poll).
 *
 * With parameter servers (--kvstore dist_sync; every process of the job
 * started with DTRAIN_ELASTIC=1, as tests/integration/elastic_ps.sh does): the
 * gradients are summed by the servers instead of the allreduce - the
 * weights and the bias are two keys, each pushed and pulled back as the
 * round's sum - and the update stays on the workers, with the state
 * dt_elastic commits. --kvstore dist_async: the servers update (SGD with
 * momentum) as each push comes, and a worker pulls the weights again after
 * a change. The communicator, for the commits and the counts, is made on
 * the store's node.
 */
#include <getopt.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/coll.h"
#include "dtrain/elastic.h"
#include "dtrain/kv.h"
#include "dtrain/nn.h"

#define D       16
#define MAX_N   (1 << 16)
#define NPARAMS (D + 1)

typedef struct opts {
	long n, batch, steps, epochs, commit_every, seed;
	long die_at[4], die_rank[4]; /* --die-at/--die-rank pairs */
	int ndie, nrank;
	long hold_at[4]; /* --hold-at/--hold-file pairs */
	const char *hold_file[4];
	int nhold, nhfile;
	const char *join_after; /* --join-after */
	double lr, momentum;
	const char *save;
	int count;
	const char *kvstore; /* NULL: the allreduce; else dist_sync/_async */
	dt_kv *kv;
} opts;

/* What dt_elastic keeps: all of it is the same on every rank. */
typedef struct position {
	uint64_t epoch;
	uint64_t consumed;  /* samples of this epoch's permutation */
	uint64_t max_batch; /* the largest global batch this epoch */
} position;

static uint64_t
splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static float
unit(uint64_t *s)
{
	return (float)((double)(splitmix64(s) >> 40) / (double)(1 << 23)) -
	       1.0f;
}

static void
make_data(long n, uint64_t seed, float *x, float *y)
{
	uint64_t s = seed;
	float w[D];

	for (int j = 0; j < D; j++)
		w[j] = unit(&s) * 3.0f;
	for (long i = 0; i < n; i++) {
		float acc = 0.5f;

		for (int j = 0; j < D; j++) {
			x[i * D + j] = unit(&s);
			acc += w[j] * x[i * D + j];
		}
		y[i] = acc;
	}
}

static int
parse(int argc, char **argv, opts *o)
{
	static const struct option lo[] = {
	    {"samples", required_argument, 0, 'n'},
	    {"batch-size", required_argument, 0, 'b'},
	    {"steps", required_argument, 0, 's'},
	    {"epochs", required_argument, 0, 'e'},
	    {"commit-every", required_argument, 0, 'k'},
	    {"seed", required_argument, 0, 'S'},
	    {"lr", required_argument, 0, 'l'},
	    {"momentum", required_argument, 0, 'm'},
	    {"save", required_argument, 0, 'o'},
	    {"count-samples", no_argument, 0, 'c'},
	    {"die-at", required_argument, 0, 'd'},
	    {"die-rank", required_argument, 0, 'r'},
	    {"hold-at", required_argument, 0, 'H'},
	    {"hold-file", required_argument, 0, 'F'},
	    {"join-after", required_argument, 0, 'J'},
	    {"kvstore", required_argument, 0, 'K'},
	    {"help", no_argument, 0, 'h'},
	    {0, 0, 0, 0},
	};
	int ch;

	*o = (opts){.n = 4096,
	            .batch = 8,
	            .steps = 400,
	            .epochs = 1000,
	            .commit_every = 10,
	            .seed = 7,
	            .lr = 0.05,
	            .momentum = 0.9};
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 'n':
			o->n = atol(optarg);
			break;
		case 'b':
			o->batch = atol(optarg);
			break;
		case 's':
			o->steps = atol(optarg);
			break;
		case 'e':
			o->epochs = atol(optarg);
			break;
		case 'k':
			o->commit_every = atol(optarg);
			break;
		case 'S':
			o->seed = atol(optarg);
			break;
		case 'l':
			o->lr = atof(optarg);
			break;
		case 'm':
			o->momentum = atof(optarg);
			break;
		case 'o':
			o->save = optarg;
			break;
		case 'c':
			o->count = 1;
			break;
		case 'd':
			if (o->ndie < 4)
				o->die_at[o->ndie++] = atol(optarg);
			break;
		case 'r':
			if (o->nrank < 4)
				o->die_rank[o->nrank++] = atol(optarg);
			break;
		case 'H':
			if (o->nhold < 4)
				o->hold_at[o->nhold++] = atol(optarg);
			break;
		case 'F':
			if (o->nhfile < 4)
				o->hold_file[o->nhfile++] = optarg;
			break;
		case 'K':
			o->kvstore = optarg;
			break;
		case 'J':
			o->join_after = optarg;
			break;
		default:
			fputs(
			    "usage: elastic [--samples N] [--batch-size B] "
			    "[--steps S] [--epochs E]\n"
			    "               [--commit-every K] [--seed N] "
			    "[--lr X] [--momentum X]\n"
			    "               [--save FILE] [--count-samples] "
			    "[--die-at STEP --die-rank R]...\n"
			    "               [--hold-at STEP --hold-file "
			    "F]... [--join-after F]\n"
			    "               [--kvstore dist_sync|dist_async]\n",
			    ch == 'h' ? stdout : stderr);
			return ch == 'h' ? 1 : 2;
		}
	}
	if (o->n < 1 || o->n > MAX_N || o->batch < 1 || o->steps < 0 ||
	    o->commit_every < 1 || o->ndie != o->nrank ||
	    o->nhold != o->nhfile ||
	    (o->kvstore && strcmp(o->kvstore, "dist_sync") &&
	     strcmp(o->kvstore, "dist_async"))) {
		fprintf(stderr,
		        "elastic: need 1 <= samples <= %d, batch >= 1, "
		        "commit-every >= 1, --kvstore dist_sync or "
		        "dist_async\n",
		        MAX_N);
		return 2;
	}
	return 0;
}

/* The end of an epoch (--count-samples): every sample at most once, and
 * only the tail under one global batch never. */
static int
check_epoch(const opts *o, const position *pos, const uint8_t *seen)
{
	long once = 0, never = 0, more = 0;

	for (long i = 0; i < o->n; i++) {
		once += seen[i] == 1;
		never += seen[i] == 0;
		more += seen[i] > 1;
	}
	printf("samples: epoch %llu: %ld once, %ld never, %ld more than "
	       "once\n",
	       (unsigned long long)pos->epoch, once, never, more);
	if (more || (uint64_t)never >= pos->max_batch) {
		fprintf(stderr, "elastic: epoch %llu dealt its samples wrong\n",
		        (unsigned long long)pos->epoch);
		return -1;
	}
	return 0;
}

/* Wait until file exists, at most 120 s. */
static void
wait_file(const char *file)
{
	for (int t = 0; t < 12000 && access(file, F_OK); t++)
		nanosleep(&(struct timespec){0, 10000000}, NULL);
}

/* --hold-at: before step's commit, wait (once per pair, at most 120 s)
 * until the pair's file exists. */
static void
hold(const opts *o, uint64_t step, int *held)
{
	for (int i = 0; i < o->nhold; i++) {
		if ((uint64_t)o->hold_at[i] != step || held[i])
			continue;
		held[i] = 1;
		printf("elastic: holding before step %llu\n",
		       (unsigned long long)step);
		fflush(stdout);
		wait_file(o->hold_file[i]);
	}
}

/*
 * With servers: the weights (key 0) and the bias (key 1) pushed, and the
 * round's sums pulled back into g (dist_sync), or the servers' weights
 * after this push into w (dist_async). Both requests are waited for even
 * when one fails (DT_EMEMBERSHIP: the round was dropped), so that neither
 * writes into g or w after the step.
 */
static dt_err
push_grads(const opts *o, float *w, float *g)
{
	float *out = strcmp(o->kvstore, "dist_async") == 0 ? w : g;
	dt_kv_req r[2];
	dt_err err, e2;

	if ((err = dt_kv_pushpull_async(o->kv, 0, g, out, D, &r[0])))
		return err;
	if ((err = dt_kv_pushpull_async(o->kv, 1, g + D, out + D, 1, &r[1]))) {
		(void)dt_kv_wait(o->kv, r[0]);
		return err;
	}
	err = dt_kv_wait(o->kv, r[0]);
	e2 = dt_kv_wait(o->kv, r[1]);
	return err ? err : e2;
}

/* One step: the local gradient of my slice, summed over the ranks. */
static dt_err
step_grads(dt_coll *c, const opts *o, const float *x, const float *y,
           const size_t *idx, float *w, float *g)
{
	memset(g, 0, sizeof(float) * NPARAMS);
	for (long k = 0; k < o->batch; k++) {
		const float *xi = x + idx[k] * D;
		float err = w[D] - y[idx[k]];

		for (int j = 0; j < D; j++)
			err += w[j] * xi[j];
		for (int j = 0; j < D; j++)
			g[j] += err * xi[j];
		g[D] += err;
	}
	if (o->kv)
		return push_grads(o, w, g);
	return dt_coll_allreduce(c, g, g, NPARAMS, DT_FLOAT32, DT_COLL_SUM);
}

/* --count-samples: every rank's indices of this step, counted. */
static dt_err
count_step(dt_coll *c, const opts *o, const size_t *idx, int32_t *all,
           uint8_t *seen)
{
	int32_t mine[256];
	int n = dt_coll_size(c);
	dt_err err;

	for (long k = 0; k < o->batch; k++)
		mine[k] = (int32_t)idx[k];
	if ((err = dt_coll_allgather(c, mine, all, (size_t)o->batch, DT_INT32)))
		return err;
	for (long k = 0; k < o->batch * n; k++)
		if (seen[all[k]] < 255)
			seen[all[k]]++;
	return DT_OK;
}

static int
train(dt_coll *c, dt_elastic *e, const opts *o, const float *x, const float *y,
      float *w, float *mom, position *pos, uint8_t *seen)
{
	dt_sampler *s = NULL;
	int32_t *all = calloc((size_t)o->batch * 1024, sizeof(int32_t));
	uint64_t step = 0;
	float g[NPARAMS];
	dt_err err = DT_OK;
	int rc = 1, launch_rank = dt_coll_rank(c), held[4] = {0};
	int async = o->kvstore && strcmp(o->kvstore, "dist_async") == 0;

	if (all == NULL ||
	    dt_sampler_create((size_t)o->n, (size_t)o->batch, 1, 0,
	                      (uint64_t)o->seed, 1, &s) != DT_OK)
		goto out;
	if (o->join_after && dt_elastic_joining(e))
		wait_file(o->join_after);
	while (step < (uint64_t)o->steps && pos->epoch < (uint64_t)o->epochs) {
		const size_t *idx;
		int n;

		hold(o, step, held);
		/* (between commits: a worker that joins may be taken in at
		 * this step, which is then committed) */
		err = step % (uint64_t)o->commit_every == 0
		          ? dt_elastic_commit(e, step)
		          : dt_elastic_poll(e, step, NULL);
		if (err || step % (uint64_t)o->commit_every == 0) {
			if (dt_elastic_left(e)) {
				printf("elastic: rank %d left at step %llu\n",
				       dt_coll_rank(c),
				       (unsigned long long)step);
				rc = 0;
				goto out;
			}
			if (err == DT_EMEMBERSHIP)
				goto restore;
			if (err)
				goto out;
		}
		for (int i = 0; i < o->ndie; i++)
			if ((long)step == o->die_at[i] &&
			    o->die_rank[i] == launch_rank)
				raise(SIGKILL);
		n = dt_coll_size(c); /* (after a change the commit took) */
		/* The deal of this step: the permutation of the epoch, from
		 * what the job has consumed of it, over the ranks now. */
		if (dt_sampler_set_epoch(s, pos->epoch) != DT_OK ||
		    dt_sampler_reshard(s, n, dt_coll_rank(c),
		                       (size_t)pos->consumed) != DT_OK)
			goto out;
		if (dt_sampler_num_batches(s) == 0) {
			if (o->count && dt_coll_rank(c) == 0 &&
			    check_epoch(o, pos, seen))
				goto out;
			pos->epoch++;
			pos->consumed = 0;
			pos->max_batch = 0;
			memset(seen, 0, (size_t)o->n);
			continue;
		}
		if (dt_sampler_batch(s, 0, &idx) != DT_OK)
			goto out;
		err = step_grads(c, o, x, y, idx, w, g);
		if (err == DT_OK && o->count)
			err = count_step(c, o, idx, all, seen);
		if (err == DT_EMEMBERSHIP)
			goto restore;
		if (err)
			goto out;
		for (int j = 0; j < NPARAMS && !async; j++) {
			mom[j] = (float)o->momentum * mom[j] +
			         g[j] / (float)(o->batch * n);
			w[j] -= (float)o->lr * mom[j];
		}
		pos->consumed += (uint64_t)(o->batch * n);
		if ((uint64_t)(o->batch * n) > pos->max_batch)
			pos->max_batch = (uint64_t)(o->batch * n);
		step++;
		continue;
	restore:
		fprintf(stderr, "elastic: rank %d: %s\n", dt_coll_rank(c),
		        dt_errmsg());
		if ((err = dt_elastic_restore(e, &step)))
			goto out;
		/* (dist_async: the weights are the servers') */
		if (async && ((err = dt_kv_pull(o->kv, 0, w, D)) ||
		              (err = dt_kv_pull(o->kv, 1, w + D, 1))))
			goto out;
		printf("elastic: rank %d of %d from step %llu\n",
		       dt_coll_rank(c), dt_coll_size(c),
		       (unsigned long long)step);
	}
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "elastic: %s\n", dt_errmsg());
	dt_sampler_destroy(s);
	free(all);
	return rc;
}

/* --kvstore: the store (a server or the scheduler serves in there and
 * exits), and the communicator on its node. dist_async: SGD with momentum
 * on the servers, each push scaled by 1 / the batch. */
static int
start_store(opts *o, dt_coll **c)
{
	char params[128];

	if (dt_kv_create(o->kvstore, &o->kv) != DT_OK ||
	    dt_coll_init_node(dt_kv_node(o->kv), c) != DT_OK)
		return -1;
	snprintf(params, sizeof(params), "lr=%g,momentum=%g,rescale_grad=%g",
	         o->lr, o->momentum, 1.0 / (double)o->batch);
	if (strcmp(o->kvstore, "dist_async") == 0 &&
	    dt_kv_set_optimizer(o->kv, "sgd", params) != DT_OK)
		return -1;
	return 0;
}

int
main(int argc, char **argv)
{
	opts o;
	dt_coll *c = NULL;
	dt_elastic *e = NULL;
	float *x = NULL, *y = NULL, w[NPARAMS] = {0}, mom[NPARAMS] = {0};
	position pos = {0};
	uint8_t *seen = NULL;
	int rc;

	if ((rc = parse(argc, argv, &o)))
		return rc == 1 ? 0 : rc;
	if (o.batch > 256) {
		fprintf(stderr, "elastic: --batch-size is at most 256\n");
		return 2;
	}
	rc = 1;
	if (o.kvstore && start_store(&o, &c))
		goto fail;
	if (!o.kvstore && dt_coll_init(&c) != DT_OK)
		goto fail;
	x = malloc(sizeof(float) * (size_t)o.n * D);
	y = malloc(sizeof(float) * (size_t)o.n);
	seen = calloc((size_t)o.n, 1);
	if (!x || !y || !seen)
		goto out;
	make_data(o.n, (uint64_t)o.seed, x, y);
	if (dt_elastic_create(c, &e) != DT_OK ||
	    dt_elastic_register(e, "weights", w, sizeof(w)) != DT_OK ||
	    dt_elastic_register(e, "momentum", mom, sizeof(mom)) != DT_OK ||
	    dt_elastic_register(e, "position", &pos, sizeof(pos)) != DT_OK ||
	    (o.count &&
	     dt_elastic_register(e, "seen", seen, (size_t)o.n) != DT_OK))
		goto fail;
	if (o.kv && (dt_kv_init(o.kv, 0, w, D) != DT_OK ||
	             dt_kv_init(o.kv, 1, w + D, 1) != DT_OK))
		goto fail;
	if (dt_coll_rank(c) == 0)
		printf("elastic: %d workers, %ld samples, batch %ld per "
		       "worker, %ld steps%s%s\n",
		       dt_coll_size(c), o.n, o.batch, o.steps,
		       o.kvstore ? ", kvstore " : "",
		       o.kvstore ? o.kvstore : "");
	if (train(c, e, &o, x, y, w, mom, &pos, seen))
		goto out;
	if (!dt_elastic_left(e) && dt_coll_rank(c) == 0) {
		dt_elastic_change ch;

		dt_elastic_last_change(e, &ch);
		printf("elastic: done with %d workers at epoch %llu; w[0] "
		       "%.6f b %.6f; membership %llu\n",
		       dt_coll_size(c), (unsigned long long)pos.epoch,
		       (double)w[0], (double)w[D],
		       (unsigned long long)ch.epoch);
		if (o.save) {
			FILE *f = fopen(o.save, "wb");

			if (f == NULL || fwrite(w, sizeof(w), 1, f) != 1 ||
			    fclose(f)) {
				perror(o.save);
				goto out;
			}
		}
	}
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "elastic: %s\n", dt_errmsg());
out:
	dt_elastic_destroy(e);
	if (c && dt_coll_finalize(c) != DT_OK && rc == 0) {
		fprintf(stderr, "elastic: %s\n", dt_errmsg());
		rc = 1;
	}
	if (o.kv && dt_kv_destroy(o.kv) != DT_OK && rc == 0) {
		fprintf(stderr, "elastic: %s\n", dt_errmsg());
		rc = 1;
	}
	free(x);
	free(y);
	free(seen);
	fflush(stdout);
	return rc;
}
