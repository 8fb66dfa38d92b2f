/*
 * sparse_linear.c - logistic regression on hashed sparse features through
 * a row_sparse KVStore table: the click-through workload a parameter
 * server is built for (MXNet's sparse linear classification example).
 *
 *   build/examples/sparse_linear --kvstore local
 *   dtrain launch -n 2 -s 2 -- build/examples/sparse_linear \
 *       --kvstore dist_async --metrics sparse.jsonl
 *
 * The data set is synthetic and the same on every worker (a fixed seed):
 * 2^F hashed feature weights drawn once (the true model), each example
 * ~40 active binary features - a few from a small hot set, the rest from
 * the whole space with a skew towards low ids, hashed over it - plus a bias
 * feature; its label is drawn from sigmoid(true margin). The true
 * weights' log-loss and accuracy on the test set are the target.
 *
 * The weights are one table of 2^F + 1 rows of width 1 (the last row the
 * bias). Each step a worker takes its slice of the global batch, finds the
 * rows its examples touch, pulls those rows (row_sparse_pull), computes
 * the logistic loss's gradient for just those rows and pushes them; the
 * store runs the optimizer (adam with lazy updates by default) on the
 * pushed rows only. Speedometer lines report training accuracy and
 * log-loss; rank 0 evaluates the test set at the end of each epoch and,
 * with --metrics FILE, writes both as JSON lines (docs/observability.md).
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/kv.h"
#include "dtrain/nn.h"
#include "dtrain/obs.h"

#define DT_MIN(a, b) ((a) < (b) ? (a) : (b))

typedef struct opts {
	const char *kvstore, *optimizer, *metrics, *label;
	long log2_features, nnz, train, test, batch, epochs, seed, disp;
	double lr;
} opts;

typedef struct dataset {
	size_t n, nnz;  /* examples, features each (the bias included) */
	uint32_t *feat; /* n x nnz row ids */
	float *label;
	float *margin; /* the true model's */
} dataset;

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t
mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

/* Uniform in [0, 1) from a hash. */
static double
unif(uint64_t h)
{
	return (double)(mix(h) >> 11) * (1.0 / 9007199254740992.0);
}

/* The true weight of the feature of popularity rank r (0: the most
 * common; bias: D): roughly normal, the common features telling more
 * than the rare ones, as in click logs. */
static float
true_weight(uint64_t seed, uint64_t r, uint64_t D)
{
	if (r == D)
		return -0.5f;
	double s = unif(seed ^ (r * 4 + 1)) + unif(seed ^ (r * 4 + 2)) +
	           unif(seed ^ (r * 4 + 3)) - 1.5;
	return (float)(s * (r < D / 256 ? 1.2 : 0.2));
}

static float
sigmoidf(float z)
{
	return z >= 0 ? 1.f / (1.f + expf(-z)) : expf(z) / (1.f + expf(z));
}

/* Examples [first, first + n) of the stream seeded by seed. */
static int
make_data(dataset *d, uint64_t seed, uint64_t first, size_t n, size_t nnz,
          uint64_t D)
{
	d->n = n;
	d->nnz = nnz + 1;
	d->feat = malloc(n * d->nnz * sizeof(*d->feat));
	d->label = malloc(n * sizeof(*d->label));
	d->margin = malloc(n * sizeof(*d->margin));
	if (d->feat == NULL || d->label == NULL || d->margin == NULL)
		return -1;
	for (size_t i = 0; i < n; i++) {
		uint64_t e = (first + i) * 131ull + 7;
		uint32_t *f = d->feat + i * d->nnz;
		float margin = 0;

		for (size_t s = 0; s < nnz; s++) {
			double u = unif(seed ^ mix(e * 1024 + s));
			uint64_t r;

			if (s < 4) /* hot features: 4 of 1024 */
				r = (uint64_t)(u * 1024);
			else /* log-uniform over the space, then hashed */
				r = DT_MIN(
				    (uint64_t)(1000.0 *
				               (pow(1.0 + (double)D / 1000.0,
				                    u) -
				                1.0)),
				    D - 1);
			f[s] = (uint32_t)(s < 4 ? r : mix(r ^ 0x5bd1e995) % D);
			margin += true_weight(seed, r, D);
		}
		f[nnz] = (uint32_t)D; /* the bias */
		margin += true_weight(seed, D, D);
		d->margin[i] = margin;
		d->label[i] =
		    unif(seed ^ mix(e * 1024 + 1023)) < sigmoidf(margin) ? 1.f
		                                                         : 0.f;
	}
	return 0;
}

