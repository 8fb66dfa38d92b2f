/*
 * mnist.c - data-parallel training of LeNet (or an MLP) on MNIST-format
 * data through a KVStore: seed 004's Gluon example in C.
 *
 *   build/examples/mnist --kvstore local
 *   dtrain launch -n 2 -s 2 -- build/examples/mnist --kvstore dist_sync
 *
 * Every step each worker takes its slice of the global batch (the split
 * sampler: the same seeded permutation on every worker), computes the
 * summed gradient of its slice - with --devices N, N threads each run a
 * replica on 1/N of the slice and their gradients are summed locally, as
 * MXNet's multi-device training - pushes one key per parameter tensor (a
 * big one as slices, each its own key) and pulls the new weights. The
 * optimizer runs in the store (MXNet's update_on_kvstore), with
 * rescale_grad = 1 / global batch: the servers for dist types, this
 * process for local ones, so all types share one update rule and 2
 * workers at batch 32 equal 1 process at batch 64.
 * --kvstore horovod averages the gradients with an allreduce among the
 * workers instead (no servers) and updates locally with the same rule.
 * --elastic (with horovod or dist_sync, and sgd) goes on when a worker is
 * lost:
 *
 *   dtrain launch -n 3 -s 0 --min-workers 2 -- build/examples/mnist \
 *       --kvstore horovod --optimizer sgd --lr 0.05 --elastic
 *
 * (with dist_sync the servers sum the gradients and the update stays on
 * the workers; docs/elastic.md, "With parameter servers")
 *
 * The file is over a thousand lines because it holds the example's three
 * loops - data parallel, pipeline (run_pipeline), elastic (run_elastic) -
 * which share its options, data and replicas.
 */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/coll.h"
#include "dtrain/elastic.h"
#include "dtrain/kv.h"
#include "dtrain/nn.h"
#include "dtrain/obs.h"

#define MAX_DEV 16

typedef struct opts {
	const char *model, *kvstore, *optimizer, *data, *save, *load;
	const char *compression, *pull_precision, *metrics, *label;
	long devices, epochs, batch, seed, limit, disp;
	double lr, momentum, wd, lr_factor;
	int no_overlap;
	/* Pipeline parallelism (run_pipeline). */
	long pipe_stages, micro_batches;
	const char *schedule, *cuts;
	/* Elastic training (run_elastic). */
	int elastic;
	long commit_every;
} opts;

typedef struct replica {
	dt_nn_model *m;
	const dt_dataset *d;
	const size_t *idx; /* this replica's samples */
	int count;
	float *x, *y;
	double loss;
	int correct;
	int hooked; /* the overlap's hooks clear the gradients (on_params) */
	dt_err err;
	char msg[256];
} replica;

static void *
replica_step(void *arg)
{
	replica *r = arg;

	if (!r->hooked)
		dt_nn_model_zero_grad(r->m);
	r->err = dt_data_gather(r->d, r->idx, (size_t)r->count, r->x, r->y);
	if (!r->err)
		r->err = dt_nn_forward_backward(r->m, r->x, r->y, r->count,
		                                &r->loss, &r->correct);
	if (r->err)
		snprintf(r->msg, sizeof(r->msg), "%s", dt_errmsg());
	return NULL;
}

/*
 * Overlap (one device): communication starts during the backward pass as
 * soon as a layer's gradients are final (dt_nn_model_set_grad_hook), last
 * layer first, straight from the model's gradient buffer, and the next
 * forward pass waits for a layer's new parameters only when it reaches
 * that layer (dt_nn_model_set_param_hook), so its first layers compute
 * while the values of the later ones still arrive. The end of an epoch
 * waits for everything (overlap_finish).
 *
 * With a KVStore, each tensor's push-pull starts at its hook. With servers
 * (and no gradient compression) a tensor of more than SLICE_FLOATS goes as
 * slices of about that size, each its own key, so a server answers a
 * slice as soon as every worker has pushed it, not the whole tensor. Where
 * layers come before a big tensor's, the first half of its slices waits
 * until theirs are sent (the end of the backward pass): their new values
 * are the first the next forward pass needs and are not queued behind the
 * big tensor's on the link, which meanwhile still carries its other
 * half. Every element is summed and updated as before, so slices change
 * no value.
 *
 * With --kvstore horovod the gradients are summed by one allreduce per
 * bucket (DDP's gradient buckets): consecutive ranges of the gradient
 * buffer, from the last tensor down, of at least BUCKET_BYTES together, so
 * small layers share one message. A bucket's allreduce starts, with
 * overlap, as soon as its lowest tensor is final; without, after backward.
 * A tensor of more than BUCKET_BYTES with layers before it is cut as its
 * slices are: its upper half ends a bucket, its lower half is a bucket of
 * its own, started after the buckets of the layers before it. The buckets,
 * their order and sizes are the same either way, so the two give the same
 * bits whatever algorithm the collectives choose for a size; the local
 * store then updates the weights, a tensor at a time as the forward pass
 * reaches it (with overlap) or all after the step (without).
 */
#define BUCKET_BYTES ((size_t)256 << 10)
#define SLICE_FLOATS ((size_t)64 << 10)
/* The tensors the first layer's hooks name (its weight and bias): those
 * of a later layer have layers before them. */
#define FIRST_LAYER_TENSORS 2

/* A bucket: floats [lo, hi) of the gradient buffer, started once the
 * tensors from trig up are final. */
typedef struct bucket {
	size_t lo, hi;
	int trig;
	int started;
	dt_coll_handle *h;
} bucket;

typedef struct overlap {
	dt_nn_model *m;
	dt_kv *kv; /* the store that updates (local with horovod) */
	int nt;    /* tensors */
	int nk;    /* keys: a tensor's slices, or the tensor */
	int *tk;   /* tensor t's keys: tk[t] .. tk[t + 1] - 1 */
	dt_key *keys;
	float **gv, **pv; /* a key's gradient and parameters */
	size_t *lens;
	int *late;       /* key k waits for the end of backward */
	dt_kv_req *reqs; /* key k's push-pull, when pending[k] */
	int *pending;
	int *due;      /* horovod: tensor t is to be updated */
	dt_coll *coll; /* horovod: allreduce buckets, no push-pull */
	float *grads;  /* horovod: the gradient buffer */
	int nb;        /* buckets, in the order they start */
	bucket *b;
	int next;      /* the next bucket to start */
	double waited; /* seconds the forward pass waited */
	dt_err err;
	char msg[256];
} overlap;

static void
overlap_fail(overlap *o, dt_err err)
{
	if (o->err == DT_OK) {
		o->err = err;
		snprintf(o->msg, sizeof(o->msg), "%s", dt_errmsg());
	}
}

/* Cut the parameters and gradients gbase of m into keys: with slice (dist
 * stores without compression) a tensor of more than SLICE_FLOATS into
 * near-equal slices on multiples of 32 floats, else one key a tensor.
 * Slice j > 0 of tensor t is key t + j * nt * S (S servers): under
 * MXNet's placement, which keeps an array whole on server key mod S, a
 * tensor's slices stay on its server. Arrays are o's; 1: no memory. */
static int
plan_keys(overlap *o, dt_nn_model *m, float *gbase, int slice, int S)
{
	int nt = dt_nn_model_num_tensors(m), nk = 0;

	o->nt = nt;
	o->tk = calloc((size_t)nt + 1, sizeof(*o->tk));
	o->due = calloc((size_t)nt, sizeof(*o->due));
	if (!o->tk || !o->due)
		return 1;
	for (int t = 0; t < nt; t++) {
		size_t n = dt_nn_model_tensor(m, t)->size;

		o->tk[t] = nk;
		nk += slice && n > SLICE_FLOATS
		          ? (int)((n + SLICE_FLOATS - 1) / SLICE_FLOATS)
		          : 1;
	}
	o->tk[nt] = nk;
	o->nk = nk;
	o->keys = calloc((size_t)nk, sizeof(*o->keys));
	o->gv = calloc((size_t)nk, sizeof(*o->gv));
	o->pv = calloc((size_t)nk, sizeof(*o->pv));
	o->lens = calloc((size_t)nk, sizeof(*o->lens));
	o->late = calloc((size_t)nk, sizeof(*o->late));
	o->reqs = calloc((size_t)nk, sizeof(*o->reqs));
	o->pending = calloc((size_t)nk, sizeof(*o->pending));
	if (!o->keys || !o->gv || !o->pv || !o->lens || !o->late || !o->reqs ||
	    !o->pending)
		return 1;
	for (int t = 0; t < nt; t++) {
		const dt_nn_tensor *tt = dt_nn_model_tensor(m, t);
		int ns = o->tk[t + 1] - o->tk[t];
		size_t per = (tt->size / (size_t)ns + 31) / 32 * 32, at = 0;

		for (int j = 0; j < ns; j++) {
			int k = o->tk[t] + j;
			size_t len = j == ns - 1 ? tt->size - at : per;

			o->keys[k] = (dt_key)t + (dt_key)j * (dt_key)nt *
			                             (dt_key)(S > 0 ? S : 1);
			o->pv[k] = dt_nn_model_params(m) + tt->offset + at;
			o->gv[k] = gbase + tt->offset + at;
			o->lens[k] = len;
			/* the first half of a big tensor's slices, when
			 * layers come before it */
			o->late[k] =
			    ns > 1 && t >= FIRST_LAYER_TENSORS && j < ns / 2;
			at += len;
		}
	}
	return 0;
}

/* Horovod's buckets over the nt tensors of m (see above); 1: no memory. */
static int
plan_buckets(overlap *o, dt_nn_model *m)
{
	int nt = o->nt, nlate = 0;
	size_t hi = 0;
	bucket *late;

	/* at most a bucket a tensor, and a late one a big tensor */
	o->b = calloc(2 * (size_t)nt + 1, sizeof(*o->b));
	late = calloc((size_t)nt + 1, sizeof(*late));
	if (!o->b || !late) {
		free(late);
		return 1;
	}
	o->nb = 0;
	for (int i = nt - 1, open = 0; i >= 0; i--) {
		const dt_nn_tensor *t = dt_nn_model_tensor(m, i);
		size_t lo = t->offset;
		int cut = t->size * sizeof(float) > BUCKET_BYTES &&
		          i >= FIRST_LAYER_TENSORS;

		if (!open)
			hi = t->offset + t->size, open = 1;
		if (cut) {
			size_t half = (t->size / 2 + 31) / 32 * 32;

			late[nlate++] = (bucket){.lo = lo, .hi = lo + half};
			lo += half;
		}
		if ((hi - lo) * sizeof(float) >= BUCKET_BYTES || i == 0 ||
		    cut) {
			o->b[o->nb++] = (bucket){.lo = lo, .hi = hi, .trig = i};
			open = 0;
		}
	}
	/* The late halves go after the last bucket, as it does. */
	for (int j = 0; j < nlate; j++)
		o->b[o->nb++] = late[j];
	free(late);
	return 0;
}

/* Wait for the pending request of key k, or bucket j; the first error
 * wins, and every request is waited for even after one failed. */
static void
wait_key(overlap *o, int k)
{
	if (o->pending[k]) {
		dt_err err = dt_kv_wait(o->kv, o->reqs[k]);

		o->pending[k] = 0;
		if (err)
			overlap_fail(o, err);
	}
}

static void
wait_bucket(overlap *o, int j)
{
	bucket *b = &o->b[j];

	if (b->started) {
		dt_err err = dt_coll_wait(b->h);

		b->started = 0;
		if (err)
			overlap_fail(o, err);
	}
}

/* Start bucket j's allreduce, in place in the gradients. */
static void
start_bucket(overlap *o, int j)
{
	bucket *b = &o->b[j];
	dt_err err = dt_coll_allreduce_async(o->coll, DT_COLL_IN_PLACE,
	                                     o->grads + b->lo, b->hi - b->lo,
	                                     DT_FLOAT32, DT_COLL_SUM, &b->h);

	if (err)
		overlap_fail(o, err);
	else
		b->started = 1;
}

static void
start_key(overlap *o, int k)
{
	dt_err err;

	wait_key(o, k); /* (a request left from an earlier step) */
	err = dt_kv_pushpull_async(o->kv, o->keys[k], o->gv[k], o->pv[k],
	                           o->lens[k], &o->reqs[k]);

	if (err)
		overlap_fail(o, err);
	else
		o->pending[k] = 1;
}

static void
on_grads(void *arg, int first, int count)
{
	overlap *o = arg;

	if (o->err)
		return;
	for (int t = first; t < first + count; t++)
		o->due[t] = 1;
	if (o->coll) {
		/* Tensors from first up are final: so is every bucket whose
		 * lowest tensor is among them. */
		while (o->err == DT_OK && o->next < o->nb &&
		       o->b[o->next].trig >= first)
			start_bucket(o, o->next++);
		return;
	}
	for (int k = o->tk[first]; k < o->tk[first + count] && !o->err; k++)
		if (!o->late[k])
			start_key(o, k);
	/* The end of the backward pass: the big tensors' late slices. */
	for (int k = 0; first == 0 && k < o->nk && !o->err; k++)
		if (o->late[k])
			start_key(o, k);
}

/* Tensor t's new parameters: its keys' answers, or (horovod) its buckets'
 * sums and the local update. */
static void
settle_tensor(overlap *o, int t)
{
	if (!o->due[t])
		return;
	o->due[t] = 0;
	if (o->coll == NULL) {
		for (int k = o->tk[t]; k < o->tk[t + 1]; k++)
			wait_key(o, k);
		return;
	}
	size_t lo = (size_t)(o->gv[t] - o->grads), hi = lo + o->lens[t];

	for (int j = 0; j < o->nb; j++)
		if (o->b[j].lo < hi && lo < o->b[j].hi)
			wait_bucket(o, j);
	if (o->err == DT_OK) {
		dt_err err = dt_kv_pushpull(o->kv, o->keys[t], o->gv[t],
		                            o->pv[t], o->lens[t]);
		if (err)
			overlap_fail(o, err);
	}
}

static void
on_params(void *arg, int first, int count)
{
	overlap *o = arg;
	uint64_t t0 = dt_obs_now();
	int waits = 0;

	for (int t = first; t < first + count; t++) {
		const dt_nn_tensor *tt = dt_nn_model_tensor(o->m, t);

		waits |= o->due[t];
		settle_tensor(o, t);
		/* The gradients are the allreduce's or the push's until
		 * settled: cleared here for the backward pass, not before
		 * the forward one. */
		memset(dt_nn_model_grads(o->m) + tt->offset, 0,
		       tt->size * sizeof(float));
	}
	/* (on the timeline inside the forward pass) */
	if (waits) {
		dt_obs_phase(DT_PHASE_COMM, t0);
		o->waited += (double)(dt_obs_now() - t0) * 1e-9;
	}
}

/* Every tensor settled (the end of an epoch, or of the job); the first
 * error of the epoch's communication, kept in o->msg. */
static dt_err
overlap_finish(overlap *o)
{
	dt_err err;

	for (int t = 0; t < o->nt; t++)
		settle_tensor(o, t);
	for (int j = 0; j < o->nb; j++)
		wait_bucket(o, j);
	for (int k = 0; k < o->nk; k++)
		wait_key(o, k);
	o->next = 0;
	err = o->err;
	o->err = DT_OK;
	return err;
}

static void
overlap_free(overlap *o)
{
	free(o->tk);
	free(o->due);
	free(o->keys);
	free(o->gv);
	free(o->pv);
	free(o->lens);
	free(o->late);
	free(o->reqs);
	free(o->pending);
	free(o->b);
}