/* A batch's rows: the unique ids of its examples' features (sorted), and
 * for each feature slot its row's index among them. */
typedef struct batch_rows {
	uint64_t *ids;
	uint32_t *slot;  /* n x nnz: index into ids */
	uint64_t *pairs; /* scratch: (id << 32 | position) */
	size_t nids;
} batch_rows;

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static void
rows_of(batch_rows *br, const dataset *d, const size_t *idx, size_t n)
{
	size_t m = n * d->nnz, u = 0;

	for (size_t i = 0; i < n; i++)
		for (size_t s = 0; s < d->nnz; s++)
			br->pairs[i * d->nnz + s] =
			    (uint64_t)d->feat[idx[i] * d->nnz + s] << 32 |
			    (uint64_t)(i * d->nnz + s);
	qsort(br->pairs, m, sizeof(*br->pairs), cmp_u64);
	for (size_t k = 0; k < m; k++) {
		uint64_t id = br->pairs[k] >> 32;

		if (u == 0 || br->ids[u - 1] != id)
			br->ids[u++] = id;
		br->slot[br->pairs[k] & 0xffffffffu] = (uint32_t)(u - 1);
	}
	br->nids = u;
}

/* Log-loss (summed) and correct predictions of weights w (by slot). */
static void
score(const dataset *d, const size_t *idx, size_t n, const uint32_t *slot,
      const float *w, float *p, double *loss, int *correct)
{
	for (size_t i = 0; i < n; i++) {
		float z = 0, y = d->label[idx[i]];

		for (size_t s = 0; s < d->nnz; s++)
			z += w[slot[i * d->nnz + s]];
		p[i] = sigmoidf(z);
		*loss -= y > 0.5f ? log(fmax(p[i], 1e-12))
		                  : log(fmax(1.0 - p[i], 1e-12));
		*correct += (p[i] >= 0.5f) == (y > 0.5f);
	}
}

/* The whole table (rows x 1) from the store, pulled a slice of rows at
 * a time, into path as one tensor "weight" of the parameter-file format:
 * two runs' files compare with `dtrain params diff`. */
static dt_err
save_table(dt_kv *kv, uint64_t rows, const char *path)
{
	enum { SLICE = 65536 };
	uint64_t *ids = malloc(SLICE * sizeof(*ids));
	float *all = malloc(rows * sizeof(*all));
	dt_nn_tensor t = {.name = "weight",
	                  .size = (size_t)rows,
	                  .ndim = 1,
	                  .shape = {(int)rows}};
	dt_err err = DT_OK;

	if (ids == NULL || all == NULL) {
		free(ids);
		free(all);
		fprintf(stderr, "sparse_linear: out of memory saving %s\n",
		        path);
		return DT_ENOMEM;
	}
	for (uint64_t r0 = 0; r0 < rows && err == DT_OK; r0 += SLICE) {
		size_t n = rows - r0 < SLICE ? (size_t)(rows - r0) : SLICE;

		for (size_t i = 0; i < n; i++)
			ids[i] = r0 + i;
		err = dt_kv_row_sparse_pull(kv, 0, n, ids, all + r0, 1);
	}
	if (err == DT_OK)
		err = dt_nn_params_write(path, &t, 1, all);
	free(ids);
	free(all);
	return err;
}

static void
usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: sparse_linear [options]\n"
	    "  --kvstore TYPE        local, dist_sync, dist_async (local)\n"
	    "  --features-log2 F     2^F hashed weights, 20..24 (20)\n"
	    "  --nnz N               active features an example (40)\n"
	    "  --train N             training examples (200000)\n"
	    "  --test N              test examples (20000)\n"
	    "  --batch-size N        examples a worker's step (512)\n"
	    "  --epochs N            (3)\n"
	    "  --optimizer NAME      adam or sgd (adam)\n"
	    "  --lr X                learning rate (0.003)\n"
	    "  --seed N              the data set's seed (1)\n"
	    "  --disp-batches N      Speedometer interval (50)\n"
	    "  --metrics FILE        rank 0 logs progress as JSON lines\n"
	    "  --run-label L         the run's name in the log (the\n"
	    "                        kvstore type and worker count)\n"
	    "  --save FILE           rank 0 writes the table at the end as\n"
	    "                        a parameter file (dtrain params diff)\n");
}