static double
now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
usage(FILE *f)
{
	fputs(
	    "usage: mnist [options]\n"
	    "  --model lenet|mlp          (lenet)\n"
	    "  --kvstore TYPE             local, device, dist_sync, "
	    "dist_async,\n"
	    "                             dist_sync_device, "
	    "dist_async_device,\n"
	    "                             horovod (local)\n"
	    "  --devices N                replicas (threads) per worker (1)\n"
	    "  --epochs N                 (3)\n"
	    "  --batch-size N             per worker (64)\n"
	    "  --optimizer sgd|adam       (adam)\n"
	    "  --lr X                     learning rate (0.002)\n"
	    "  --lr-factor X              lr *= X after each epoch (0.5)\n"
	    "  --momentum X --wd X        sgd momentum, weight decay (0.9, 0)\n"
	    "  --seed N                   initialisation and data order (42)\n"
	    "  --limit N                  use the first N training images\n"
	    "  --data DIR                 (/usr/share/datasets/fashion-mnist)\n"
	    "  --save FILE --load FILE    parameter files (rank 0 saves)\n"
	    "  --disp-batches N           Speedometer interval (50)\n"
	    "  --no-overlap               communicate after backward, not per\n"
	    "                             layer during it (one device)\n"
	    "  --gradient-compression C   none, fp16, 2bit[:T] or 1bit[:T]\n"
	    "                             (none; docs/compression.md)\n"
	    "  --pull-precision P         fp32 or fp16 weights from the\n"
	    "                             servers on the wire (fp32)\n"
	    "  --metrics FILE             rank 0 logs progress as JSON lines\n"
	    "                             (dtrain plot FILE draws them)\n"
	    "  --run-label L              the run's name in the log (the\n"
	    "                             kvstore, compression and worker\n"
	    "                             count)\n"
	    "  --pipeline-stages S        cut the model into S stages, one "
	    "per\n"
	    "                             worker of `dtrain launch -n S -s "
	    "0`;\n"
	    "                             with -n S*R, R pipelines on their "
	    "own\n"
	    "                             batches sum each stage's gradients\n"
	    "  --micro-batches M          per batch, in the pipeline (4)\n"
	    "  --schedule gpipe|1f1b      pipeline schedule (1f1b); each "
	    "stage\n"
	    "                             runs whichever pass has its input\n"
	    "                             first; gpipe-strict, 1f1b-strict:\n"
	    "                             the schedule's fixed order\n"
	    "  --stages L1,L2,...|auto|measured\n"
	    "                             first layer of each stage after the\n"
	    "                             first (default, auto: stages of\n"
	    "                             balanced counted work; measured:\n"
	    "                             of balanced measured time)\n"
	    "  --elastic                  with --kvstore horovod or "
	    "dist_sync, and sgd: go on\n"
	    "                             when a worker is lost "
	    "(docs/elastic.md)\n"
	    "  --commit-every K           elastic: commit every K steps "
	    "(20)\n",
	    f);
}