#define CHECK(call)                                                            \
	do {                                                                   \
		dt_err e_ = (call);                                            \
		if (e_ != DT_OK) {                                             \
			fprintf(stderr, "sparse_linear: %s: %s\n", #call,      \
			        dt_errmsg());                                  \
			return 1;                                              \
		}                                                              \
	} while (0)

int
main(int argc, char **argv)
{
	opts o = {"local", "adam", NULL, NULL, 20, 40,   200000,
	          20000,   512,    3,    1,    50, 0.003};
	const char *save = NULL; /* --save FILE */
	static const struct option longopts[] = {
	    {"kvstore", required_argument, 0, 'k'},
	    {"features-log2", required_argument, 0, 'F'},
	    {"nnz", required_argument, 0, 'z'},
	    {"train", required_argument, 0, 'n'},
	    {"test", required_argument, 0, 't'},
	    {"batch-size", required_argument, 0, 'b'},
	    /* The old spelling; the other examples say --batch-size. */
	    {"batch", required_argument, 0, 'B'},
	    {"epochs", required_argument, 0, 'e'},
	    {"optimizer", required_argument, 0, 'o'},
	    {"lr", required_argument, 0, 'l'},
	    {"seed", required_argument, 0, 's'},
	    {"disp-batches", required_argument, 0, 'd'},
	    {"metrics", required_argument, 0, 'T'},
	    {"run-label", required_argument, 0, 'N'},
	    {"help", no_argument, 0, 'h'},
	    {"save", required_argument, 0, 'S'},
	    {0, 0, 0, 0}};
	int c;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'k':
			o.kvstore = optarg;
			break;
		case 'F':
			o.log2_features = atol(optarg);
			break;
		case 'z':
			o.nnz = atol(optarg);
			break;
		case 'n':
			o.train = atol(optarg);
			break;
		case 't':
			o.test = atol(optarg);
			break;
		case 'B':
			fputs("sparse_linear: --batch is now --batch-size "
			      "(as in the other examples)\n",
			      stderr);
			/* fall through */
		case 'b':
			o.batch = atol(optarg);
			break;
		case 'e':
			o.epochs = atol(optarg);
			break;
		case 'o':
			o.optimizer = optarg;
			break;
		case 'l':
			o.lr = atof(optarg);
			break;
		case 's':
			o.seed = atol(optarg);
			break;
		case 'd':
			o.disp = atol(optarg);
			break;
		case 'T':
			o.metrics = optarg;
			break;
		case 'N':
			o.label = optarg;
			break;
		case 'S':
			save = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (o.log2_features < 10 || o.log2_features > 24 || o.nnz < 1 ||
	    o.nnz > 1000 || o.train < 1 || o.test < 1 || o.batch < 1 ||
	    o.epochs < 1 || o.disp < 1 || !(o.lr > 0)) {
		usage(stderr);
		return 2;
	}

	dt_kv *kv;
	CHECK(dt_kv_create(o.kvstore, &kv));
	int rank = dt_kv_rank(kv), nw = dt_kv_num_workers(kv);
	int sync = strcmp(o.kvstore, "dist_async") != 0;
	uint64_t D = (uint64_t)1 << o.log2_features, seed = (uint64_t)o.seed;
	dataset train, test;

	if (make_data(&train, seed, 0, (size_t)o.train, (size_t)o.nnz, D) ||
	    make_data(&test, seed, (uint64_t)o.train, (size_t)o.test,
	              (size_t)o.nnz, D)) {
		fprintf(stderr, "sparse_linear: out of memory for the data\n");
		return 1;
	}
	/* The optimizer in the store: a dist_sync round sums every worker's
	 * batch, a dist_async push is one worker's. */
	char params[128];
	snprintf(params, sizeof(params), "lr=%g,rescale_grad=%.9g", o.lr,
	         1.0 / (double)(o.batch * (sync ? nw : 1)));
	CHECK(dt_kv_set_optimizer(kv, o.optimizer, params));
	CHECK(dt_kv_init_row_sparse(kv, 0, D + 1, 1, NULL));
	/* A worker started in a lost one's place (launch --restart) resumes
	 * at the step its predecessor reached; any other at step 0. */
	dt_key tkey = 0;
	size_t tlen = (size_t)(D + 1);
	uint64_t step = 0;
	CHECK(dt_kv_resume(kv, 1, &tkey, &tlen, &step));
	if (dt_kv_rejoined(kv)) {
		fprintf(stderr,
		        "sparse_linear: worker %d took a lost worker's place; "
		        "resuming at step %llu\n",
		        rank, (unsigned long long)step);
		fflush(stderr);
	}

	size_t m = (size_t)o.batch * train.nnz;
	batch_rows br = {malloc(m * 8), malloc(m * 4), malloc(m * 8), 0};
	float *w = malloc(m * 4), *g = malloc(m * 4), *p = malloc(o.batch * 4);
	dt_sampler *smp;
	CHECK(dt_sampler_create(train.n, (size_t)o.batch, nw, rank, seed, 1,
	                        &smp));
	size_t nb = dt_sampler_num_batches(smp);
	if (!br.ids || !br.slot || !br.pairs || !w || !g || !p || nb == 0) {
		fprintf(stderr, "sparse_linear: out of memory, or fewer "
		                "examples than one global batch\n");
		return 1;
	}
	/* The target: the true weights on the test set. */
	if (rank == 0) {
		double tl = 0;
		int tc = 0;

		for (size_t i = 0; i < test.n; i++) {
			float y = test.label[i], q = sigmoidf(test.margin[i]);

			tl -= y > 0.5f ? log(fmax(q, 1e-12))
			               : log(fmax(1.0 - q, 1e-12));
			tc += (q >= 0.5f) == (y > 0.5f);
		}
		printf("sparse_linear: %s, %d worker(s), 2^%ld weights, %ld "
		       "features an example, %zu batches an epoch\n",
		       o.kvstore, nw, o.log2_features, o.nnz, nb);
		double pos = 0;
		for (size_t i = 0; i < test.n; i++)
			pos += test.label[i];
		pos /= (double)test.n;
		printf("target (the true weights on the test set): log-loss "
		       "%.4f accuracy %.4f (the majority class alone: "
		       "accuracy %.4f)\n",
		       tl / (double)test.n, (double)tc / (double)test.n,
		       pos > 0.5 ? pos : 1 - pos);
	}
	dt_metrics_log *mlog = NULL;
	if (o.metrics && rank == 0) {
		char name[65];

		snprintf(name, sizeof(name), "%s %dw", o.kvstore, nw);
		CHECK(dt_metrics_open(o.metrics, o.label ? o.label : name,
		                      &mlog));
	}
	dt_speedometer sp;
	dt_metric acc;
	CHECK(dt_metric_init(&acc, "accuracy"));
	for (long ep = (long)(step / nb); ep < o.epochs; ep++) {
		double eloss = 0, wloss = 0, tcomm = 0, t0 = now();
		size_t eseen = 0, wseen = 0;
		long ecorrect = 0;

		CHECK(dt_sampler_set_epoch(smp, (uint64_t)ep));
		CHECK(dt_speedometer_init(&sp, (size_t)o.batch, o.disp,
		                          rank == 0 ? stdout : NULL));
		/* (the resumed epoch from the resumed step's batch) */
		size_t b0 = (uint64_t)ep == step / nb ? (size_t)(step % nb) : 0;
		for (size_t b = b0; b < nb; b++) {
			const size_t *idx;
			double loss = 0, tc;
			int correct = 0, printed;
			uint64_t t_step = dt_obs_now(), t_comm;

			CHECK(dt_sampler_batch(smp, b, &idx));
			rows_of(&br, &train, idx, (size_t)o.batch);
			tc = now();
			t_comm = dt_obs_now();
			CHECK(dt_kv_row_sparse_pull(kv, 0, br.nids, br.ids, w,
			                            1));
			dt_obs_phase(DT_PHASE_COMM, t_comm);
			tcomm += now() - tc;
			score(&train, idx, (size_t)o.batch, br.slot, w, p,
			      &loss, &correct);
			/* d loss / d w_row = sum over the row's slots of
			 * (p - y) */
			memset(g, 0, br.nids * sizeof(float));
			for (size_t i = 0; i < (size_t)o.batch; i++)
				for (size_t s = 0; s < train.nnz; s++)
					g[br.slot[i * train.nnz + s]] +=
					    p[i] - train.label[idx[i]];
			tc = now();
			t_comm = dt_obs_now();
			CHECK(dt_kv_push_row_sparse(kv, 0, br.nids, br.ids, g,
			                            1));
			dt_obs_phase(DT_PHASE_COMM, t_comm);
			tcomm += now() - tc;
			dt_metric_add(&acc, correct, (double)o.batch);
			eloss += loss;
			wloss += loss;
			ecorrect += correct;
			eseen += (size_t)o.batch;
			wseen += (size_t)o.batch;
			double train_acc = dt_metric_get(&acc);
			CHECK(dt_speedometer_update(&sp, (int)ep, (long)b, &acc,
			                            &printed));
			dt_obs_phase(DT_PHASE_STEP, t_step);
			if (printed && mlog) {
				dt_metrics_rec r = {(int)ep,
				                    (long)b,
				                    sp.speed,
				                    "accuracy",
				                    train_acc,
				                    NAN,
				                    wloss / (double)wseen,
				                    NAN,
				                    tcomm,
				                    -1};
				CHECK(dt_metrics_write(mlog, &r));
			}
			if (printed) {
				wloss = 0;
				wseen = 0;
			}
		}
		double ttrain = now() - t0;
		dt_metric_reset(&acc);
		CHECK(dt_kv_barrier(kv));
		if (rank != 0)
			continue;
		/* The test set with the store's weights (rows pulled per
		 * batch of examples). */
		double tl = 0;
		int tc = 0;
		size_t *all = malloc(test.n * sizeof(*all));
		if (all == NULL) {
			fprintf(stderr, "sparse_linear: out of memory\n");
			return 1;
		}
		for (size_t i = 0; i < test.n; i++)
			all[i] = i;
		for (size_t i0 = 0; i0 < test.n; i0 += (size_t)o.batch) {
			size_t n = test.n - i0 < (size_t)o.batch
			               ? test.n - i0
			               : (size_t)o.batch;

			rows_of(&br, &test, all + i0, n);
			CHECK(dt_kv_row_sparse_pull(kv, 0, br.nids, br.ids, w,
			                            1));
			score(&test, all + i0, n, br.slot, w, p, &tl, &tc);
		}
		free(all);
		printf("Epoch[%ld] Train-log-loss=%.4f (this worker)  "
		       "Test-log-loss=%.4f Test-accuracy=%.4f\n",
		       ep, eloss / (double)eseen, tl / (double)test.n,
		       (double)tc / (double)test.n);
		fflush(stdout);
		dt_metrics_rec r = {(int)ep,
		                    -1,
		                    ttrain > 0 ? (double)eseen / ttrain : -1,
		                    "accuracy",
		                    (double)ecorrect / (double)eseen,
		                    (double)tc / (double)test.n,
		                    eloss / (double)eseen,
		                    tl / (double)test.n,
		                    tcomm,
		                    -1};
		if (mlog)
			CHECK(dt_metrics_write(mlog, &r));
	}
	CHECK(dt_metrics_close(mlog));
	CHECK(dt_kv_barrier(kv));
	if (save && rank == 0)
		CHECK(save_table(kv, D + 1, save));
	dt_sampler_destroy(smp);
	free(br.ids);
	free(br.slot);
	free(br.pairs);
	free(w);
	free(g);
	free(p);
	free(train.feat);
	free(train.label);
	free(train.margin);
	free(test.feat);
	free(test.label);
	free(test.margin);
	CHECK(dt_kv_destroy(kv));
	return 0;
}