static int
parse(int argc, char **argv, opts *o)
{
	static const struct option lo[] = {
	    {"model", 1, 0, 'M'},
	    {"kvstore", 1, 0, 'k'},
	    {"devices", 1, 0, 'D'},
	    {"epochs", 1, 0, 'e'},
	    {"batch-size", 1, 0, 'b'},
	    {"optimizer", 1, 0, 'o'},
	    {"lr", 1, 0, 'l'},
	    {"momentum", 1, 0, 'm'},
	    {"wd", 1, 0, 'w'},
	    {"seed", 1, 0, 's'},
	    {"limit", 1, 0, 'L'},
	    {"data", 1, 0, 'd'},
	    {"save", 1, 0, 'S'},
	    {"load", 1, 0, 'R'},
	    {"disp-batches", 1, 0, 'p'},
	    {"lr-factor", 1, 0, 'F'},
	    {"no-overlap", 0, 0, 'O'},
	    {"gradient-compression", 1, 0, 'C'},
	    {"pull-precision", 1, 0, 'P'},
	    {"metrics", 1, 0, 'T'},
	    {"run-label", 1, 0, 'N'},
	    {"pipeline-stages", 1, 0, 'G'},
	    {"micro-batches", 1, 0, 'U'},
	    {"schedule", 1, 0, 'W'},
	    {"stages", 1, 0, 'X'},
	    {"elastic", 0, 0, 'E'},
	    {"commit-every", 1, 0, 'K'},
	    {"help", 0, 0, 'h'},
	    {0, 0, 0, 0},
	};
	int c, idx;

	*o = (opts){.model = "lenet",
	            .kvstore = "local",
	            .optimizer = "adam",
	            .data = "/usr/share/datasets/fashion-mnist",
	            .devices = 1,
	            .epochs = 3,
	            .batch = 64,
	            .seed = 42,
	            .disp = 50,
	            .lr = 0.002,
	            .momentum = 0.9,
	            .lr_factor = 0.5,
	            .micro_batches = 4,
	            .schedule = "1f1b",
	            .commit_every = 20};
	while ((c = getopt_long(argc, argv, "", lo, &idx)) != -1) {
		char *end = NULL;
		long *lp = NULL;
		double *dp = NULL;

		switch (c) {
		case 'M':
			o->model = optarg;
			continue;
		case 'k':
			o->kvstore = optarg;
			continue;
		case 'o':
			o->optimizer = optarg;
			continue;
		case 'd':
			o->data = optarg;
			continue;
		case 'S':
			o->save = optarg;
			continue;
		case 'R':
			o->load = optarg;
			continue;
		case 'T':
			o->metrics = optarg;
			continue;
		case 'N':
			o->label = optarg;
			continue;
		case 'W':
			o->schedule = optarg;
			continue;
		case 'X':
			o->cuts = optarg;
			continue;
		case 'E':
			o->elastic = 1;
			continue;
		case 'K':
			lp = &o->commit_every;
			break;
		case 'G':
			lp = &o->pipe_stages;
			break;
		case 'U':
			lp = &o->micro_batches;
			break;
		case 'D':
			lp = &o->devices;
			break;
		case 'e':
			lp = &o->epochs;
			break;
		case 'b':
			lp = &o->batch;
			break;
		case 's':
			lp = &o->seed;
			break;
		case 'L':
			lp = &o->limit;
			break;
		case 'p':
			lp = &o->disp;
			break;
		case 'l':
			dp = &o->lr;
			break;
		case 'm':
			dp = &o->momentum;
			break;
		case 'w':
			dp = &o->wd;
			break;
		case 'F':
			dp = &o->lr_factor;
			break;
		case 'O':
			o->no_overlap = 1;
			continue;
		case 'C':
			/* "none" is no compression: the allreduce overlaps
			 * the backward pass and big tensors go as slices */
			o->compression = strcmp(optarg, "none") ? optarg : NULL;
			continue;
		case 'P':
			o->pull_precision = optarg;
			continue;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
		if (lp)
			*lp = strtol(optarg, &end, 10);
		else
			*dp = strtod(optarg, &end);
		if (end == optarg || *end != '\0') {
			fprintf(stderr, "mnist: --%s: '%s' is not a number\n",
			        lo[idx].name, optarg);
			return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "mnist: unexpected argument '%s'\n",
		        argv[optind]);
		return -1;
	}
	if (o->devices < 1 || o->devices > MAX_DEV || o->epochs < 0 ||
	    o->batch < 1 || o->limit < 0 || o->disp < 1 ||
	    o->batch % o->devices != 0) {
		fprintf(stderr,
		        "mnist: need 1 <= --devices <= %d dividing "
		        "--batch-size, --batch-size >= 1, --epochs >= 0, "
		        "--limit >= 0, --disp-batches >= 1\n",
		        MAX_DEV);
		return -1;
	}
	if (strcmp(o->kvstore, "horovod") == 0 && o->pull_precision &&
	    strcmp(o->pull_precision, "fp32")) {
		fprintf(stderr, "mnist: --pull-precision applies to KVStore "
		                "types (horovod has no pulls)\n");
		return -1;
	}
	if (o->pipe_stages &&
	    (o->pipe_stages < 1 || o->micro_batches < 1 ||
	     o->batch % o->micro_batches != 0 ||
	     (strcmp(o->schedule, "gpipe") && strcmp(o->schedule, "1f1b") &&
	      strcmp(o->schedule, "gpipe-strict") &&
	      strcmp(o->schedule, "1f1b-strict")))) {
		fprintf(stderr, "mnist: need --pipeline-stages >= 1, "
		                "--micro-batches dividing --batch-size and "
		                "--schedule gpipe, 1f1b, gpipe-strict or "
		                "1f1b-strict\n");
		return -1;
	}
	if (o->elastic &&
	    ((strcmp(o->kvstore, "horovod") &&
	      strcmp(o->kvstore, "dist_sync")) ||
	     strcmp(o->optimizer, "sgd") || o->devices != 1 || o->pipe_stages ||
	     o->compression || o->commit_every < 1)) {
		fprintf(stderr,
		        "mnist: --elastic trains with --kvstore horovod "
		        "or dist_sync, --optimizer sgd on one device, without "
		        "compression or pipelines, --commit-every >= 1\n");
		return -1;
	}
	if (strcmp(o->model, "lenet") && strcmp(o->model, "mlp")) {
		fprintf(stderr,
		        "mnist: --model must be lenet or mlp, not '%s'\n",
		        o->model);
		return -1;
	}
	return 0;
}

/* The optimizer, in the store, with MXNet's rescale_grad = 1/global batch.
 * Called again each epoch with the decayed rate (a FactorScheduler). */
static dt_err
set_lr(dt_kv *kv, const opts *o, double lr, int nw, char *params, size_t cap)
{
	int sgd = strcmp(o->optimizer, "sgd") == 0;

	snprintf(params, cap, "lr=%.9g,wd=%g,rescale_grad=%.17g%s", lr, o->wd,
	         1.0 / (double)(o->batch * nw), sgd ? ",momentum=" : "");
	if (sgd)
		snprintf(params + strlen(params), cap - strlen(params), "%g",
		         o->momentum);
	return dt_kv_set_optimizer(kv, o->optimizer, params);
}

static double
validate(dt_nn_model *m, const dt_dataset *test)
{
	const int bs = 500;
	long correct = 0;

	for (size_t i = 0; i < test->n; i += bs) {
		int b = (int)(test->n - i < (size_t)bs ? test->n - i
		                                       : (size_t)bs),
		    c = 0;
		if (dt_nn_evaluate(m, test->x + i * test->dim,
		                   test->y + i * test->label_dim, b, NULL,
		                   &c) != DT_OK)
			return -1;
		correct += c;
	}
	return test->n ? (double)correct / (double)test->n : 0;
}

/* ---- pipeline parallelism (--pipeline-stages) ---- */

static dt_err
pipe_send(void *arg, const float *buf, size_t n, int stage, int tag, void **h)
{
	return dt_coll_send_async(arg, buf, n, DT_FLOAT32, stage, tag,
	                          (dt_coll_handle **)h);
}

static dt_err
pipe_recv(void *arg, float *buf, size_t n, int stage, int tag)
{
	return dt_coll_recv(arg, buf, n, DT_FLOAT32, stage, tag);
}

static dt_err
pipe_wait(void *arg, void *h)
{
	(void)arg;
	return dt_coll_wait(h);
}

static dt_err
pipe_recv_async(void *arg, float *buf, size_t n, int stage, int tag, void **h)
{
	return dt_coll_recv_async(arg, buf, n, DT_FLOAT32, stage, tag,
	                          (dt_coll_handle **)h);
}

static dt_err
pipe_wait_any(void *arg, void **h, int n, int *index)
{
	(void)arg;
	return dt_coll_wait_any((dt_coll_handle *const *)h, n, index);
}

/* The collectives' point-to-point calls as the pipeline's ops, with the
 * asynchronous receive and wait_any that let a stage run ready-first. */
static dt_nn_pipe_ops
pipe_ops(dt_coll *c)
{
	return (dt_nn_pipe_ops){.arg = c,
	                        .send = pipe_send,
	                        .recv = pipe_recv,
	                        .wait = pipe_wait,
	                        .recv_async = pipe_recv_async,
	                        .wait_any = pipe_wait_any};
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Rank 0 prints the measured cut: where each stage starts and the
 * median forward + backward CPU time of its layers per micro-batch. */
static void
print_measured(const double *cost, int n, const int *first, int S, int mb,
               int ranks)
{
	printf("mnist: measured cut (median over %d ranks of each layer's "
	       "CPU time, micro-batches of %d): stages start at layers",
	       ranks, mb);
	for (int s = 0; s < S; s++)
		printf(" %d", first[s]);
	printf(" (of %d); forward + backward per micro-batch:", n);
	for (int s = 0; s < S; s++) {
		double t = 0;

		for (int i = first[s]; i < first[s + 1]; i++)
			t += cost[i];
		printf(" stage %d %.3f ms%s", s, t / 1e6,
		       s + 1 < S ? "," : "\n");
	}
}

/*
 * --stages measured: every rank times each layer of the whole model on a
 * micro-batch (dt_nn_model_profile, CPU time), the figures are gathered,
 * a layer's cost is the median over the ranks of its forward + backward
 * time, and rank 0's cut from those costs (dt_nn_model_cut_by) is
 * broadcast: every rank uses rank 0's cut, so the ranks can never cut
 * differently, even if their arithmetic on the figures did.
 */
static int
pipe_cut_measured(dt_coll *c, dt_nn_model *whole, int S, int mb, int *first)
{
	int n = dt_nn_model_num_layers(whole), R = dt_coll_size(c), rc = -1;
	double *mine = calloc(2 * (size_t)n, sizeof(double));
	double *all = calloc(2 * (size_t)n * (size_t)R, sizeof(double));
	double *cost = calloc((size_t)n, sizeof(double));
	double *col = calloc((size_t)R, sizeof(double));
	int32_t cut[66] = {0}; /* ok, then first[0..S] */

	if (!mine || !all || !cost || !col)
		goto out;
	/* A rank whose profile fails still takes part, with a figure the
	 * cut refuses, so that rank 0 reports it and no rank waits. */
	if (dt_nn_model_profile(whole, mb, 5, mine, mine + n) != DT_OK) {
		fprintf(stderr, "mnist: %s\n", dt_errmsg());
		mine[0] = -1.0;
	}
	if (dt_coll_allgather(c, mine, all, 2 * (size_t)n, DT_FLOAT64) != DT_OK)
		goto out;
	for (int i = 0; i < n; i++) {
		for (int r = 0; r < R; r++)
			col[r] = all[(size_t)r * 2 * n + i] +
			         all[(size_t)r * 2 * n + n + i];
		qsort(col, (size_t)R, sizeof(double), cmp_double);
		cost[i] =
		    R % 2 ? col[R / 2] : (col[R / 2 - 1] + col[R / 2]) / 2;
		if (col[0] < 0.0) /* a rank failed: the cut refuses it */
			cost[i] = -1.0;
	}
	if (dt_coll_rank(c) == 0 &&
	    dt_nn_model_cut_by(whole, S, cost, first) == DT_OK) {
		cut[0] = 1;
		for (int s = 0; s <= S; s++)
			cut[1 + s] = first[s];
		print_measured(cost, n, first, S, mb, R);
	}
	if (dt_coll_broadcast(c, cut, (size_t)S + 2, DT_INT32, 0) != DT_OK)
		goto out;
	if (!cut[0]) {
		fprintf(stderr, "mnist: rank 0 found no measured cut\n");
		goto out;
	}
	for (int s = 0; s <= S; s++)
		first[s] = cut[1 + s];
	rc = 0;
out:
	free(mine);
	free(all);
	free(cost);
	free(col);
	return rc;
}

/* The stages' first layers: --stages L1,L2,..., the cut rule (absent or
 * auto) or the cut by measured time (measured). */
static int
pipe_cut(const opts *o, dt_coll *c, int S, int *first)
{
	dt_nn_model *whole;
	const char *p = o->cuts;
	int n;

	if (dt_nn_model_create(o->model, (uint64_t)o->seed, &whole) != DT_OK)
		return -1;
	n = dt_nn_model_num_layers(whole);
	if (p == NULL || strcmp(p, "auto") == 0 || strcmp(p, "measured") == 0) {
		int rc = p && strcmp(p, "measured") == 0
		             ? pipe_cut_measured(
		                   c, whole, S,
		                   (int)(o->batch / o->micro_batches), first)
		         : dt_nn_model_cut(whole, S, first) == DT_OK ? 0
		                                                     : -1;
		dt_nn_model_destroy(whole);
		return rc;
	}
	dt_nn_model_destroy(whole);
	first[0] = 0;
	first[S] = n;
	for (int s = 1; s < S; s++) {
		char *end;

		first[s] = (int)strtol(p, &end, 10);
		if (end == p || (*end != ',' && *end != '\0') ||
		    first[s] <= first[s - 1] || first[s] >= n) {
			fprintf(stderr,
			        "mnist: --stages '%s': need %d increasing "
			        "layer numbers in (0, %d)\n",
			        o->cuts, S - 1, n);
			return -2;
		}
		p = *end ? end + 1 : end;
	}
	return 0;
}

/*
 * Pipeline training: rank s of `dtrain launch -n S -s 0` builds stage s
 * only and trains it with the others over the same batches (each cut into
 * --micro-batches), the optimizer stepping after each batch's flush. The
 * last stage reports the loss; each stage saves its own file. Under -n
 * S*R there are R pipelines (rank r*S + s: stage s of replica r), each on
 * its part of every global batch of R x --batch-size, and the replicas of
 * a stage sum their gradients before the step (the mean: rescale_grad is
 * 1 / (R x batch)); replica 0 reports and saves.
 */
static int
run_pipeline(const opts *o)
{
	dt_coll *c = NULL;
	dt_dataset train = {0};
	dt_sampler *sampler = NULL;
	dt_nn_model *st = NULL;
	dt_nn_optim *opt = NULL;
	float *x = NULL, *y = NULL;
	int first[65], S, s, R, r, rc = 1, M = (int)o->micro_batches;
	char params[256];
	dt_nn_pipe_stats stats = {0};

	if (dt_coll_init(&c) != DT_OK)
		goto fail;
	S = (int)o->pipe_stages;
	if (S > 64 || dt_coll_size(c) % S != 0) {
		fprintf(stderr,
		        "mnist: --pipeline-stages %ld needs a multiple of %ld "
		        "workers (dtrain launch -n %ld -s 0, or -n %ld*R for R "
		        "replicas), not %d\n",
		        o->pipe_stages, o->pipe_stages, o->pipe_stages,
		        o->pipe_stages, dt_coll_size(c));
		goto out;
	}
	R = dt_coll_size(c) / S;
	s = dt_coll_rank(c) % S;
	r = dt_coll_rank(c) / S;
	if ((rc = pipe_cut(o, c, S, first)) == -2)
		goto out;
	snprintf(params, sizeof(params), "lr=%.9g,wd=%g,rescale_grad=%.17g%s",
	         o->lr, o->wd, 1.0 / ((double)o->batch * R),
	         strcmp(o->optimizer, "sgd") == 0 ? ",momentum=0.9" : "");
	if (rc ||
	    dt_nn_model_create_stage(o->model, (uint64_t)o->seed, first[s],
	                             first[s + 1], &st) != DT_OK ||
	    dt_nn_optim_create(o->optimizer, params, st, &opt) != DT_OK ||
	    dt_data_load_mnist_dir(o->data, 1, &train) != DT_OK)
		goto fail;
	rc = 1;
	if (o->limit > 0 && (size_t)o->limit < train.n)
		train.n = (size_t)o->limit;
	if (dt_sampler_create(train.n, (size_t)o->batch, R, r,
	                      (uint64_t)o->seed, 1, &sampler) != DT_OK)
		goto fail;
	x = malloc(sizeof(float) * train.dim * (size_t)o->batch);
	y = malloc(sizeof(float) * train.label_dim * (size_t)o->batch);
	if (!x || !y)
		goto out;
	dt_nn_pipe_cfg cfg = {.stage = s,
	                      .stages = S,
	                      .schedule = strncmp(o->schedule, "gpipe", 5) == 0
	                                      ? DT_NN_PIPE_GPIPE
	                                      : DT_NN_PIPE_1F1B,
	                      .strict = strstr(o->schedule, "-strict") != NULL,
	                      .micro_batches = M,
	                      .micro_batch = (int)(o->batch / M),
	                      .x = x,
	                      .y = y,
	                      .replica = r,
	                      .replicas = R};
	dt_nn_pipe_ops ops = pipe_ops(c);
	char rep_s[48] = "";

	if (R > 1)
		snprintf(rep_s, sizeof(rep_s), " (replica %d of %d)", r, R);
	printf("mnist: stage %d of %d%s: layers [%d, %d), %zu parameters, "
	       "%s, %d micro-batches of %d\n",
	       s, S, rep_s, first[s], first[s + 1], dt_nn_model_num_params(st),
	       o->schedule, M, cfg.micro_batch);
	for (long ep = 0; ep < o->epochs; ep++) {
		size_t nb = dt_sampler_num_batches(sampler);
		double loss = 0, t0 = now();
		const size_t *idx;

		if (dt_sampler_set_epoch(sampler, (uint64_t)ep) != DT_OK)
			goto fail;
		for (size_t b = 0; b < nb; b++) {
			dt_nn_model_zero_grad(st);
			if (dt_sampler_batch(sampler, b, &idx) != DT_OK ||
			    dt_data_gather(&train, idx, (size_t)o->batch, x,
			                   y) != DT_OK ||
			    dt_nn_pipe_step(st, &cfg, &ops, &stats) != DT_OK ||
			    dt_nn_pipe_sum_replicas(st, &cfg, &ops) != DT_OK ||
			    dt_nn_optim_step(opt, st) != DT_OK)
				goto fail;
			loss += stats.loss;
		}
		if (s == S - 1 && r == 0)
			printf("mnist: epoch %ld: train loss %.6f%s, %.0f "
			       "samples/s\n",
			       ep,
			       nb ? loss / (double)(nb * (size_t)o->batch)
			          : 0.0,
			       R > 1 ? " (replica 0's batches)" : "",
			       (double)(nb * (size_t)o->batch * (size_t)R) /
			           (now() - t0));
	}
	printf("mnist: stage %d: activation slots allocated %d (%zu bytes "
	       "with their inputs); peak in flight %d micro-batches (inputs "
	       "%zu bytes, activations kept %zu bytes)\n",
	       s, stats.slots, stats.alloc_bytes, stats.peak_stashed,
	       stats.stash_bytes, stats.act_bytes);
	if (o->save && r == 0) {
		char path[512];

		snprintf(path, sizeof(path), "%s.stage%d", o->save, s);
		if (dt_nn_params_save(st, path) != DT_OK)
			goto fail;
	}
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "mnist: %s\n", dt_errmsg());
	rc = 1;
out:
	free(x);
	free(y);
	dt_sampler_destroy(sampler);
	dt_data_fini(&train);
	dt_nn_optim_destroy(opt);
	dt_nn_model_destroy(st);
	if (c && dt_coll_finalize(c) != DT_OK && rc == 0) {
		fprintf(stderr, "mnist: %s\n", dt_errmsg());
		rc = 1;
	}
	return rc;
}

/*
 * --elastic (docs/elastic.md): the horovod loop that goes on when a worker
 * is lost. Its state - the parameters, SGD's momentum, and where the job
 * is in the data (epoch, samples consumed) - is committed every
 * --commit-every steps; after DT_EMEMBERSHIP every rank restores the new
 * rank 0's commit and the rest of the epoch is dealt to the workers that
 * remain. The optimizer is the trainer's SGD kernel over the buffers
 * registered here (the kvstore's would keep its state out of reach), with
 * rescale_grad = 1 / the global batch of each step.
 */
typedef struct elastic_pos {
	uint64_t epoch, consumed;
} elastic_pos;

/*
 * --kvstore dist_sync: the gradients summed by the servers, a key per
 * tensor, each round's sum pulled back in place. Every request is waited
 * for even after one fails (DT_EMEMBERSHIP: its round was dropped), so
 * that none writes into the gradients later.
 */
static dt_err
elastic_ps_sum(dt_kv *kv, dt_nn_model *m)
{
	dt_kv_req reqs[64];
	int nt = dt_nn_model_num_tensors(m), sent = 0;
	dt_err err = DT_OK;

	if (nt > 64) {
		fprintf(stderr, "mnist: more than 64 tensors\n");
		return DT_EINVAL;
	}
	for (int i = 0; i < nt; i++) {
		const dt_nn_tensor *t = dt_nn_model_tensor(m, i);
		float *g = dt_nn_model_grads(m) + t->offset;

		if ((err = dt_kv_pushpull_async(kv, (dt_key)i, g, g, t->size,
		                                &reqs[i])))
			break;
		sent++;
	}
	for (int i = 0; i < sent; i++) {
		dt_err e = dt_kv_wait(kv, reqs[i]);

		if (err == DT_OK)
			err = e;
	}
	return err;
}

/* One step of the elastic loop: gradients of this rank's slice, summed
 * over the ranks (by the servers with kv), and the update. */
static dt_err
elastic_step(dt_coll *c, dt_kv *kv, const opts *o, replica *r,
             const size_t *idx, float *mom, dt_nn_optim_param *p)
{
	dt_nn_model *m = r->m;
	size_t np = dt_nn_model_num_params(m);
	dt_err err;

	r->idx = idx;
	replica_step(r);
	if (r->err) {
		fprintf(stderr, "mnist: %s\n", r->msg);
		return r->err;
	}
	if (kv ? (err = elastic_ps_sum(kv, m))
	       : (err = dt_coll_dist_opt_sum(c, dt_nn_model_grads(m), np)))
		return err;
	p->rescale_grad = 1.0 / (double)(o->batch * dt_coll_size(c));
	for (int i = 0; i < dt_nn_model_num_tensors(m); i++) {
		const dt_nn_tensor *t = dt_nn_model_tensor(m, i);

		if ((err = dt_nn_sgd_update(p, o->wd * t->wd_mult,
		                            dt_nn_model_params(m) + t->offset,
		                            dt_nn_model_grads(m) + t->offset,
		                            mom + t->offset, t->size)))
			return err;
	}
	return DT_OK;
}

static int
run_elastic(const opts *o)
{
	dt_coll *c = NULL;
	dt_kv *kv = NULL;
	dt_elastic *e = NULL;
	dt_dataset train = {0}, test = {0};
	dt_sampler *s = NULL;
	replica r = {0};
	float *mom = NULL;
	elastic_pos pos = {0};
	dt_nn_optim_param p;
	uint64_t step = 0, was;
	double t_load;
	size_t np;
	int rc = 1;
	dt_err err;

	/* The communicator first, then the data: a worker that joins a
	 * running job asks to join as its communicator is made, and is ready
	 * only at its first restore, so the members learn of it while it
	 * loads and take it in at the step it is ready. The test set is
	 * read when an epoch ends (by rank 0 then): a joiner's start is
	 * the training set's load alone. */
	/* (with servers, the store first: a server or the scheduler serves
	 * in there and exits; the communicator is made on its node) */
	if ((strcmp(o->kvstore, "dist_sync") == 0 &&
	     dt_kv_create(o->kvstore, &kv) != DT_OK) ||
	    (kv ? dt_coll_init_node(dt_kv_node(kv), &c) : dt_coll_init(&c)) !=
	        DT_OK)
		goto fail;
	t_load = now();
	if (dt_data_load_mnist_dir(o->data, 1, &train) != DT_OK)
		goto fail;
	t_load = now() - t_load;
	if (o->limit > 0 && (size_t)o->limit < train.n)
		train.n = (size_t)o->limit;
	if (dt_nn_model_create(o->model, (uint64_t)o->seed, &r.m) != DT_OK ||
	    dt_sampler_create(train.n, (size_t)o->batch, 1, 0,
	                      (uint64_t)o->seed, 1, &s) != DT_OK ||
	    dt_nn_optim_parse("sgd", NULL, &p) != DT_OK)
		goto fail;
	np = dt_nn_model_num_params(r.m);
	r.d = &train;
	r.count = (int)o->batch;
	r.x = malloc(sizeof(float) * train.dim * (size_t)o->batch);
	r.y = malloc(sizeof(float) * train.label_dim * (size_t)o->batch);
	mom = calloc(np, sizeof(float));
	if (!r.x || !r.y || !mom) {
		fprintf(stderr, "mnist: out of memory\n");
		goto out;
	}
	p.lr = o->lr;
	p.momentum = o->momentum;
	/* (a worker joining the running job gets the parameters with the
	 * members' state at its first restore) */
	if (dt_elastic_create(c, &e) != DT_OK ||
	    (!dt_elastic_joining(e) &&
	     dt_coll_broadcast(c, dt_nn_model_params(r.m), np, DT_FLOAT32,
	                       0)) ||
	    dt_elastic_register(e, "params", dt_nn_model_params(r.m),
	                        np * sizeof(float)) != DT_OK ||
	    dt_elastic_register(e, "momentum", mom, np * sizeof(float)) ||
	    dt_elastic_register(e, "position", &pos, sizeof(pos)) != DT_OK)
		goto fail;
	if (dt_elastic_joining(e))
		fprintf(stderr,
		        "mnist: joining the running job: the training set "
		        "loaded in %.3f s (%s)\n",
		        t_load,
		        train.mapped ? "mapped from the host's data cache"
		                     : "decoded");
	for (int i = 0; kv && i < dt_nn_model_num_tensors(r.m); i++) {
		const dt_nn_tensor *t = dt_nn_model_tensor(r.m, i);

		if (dt_kv_init(kv, (dt_key)i,
		               dt_nn_model_params(r.m) + t->offset,
		               t->size) != DT_OK)
			goto fail;
	}
	if (dt_coll_rank(c) == 0)
		printf("mnist: elastic, %s on %zu images, %d worker(s) x batch "
		       "%ld, sgd lr %g momentum %g, a commit every %ld steps\n",
		       o->model, train.n, dt_coll_size(c), o->batch, o->lr,
		       o->momentum, o->commit_every);
	while (pos.epoch < (uint64_t)o->epochs) {
		const size_t *idx;
		int committed = step % (uint64_t)o->commit_every == 0;

		/* (between commits: a worker that joins may be taken in at
		 * this step, which is then committed) */
		err = committed ? dt_elastic_commit(e, step)
		                : dt_elastic_poll(e, step, &committed);
		if (committed || err) {
			if (dt_elastic_left(e)) {
				rc = 0;
				goto out;
			}
			if (err == DT_EMEMBERSHIP)
				goto restore;
			if (err)
				goto fail;
			if (dt_coll_rank(c) == 0)
				printf("mnist: committed step %llu\n",
				       (unsigned long long)step);
			fflush(stdout);
		}
		if (dt_sampler_set_epoch(s, pos.epoch) != DT_OK ||
		    dt_sampler_reshard(s, dt_coll_size(c), dt_coll_rank(c),
		                       (size_t)pos.consumed) != DT_OK)
			goto fail;
		if (dt_sampler_num_batches(s) == 0) {
			if (dt_coll_rank(c) == 0 && test.n == 0 &&
			    dt_data_load_mnist_dir(o->data, 0, &test) != DT_OK)
				goto fail;
			if (dt_coll_rank(c) == 0)
				printf("Epoch[%llu] Validation-accuracy=%.6f\n",
				       (unsigned long long)pos.epoch,
				       validate(r.m, &test));
			pos.epoch++;
			pos.consumed = 0;
			continue;
		}
		if (dt_sampler_batch(s, 0, &idx) != DT_OK)
			goto fail;
		err = elastic_step(c, kv, o, &r, idx, mom, &p);
		if (err == DT_EMEMBERSHIP)
			goto restore;
		if (err)
			goto fail;
		pos.consumed += (uint64_t)(o->batch * dt_coll_size(c));
		step++;
		continue;
	restore:
		fprintf(stderr, "mnist: %s\n", dt_errmsg());
		was = step;
		if (dt_elastic_restore(e, &step) != DT_OK)
			goto fail;
		if (dt_coll_rank(c) == 0)
			printf(
			    "mnist: back to the commit of step %llu: %llu "
			    "steps to train again\n",
			    (unsigned long long)step,
			    (unsigned long long)(was > step ? was - step : 0));
	}
	if (o->save && dt_coll_rank(c) == 0 &&
	    dt_nn_params_save(r.m, o->save) != DT_OK)
		goto fail;
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "mnist: %s\n", dt_errmsg());
out:
	fflush(stdout);
	dt_elastic_destroy(e);
	dt_sampler_destroy(s);
	dt_nn_model_destroy(r.m);
	free(r.x);
	free(r.y);
	free(mom);
	dt_data_fini(&train);
	dt_data_fini(&test);
	if (c && dt_coll_finalize(c) != DT_OK && rc == 0) {
		fprintf(stderr, "mnist: %s\n", dt_errmsg());
		rc = 1;
	}
	if (kv && dt_kv_destroy(kv) != DT_OK && rc == 0) {
		fprintf(stderr, "mnist: %s\n", dt_errmsg());
		rc = 1;
	}
	return rc;
}

int
main(int argc, char **argv)
{
	opts o;
	dt_kv *kv = NULL, *updater = NULL;
	dt_coll *coll = NULL;
	dt_dataset train = {0}, test = {0};
	dt_sampler *sampler = NULL;
	replica rep[MAX_DEV] = {{0}};
	overlap ov = {0};
	float *sum = NULL;
	int horovod, rank = 0, nw = 1, nt, rc = 1;
	dt_metrics_log *mlog = NULL;
	char params[256];

	if (parse(argc, argv, &o))
		return 2;
	if (o.pipe_stages)
		return run_pipeline(&o);
	if (o.elastic)
		return run_elastic(&o);
	horovod = strcmp(o.kvstore, "horovod") == 0;

	/* Join the job first: server and scheduler processes serve and exit
	 * here (MXNet semantics), before loading any data. */
	if (horovod) {
		if (dt_coll_init(&coll) != DT_OK)
			goto fail;
		rank = dt_coll_rank(coll);
		nw = dt_coll_size(coll);
		if (dt_kv_create("local", &updater) != DT_OK)
			goto fail;
		/* Servers started for a horovod job only wait for its end. */
		const char *ns = getenv("DMLC_NUM_SERVER");
		if (rank == 0 && ns && atoi(ns) > 0)
			fprintf(stderr,
			        "mnist: warning: --kvstore horovod uses no "
			        "servers, but the job has %d (start it with "
			        "dtrain launch -s 0)\n",
			        atoi(ns));
	} else {
		if (dt_kv_create(o.kvstore, &kv) != DT_OK)
			goto fail;
		rank = dt_kv_rank(kv);
		nw = dt_kv_num_workers(kv);
		updater = kv;
	}

	if (dt_data_load_mnist_dir(o.data, 1, &train) != DT_OK ||
	    dt_data_load_mnist_dir(o.data, 0, &test) != DT_OK)
		goto fail;
	if (o.limit > 0 && (size_t)o.limit < train.n)
		train.n = (size_t)o.limit;
	if (dt_sampler_create(train.n, (size_t)o.batch, nw, rank,
	                      (uint64_t)o.seed, 1, &sampler) != DT_OK)
		goto fail;
	if (dt_sampler_num_batches(sampler) == 0) {
		fprintf(stderr,
		        "mnist: %zu images are fewer than one global "
		        "batch of %ld x %d\n",
		        train.n, o.batch, nw);
		goto out;
	}

	int ndev = (int)o.devices, per_dev = (int)(o.batch / o.devices);
	for (int d = 0; d < ndev; d++) {
		if (dt_nn_model_create(o.model, (uint64_t)o.seed, &rep[d].m) !=
		    DT_OK)
			goto fail;
		rep[d].d = &train;
		rep[d].count = per_dev;
		rep[d].x = malloc(sizeof(float) * train.dim * (size_t)per_dev);
		rep[d].y =
		    malloc(sizeof(float) * train.label_dim * (size_t)per_dev);
		if (!rep[d].x || !rep[d].y) {
			fprintf(stderr, "mnist: out of memory\n");
			goto out;
		}
	}
	dt_nn_model *m = rep[0].m;
	if (o.load && dt_nn_params_load(m, o.load) != DT_OK)
		goto fail;

	/* One key per parameter tensor, or per slice of a big one
	 * (plan_keys); the optimizer runs in the store. */
	nt = dt_nn_model_num_tensors(m);
	sum = malloc(sizeof(float) * dt_nn_model_num_params(m));
	/* (Compressed allreduces need the whole gradient at once.) */
	int overlapped =
	    ndev == 1 && !o.no_overlap && !(horovod && o.compression);
	ov.m = m;
	ov.kv = updater;
	ov.coll = horovod ? coll : NULL;
	ov.grads = overlapped ? dt_nn_model_grads(m) : sum;
	if (!sum ||
	    plan_keys(&ov, m, ov.grads,
	              dt_kv_is_dist(updater) && !o.compression,
	              kv ? dt_node_num_servers(dt_kv_node(kv)) : 1) ||
	    plan_buckets(&ov, m)) {
		fprintf(stderr, "mnist: out of memory\n");
		goto out;
	}
	int nk = ov.nk;
	dt_key *keys = ov.keys;
	float **pv = ov.pv, **gv = ov.gv;
	size_t *lens = ov.lens;
	if (set_lr(updater, &o, o.lr, nw, params, sizeof(params)) != DT_OK)
		goto fail;
	if (o.compression && horovod &&
	    (dt_coll_set_compression(coll, o.compression) != DT_OK ||
	     dt_coll_dist_opt_layout(coll, lens, nt) != DT_OK))
		goto fail;
	if (o.compression && !horovod &&
	    dt_kv_set_gradient_compression(updater, o.compression) != DT_OK)
		goto fail;
	if (o.pull_precision &&
	    dt_kv_set_pull_precision(updater, o.pull_precision) != DT_OK)
		goto fail;
	if (horovod && dt_coll_broadcast(coll, dt_nn_model_params(m),
	                                 dt_nn_model_num_params(m), DT_FLOAT32,
	                                 0) != DT_OK)
		goto fail;
	/* A worker started in a lost one's place (launch --restart) resumes
	 * at the step its predecessor reached; any other at step 0. */
	uint64_t step = 0;
	if (dt_kv_init_many(updater, (size_t)nk, keys, (const float *const *)pv,
	                    lens) != DT_OK ||
	    dt_kv_resume(updater, (size_t)nk, keys, lens, &step) != DT_OK ||
	    dt_kv_pull_many(updater, (size_t)nk, keys, pv, lens) != DT_OK)
		goto fail;
	if (dt_kv_rejoined(updater)) {
		fprintf(stderr,
		        "mnist: worker %d took a lost worker's place; resuming "
		        "at step %llu\n",
		        rank, (unsigned long long)step);
		fflush(stderr);
	}

	if (overlapped) {
		dt_nn_model_set_grad_hook(m, on_grads, &ov);
		dt_nn_model_set_param_hook(m, on_params, &ov);
		rep[0].hooked = 1;
	}
	if (o.metrics && rank == 0) {
		char label[65];

		/* Runs that differ in how they communicate get different
		 * default labels, so that dtrain plot draws them apart. */
		if (!o.label)
			snprintf(label, sizeof(label), "%s%s%s%s %dw",
			         o.kvstore, o.compression ? " " : "",
			         o.compression ? o.compression : "",
			         o.pull_precision &&
			                 strcmp(o.pull_precision, "fp32")
			             ? " pull-fp16"
			             : "",
			         nw);
		if (dt_metrics_open(o.metrics, o.label ? o.label : label,
		                    &mlog) != DT_OK)
			goto fail;
	}
	if (rank == 0) {
		const char *tr = getenv("DTRAIN_TRANSPORT");

		printf("mnist: %s on %zu images, %d worker(s) x batch %ld x %d "
		       "device(s), kvstore %s, %s %s%s\n",
		       o.model, train.n, nw, o.batch, ndev, o.kvstore,
		       o.optimizer, params,
		       overlapped
		           ? (horovod ? ", allreduce during backward"
		                      : ", push per layer during backward")
		           : "");
		/* How the job communicates, said once at the start. */
		printf("mnist: kvstore %s, gradient compression %s, pull "
		       "precision %s, transport %s\n",
		       o.kvstore, o.compression ? o.compression : "none",
		       horovod            ? "(no pulls)"
		       : o.pull_precision ? o.pull_precision
		                          : "fp32",
		       tr ? tr : "auto");
	}
	fflush(stdout);

	size_t nb = dt_sampler_num_batches(sampler);
	double acc = 0;
	long ep0 = (long)(step / nb); /* (the epoch and batch of that step) */
	size_t b0 = (size_t)(step % nb);
	for (long ep = ep0; ep < o.epochs; ep++) {
		dt_metric metric, ep_metric;
		dt_speedometer sp;
		double t0 = now(), tcomm = 0;

		dt_metric_init(&metric, "accuracy");
		dt_metric_init(&ep_metric, "accuracy");
		dt_speedometer_init(&sp, (size_t)o.batch, o.disp, stdout);
		if (dt_sampler_set_epoch(sampler, (uint64_t)ep) != DT_OK)
			goto fail;
		for (size_t b = ep == ep0 ? b0 : 0; b < nb; b++) {
			const size_t *idx;
			pthread_t th[MAX_DEV];
			int correct = 0;
			uint64_t t_step = dt_obs_now(), t_comm;

			if (dt_sampler_batch(sampler, b, &idx) != DT_OK)
				goto fail;
			for (int d = 0; d < ndev; d++) {
				if (d > 0)
					dt_nn_model_copy_params(rep[d].m, m);
				rep[d].idx = idx + (size_t)d * (size_t)per_dev;
				if (d > 0 &&
				    pthread_create(&th[d], NULL, replica_step,
				                   &rep[d]) != 0)
					replica_step(&rep[d]), th[d] = 0;
			}
			ov.next = 0;
			ov.waited = 0;
			replica_step(&rep[0]);
			for (int d = 1; d < ndev; d++)
				if (th[d])
					pthread_join(th[d], NULL);
			tcomm += ov.waited;
			double tc = now();
			t_comm = dt_obs_now();
			/* (The step's communication is waited for in the
			 * next forward pass, layer by layer.) */
			if (overlapped && ov.err) {
				fprintf(stderr, "mnist: %s\n", ov.msg);
				goto out;
			}
			for (int d = 0; d < ndev; d++) {
				if (rep[d].err) {
					fprintf(stderr, "mnist: %s\n",
					        rep[d].msg);
					goto out;
				}
				correct += rep[d].correct;
			}
			if (!overlapped) {
				/* Sum the devices' gradients (local
				 * aggregation). */
				size_t np = dt_nn_model_num_params(m);
				memcpy(sum, dt_nn_model_grads(m),
				       np * sizeof(float));
				for (int d = 1; d < ndev; d++) {
					const float *g =
					    dt_nn_model_grads(rep[d].m);
					for (size_t i = 0; i < np; i++)
						sum[i] += g[i];
				}
				tc = now();
				t_comm = dt_obs_now();
				if (horovod && o.compression &&
				    dt_coll_dist_opt_sum(coll, sum, np) !=
				        DT_OK)
					goto fail;
				if (horovod && !o.compression) {
					for (int j = 0; j < ov.nb; j++)
						start_bucket(&ov, j);
					if (overlap_finish(&ov) != DT_OK) {
						fprintf(stderr, "mnist: %s\n",
						        ov.msg);
						goto out;
					}
				}
				if (dt_kv_pushpull_many(
				        updater, (size_t)nk, keys,
				        (const float *const *)gv, pv,
				        lens) != DT_OK)
					goto fail;
			}
			tcomm += now() - tc;
			dt_obs_phase(DT_PHASE_COMM, t_comm);
			dt_metric_add(&metric, correct, (double)o.batch);
			dt_metric_add(&ep_metric, correct, (double)o.batch);
			double train_acc = dt_metric_get(&metric);
			int printed;
			dt_speedometer_update(&sp, (int)ep, (long)b, &metric,
			                      &printed);
			dt_obs_phase(DT_PHASE_STEP, t_step);
			if (printed && mlog) {
				dt_metrics_rec r = {
				    (int)ep,   (long)b, sp.speed, "accuracy",
				    train_acc, NAN,     NAN,      NAN,
				    tcomm,     -1};
				if (dt_metrics_write(mlog, &r) != DT_OK)
					goto fail;
			}
		}
		/* The last step's new parameters, before anything reads
		 * them or changes the optimizer. */
		double tf = now();

		if (overlap_finish(&ov) != DT_OK) {
			fprintf(stderr, "mnist: %s\n", ov.msg);
			goto out;
		}
		tcomm += now() - tf;
		double ttrain = now() - t0;
		if (o.lr_factor != 1.0 && ep + 1 < o.epochs &&
		    set_lr(updater, &o,
		           o.lr * pow(o.lr_factor, (double)(ep + 1)), nw,
		           params, sizeof(params)) != DT_OK)
			goto fail;
		if (rank == 0) {
			acc = validate(m, &test);
			printf(
			    "Epoch[%ld] Time cost=%.3f (communication %.3f)\n",
			    ep, ttrain, tcomm);
			printf("Epoch[%ld] Validation-accuracy=%.6f\n", ep,
			       acc);
			fflush(stdout);
			dt_metrics_rec r = {
			    (int)ep,
			    -1,
			    ttrain > 0 ? (double)(nb - (ep == ep0 ? b0 : 0)) *
			                     (double)o.batch / ttrain
			               : -1,
			    "accuracy",
			    dt_metric_get(&ep_metric),
			    acc,
			    NAN,
			    NAN,
			    tcomm,
			    -1};
			if (mlog && dt_metrics_write(mlog, &r) != DT_OK)
				goto fail;
		}
	}
	if (o.save && rank == 0 && dt_nn_params_save(m, o.save) != DT_OK)
		goto fail;
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "mnist: %s\n", dt_errmsg());
	rc = 1;
out:
	for (int d = 0; d < MAX_DEV; d++) {
		dt_nn_model_destroy(rep[d].m);
		free(rep[d].x);
		free(rep[d].y);
	}
	if (dt_metrics_close(mlog) != DT_OK && rc == 0) {
		fprintf(stderr, "mnist: %s\n", dt_errmsg());
		rc = 1;
	}
	dt_sampler_destroy(sampler);
	dt_data_fini(&train);
	dt_data_fini(&test);
	overlap_free(&ov);
	free(sum);
	if (horovod)
		dt_kv_destroy(updater);
	if (kv && dt_kv_destroy(kv) != DT_OK && rc == 0) {
		fprintf(stderr, "mnist: %s\n", dt_errmsg());
		rc = 1;
	}
	if (coll && dt_coll_finalize(coll) != DT_OK && rc == 0) {
		fprintf(stderr, "mnist: %s\n", dt_errmsg());
		rc = 1;
	}
	return rc;
}
