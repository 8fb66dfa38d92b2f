/*
 * kv_check.c - checks the KVStore end to end; run one copy per worker under
 * `dtrain launch` (tests/integration/kv_*.sh).
 *
 *   kv_check sum     dist_sync without an optimizer: init (rank 0 wins),
 *                    exact sums, pushpull, a second push in one round,
 *                    sizes 1, 7, 1000, bound-1, bound, 3*bound+1, and
 *                    every error case (the store keeps serving after each)
 *   kv_check sgd     dist_sync with sgd on the servers vs a reference
 *   kv_check adam    dist_sync with adam on the servers vs a reference
 *   kv_check async   dist_async: every push applied exactly once
 *                    (KV_CHECK_PUSHES of them per worker, default 50)
 *   kv_check local   the same sums through a "local" store (1 process)
 *   kv_check huge    the sums on one array of 2^28 + 3 floats (over 1 GiB)
 *   kv_check comp SPEC [fp16]
 *                    gradient compression SPEC (fp16, 2bit:T, 1bit...),
 *                    pulls in fp16 if asked: every round's value equals
 *                    the sum of what each worker's codec sent (computed
 *                    here by running every rank's encoder, residuals and
 *                    the servers' split included), bit for bit; a second
 *                    push in one round; sizes up to a key split over the
 *                    servers. KV_CHECK_TYPE=dist_async (sgd, lr 1: the
 *                    value is minus every decoded push) or local.
 *   kv_check half    multi-precision: fp16 arrays on the workers, sgd with
 *                    momentum on the servers' fp32 master; every pushpull
 *                    returns the halves of the master a reference computes
 *                    here (same kernels), and an fp32 pull the master
 *                    itself, bit for bit (KV_CHECK_TYPE=local too)
 *   kv_check ckpt FROM TO [C1,C2,...]
 *                    dist_sync with sgd (momentum) on a small key and a
 *                    key split over the servers: pull, then steps FROM..TO-1
 *                    of pushpull, a dt_kv_checkpoint after each step
 *                    listed in C; prints "at step S: <hash>" after the
 *                    pull, at each checkpoint and at the end (rank 0), so
 *                    that a job restored from a checkpoint
 *                    (DTRAIN_CHECKPOINT_LOAD=1) is compared with the job
 *                    that wrote it, bit for bit; KV_CHECK_MANY=M adds
 *                    keys of batched calls (the many-key store),
 *                    KV_CHECK_PROGRESS a line after each step; a
 *                    worker in a lost one's place resumes (dt_kv_resume)
 *
 * Inputs are small integers so that sums are exact in float32.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/kv.h"
#include "kv/kv_impl.h"

static int failures;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr,                                        \
			        "kv_check FAILED at line %d: ", __LINE__);     \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, "\n");                                 \
			failures++;                                            \
		}                                                              \
	} while (0)

#define OK(call)                                                               \
	do {                                                                   \
		dt_err e_ = (call);                                            \
		if (e_ != DT_OK) {                                             \
			fprintf(stderr,                                        \
			        "kv_check: %s failed at line %d: %s\n", #call, \
			        __LINE__, dt_errmsg());                        \
			exit(1);                                               \
		}                                                              \
	} while (0)

static float
grad(int rank, int round, size_t i)
{
	return (float)((rank + 1) * (int)(i % 7 + 1) + round);
}

static void
check_sum(dt_kv *kv, dt_key key, size_t n)
{
	int rank = dt_kv_rank(kv), nw = dt_kv_num_workers(kv);
	float *v = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
	dt_kv_req r1, r2;

	/* init: rank 0's value wins, whatever the others pass. */
	for (size_t i = 0; i < n; i++)
		v[i] = rank == 0 ? (float)(key + i % 1000) : -1.0f;
	OK(dt_kv_init(kv, key, v, n));
	OK(dt_kv_pull(kv, key, out, n));
	for (size_t i = 0; i < n; i++)
		if (out[i] != (float)(key + i % 1000)) {
			CHECK(0, "key %llu n=%zu: init value [%zu] = %g",
			      (unsigned long long)key, n, i, out[i]);
			break;
		}
	/* round 0: push then pull gives the exact sum */
	for (size_t i = 0; i < n; i++)
		v[i] = grad(rank, 0, i);
	OK(dt_kv_push(kv, key, v, n));
	OK(dt_kv_pull(kv, key, out, n));
	for (size_t i = 0; i < n; i++) {
		float want = 0;
		for (int r = 0; r < nw; r++)
			want += grad(r, 0, i);
		if (out[i] != want) {
			CHECK(0, "key %llu n=%zu: sum [%zu] = %g, want %g",
			      (unsigned long long)key, n, i, out[i], want);
			break;
		}
	}
	/* rounds 1 and 2 in flight at once from each worker: the second
	 * push must wait for the next round, never count as a worker. */
	float *v2 = malloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++) {
		v[i] = grad(rank, 1, i);
		v2[i] = grad(rank, 2, i);
	}
	OK(dt_kv_push_async(kv, key, v, n, &r1));
	OK(dt_kv_pushpull_async(kv, key, v2, out, n, &r2));
	OK(dt_kv_wait(kv, r1));
	OK(dt_kv_wait(kv, r2));
	for (size_t i = 0; i < n; i++) {
		float want = 0;
		for (int r = 0; r < nw; r++)
			want += grad(r, 2, i);
		if (out[i] != want) {
			CHECK(0,
			      "key %llu n=%zu: round-2 sum [%zu] = %g, want "
			      "%g",
			      (unsigned long long)key, n, i, out[i], want);
			break;
		}
	}
	free(v);
	free(v2);
	free(out);
}

static void
check_errors(dt_kv *kv)
{
	float v[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
	dt_err err;

	err = dt_kv_pull(kv, 424242, out, 8);
	CHECK(err == DT_ENOKEY && strstr(dt_errmsg(), "key 424242"),
	      "pull of an unknown key: %s (%s)", dt_errname(err), dt_errmsg());
	err = dt_kv_push(kv, 424242, v, 8);
	CHECK(err == DT_ENOKEY, "push before init: %s (%s)", dt_errname(err),
	      dt_errmsg());
	OK(dt_kv_init(kv, 777, v, 8));
	err = dt_kv_push(kv, 777, v, 5);
	CHECK(err == DT_ESIZE && strstr(dt_errmsg(), "key 777") &&
	          strstr(dt_errmsg(), "length 5 != initialised length 8"),
	      "push of a wrong length: %s (%s)", dt_errname(err), dt_errmsg());
	err = dt_kv_init(kv, 777, v, 6);
	CHECK(err == DT_ESIZE && strstr(dt_errmsg(), "key 777"),
	      "init with another length: %s (%s)", dt_errname(err),
	      dt_errmsg());
	err = dt_kv_pull(kv, 777, out, 9);
	CHECK(err == DT_ESIZE, "pull of a wrong length: %s (%s)",
	      dt_errname(err), dt_errmsg());
	/* Re-init: collective, so no worker returns before rank 0's new
	 * value is in (it used to be read stale half of the time). */
	for (int t = 0; t < 20; t++) {
		float nv[8];

		for (int i = 0; i < 8; i++)
			nv[i] =
			    dt_kv_rank(kv) == 0 ? (float)(1000 * t + i) : -1.0f;
		OK(dt_kv_init(kv, 777, nv, 8));
		OK(dt_kv_pull(kv, 777, out, 8));
		CHECK(out[0] == (float)(1000 * t) &&
		          out[7] == (float)(1000 * t + 7),
		      "re-init %d: read %g %g, not rank 0's new value", t,
		      out[0], out[7]);
		OK(dt_kv_barrier(kv)); /* (before rank 0 sets the next) */
	}
	/* A refusal on rank 0 (another optimizer once keys exist) is every
	 * worker's error, and no worker hangs. */
	err = dt_kv_set_optimizer(kv, "sgd", "lr=0.1");
	CHECK(err == DT_ESTATE && strstr(dt_errmsg(), "worker 0") &&
	          strstr(dt_errmsg(), "another optimizer"),
	      "set_optimizer refused: %s (%s)", dt_errname(err), dt_errmsg());
	/* ...and the store still serves. */
	OK(dt_kv_barrier(kv));
	OK(dt_kv_init(kv, 777, v, 8));
	OK(dt_kv_pushpull(kv, 777, v, out, 8));
	CHECK(out[7] == 8.0f * (float)dt_kv_num_workers(kv),
	      "store after errors: %g", out[7]);
}

/* The server-side optimizer against the same formula computed here. */
static void
check_optimizer(dt_kv *kv, const char *name)
{
	int rank = dt_kv_rank(kv), nw = dt_kv_num_workers(kv);
	const size_t n = 1003;
	float w[1003], ref[1003], g[1003], m[1003] = {0}, vv[1003] = {0},
	                                   out[1003];
	const double lr = 0.05, mom = 0.9, wd = 0.01, rescale = 0.25, clip = 20;
	char params[256];

	if (strcmp(name, "sgd") == 0)
		snprintf(params, sizeof(params),
		         "lr=%g,momentum=%g,wd=%g,rescale_grad=%g,"
		         "clip_gradient=%g",
		         lr, mom, wd, rescale, clip);
	else
		snprintf(params, sizeof(params),
		         "lr=%g,wd=%g,rescale_grad=%g,beta1=0.9,beta2=0.999,"
		         "epsilon=1e-8",
		         lr, wd, rescale);
	OK(dt_kv_set_optimizer(kv, name, params));
	for (size_t i = 0; i < n; i++)
		w[i] = ref[i] = (float)((int)(i % 13) - 6) * 0.1f;
	OK(dt_kv_init(kv, 5, w, n));
	for (int t = 1; t <= 4; t++) {
		for (size_t i = 0; i < n; i++)
			g[i] = grad(rank, t, i);
		OK(dt_kv_pushpull(kv, 5, g, out, n));
		for (size_t i = 0; i < n; i++) {
			float s = 0;
			for (int r = 0; r < nw; r++)
				s += grad(r, t, i);
			float gi = s * (float)rescale;
			if (strcmp(name, "sgd") == 0) {
				gi = gi > clip ? (float)clip : gi;
				gi = gi < -clip ? (float)-clip : gi;
				gi += (float)wd * ref[i];
				m[i] = (float)mom * m[i] - (float)lr * gi;
				ref[i] += m[i];
			} else {
				gi += (float)wd * ref[i];
				m[i] = 0.9f * m[i] + 0.1f * gi;
				vv[i] = 0.999f * vv[i] + 0.001f * gi * gi;
				double lr_t = lr * sqrt(1 - pow(0.999, t)) /
				              (1 - pow(0.9, t));
				ref[i] -=
				    (float)lr_t * m[i] / (sqrtf(vv[i]) + 1e-8f);
			}
		}
		for (size_t i = 0; i < n; i++)
			if (fabsf(out[i] - ref[i]) >
			    1e-5f * fmaxf(1.0f, fabsf(ref[i]))) {
				CHECK(0, "%s step %d: w[%zu] = %.8g, want %.8g",
				      name, t, i, out[i], ref[i]);
				break;
			}
	}
}

static void
check_async(dt_kv *kv)
{
	int nw = dt_kv_num_workers(kv);
	const size_t n = 4099;
	float *w = calloc(n, sizeof(float)), *g = malloc(n * sizeof(float));
	dt_err err;

	/* Without an optimizer dist_async is refused, as in MXNet. */
	OK(dt_kv_init(kv, 9, w, n));
	err = dt_kv_push(kv, 9, w, n);
	CHECK(err == DT_ESTATE && strstr(dt_errmsg(), "optimizer"),
	      "dist_async push without optimizer: %s (%s)", dt_errname(err),
	      dt_errmsg());
	OK(dt_kv_barrier(kv));
	free(w);
	free(g);
	(void)nw;
}

/* Wait until the file path exists (5 minutes at most). */
static void
hold_until(const char *path, int made)
{
	printf("kv_check async: holding after %d pushes until %s exists\n",
	       made, path);
	fflush(stdout);
	for (int i = 0; access(path, F_OK) != 0; i++) {
		if (i == 30000) {
			fprintf(stderr, "kv_check FAILED: %s never came\n",
			        path);
			exit(1);
		}
		usleep(10000);
	}
}

static void
check_async_opt(dt_kv *kv)
{
	int nw = dt_kv_num_workers(kv);
	const size_t n = 4099;
	const char *np = getenv("KV_CHECK_PUSHES"); /* (recovery.sh) */
	const char *hold = getenv("KV_CHECK_HOLD");
	const int pushes = np ? atoi(np) : 50;
	float *w = calloc(n, sizeof(float)), *g = malloc(n * sizeof(float));

	const dt_key key = 9;
	uint64_t step = 0;

	OK(dt_kv_set_optimizer(kv, "sgd", "lr=1"));
	OK(dt_kv_init(kv, key, w, n));
	/* A worker in a lost one's place (recovery.sh) goes on from where
	 * its predecessor stopped: the pushes the servers hold are not made
	 * again, and none is lost. */
	OK(dt_kv_resume(kv, 1, &key, &n, &step));
	if (dt_kv_rejoined(kv))
		fprintf(stderr, "kv_check async: resuming at push %llu\n",
		        (unsigned long long)step);
	for (size_t i = 0; i < n; i++)
		g[i] = -1.0f; /* w -= lr * g: each push adds 1 */
	for (int p = (int)step; p < pushes; p++) {
		/* KV_CHECK_HOLD=FILE: rank 0 stops halfway until FILE exists,
		 * so that a test loses a server while pushes are still to
		 * come (recovery.sh): a worker that is done sends nothing
		 * again, and the kill would test nothing. */
		if (p == pushes / 2 && hold && dt_kv_rank(kv) == 0)
			hold_until(hold, p);
		OK(dt_kv_push(kv, key, g, n));
	}
	OK(dt_kv_barrier(kv));
	OK(dt_kv_pull(kv, 9, w, n));
	for (size_t i = 0; i < n; i++)
		if (w[i] != (float)(nw * pushes)) {
			CHECK(0, "async: w[%zu] = %g, want %d", i, w[i],
			      nw * pushes);
			break;
		}
	free(w);
	free(g);
}

/* FNV-1a over the bits of v. */
static unsigned long long
hash_floats(const float *v, size_t n)
{
	unsigned long long h = 1469598103934665603ull;
	const unsigned char *p = (const unsigned char *)v;

	for (size_t i = 0; i < n * sizeof(float); i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

/*
 * KV_CHECK_MANY=M (kv_check ckpt): M more keys of batched calls, beside
 * the two single keys: M one-float keys made by one init in a run (a
 * request of them is a span on a server) and M/4 keys of 3 floats spread
 * over the key space (looked up). Their values join the hash.
 */
typedef struct many_keys {
	size_t n, total; /* keys, floats */
	dt_key *keys;
	size_t *lens;
	float *w, *g; /* values, gradients: back to back */
	const float **pw, **pg;
	float **po;
} many_keys;

static void
many_make(many_keys *m, size_t n, int spread)
{
	m->n = n;
	m->keys = malloc((n ? n : 1) * sizeof(dt_key));
	m->lens = malloc((n ? n : 1) * sizeof(size_t));
	m->pw = malloc((n ? n : 1) * sizeof(float *));
	m->pg = malloc((n ? n : 1) * sizeof(float *));
	m->po = malloc((n ? n : 1) * sizeof(float *));
	m->total = 0;
	for (size_t i = 0; i < n; i++) {
		m->keys[i] =
		    spread ? 0x9e3779b97f4a7c15ull * (i + 1) >> 8 : 100000 + i;
		m->lens[i] = spread ? 3 : 1;
		m->total += m->lens[i];
	}
	m->w = malloc((m->total ? m->total : 1) * sizeof(float));
	m->g = malloc((m->total ? m->total : 1) * sizeof(float));
	for (size_t i = 0, off = 0; i < n; off += m->lens[i], i++) {
		m->pw[i] = m->w + off;
		m->po[i] = m->w + off;
		m->pg[i] = m->g + off;
	}
	for (size_t i = 0; i < m->total; i++)
		m->w[i] = (float)(i % 9) * 0.5f;
}

static void
many_free(many_keys *m)
{
	free(m->keys);
	free(m->lens);
	free(m->w);
	free(m->g);
	free(m->pw);
	free(m->pg);
	free(m->po);
}

/* FNV-1a over the bits of v, going on from h. */
static unsigned long long
hash_more(unsigned long long h, const float *v, size_t n)
{
	const unsigned char *p = (const unsigned char *)v;

	for (size_t i = 0; i < n * sizeof(float); i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

static unsigned long long
ckpt_hash(const float *w, size_t total, const many_keys *m)
{
	unsigned long long h = hash_floats(w, total);

	for (int k = 0; k < 2; k++)
		h = hash_more(h, m[k].w, m[k].total);
	return h;
}

/* dt_kv_resume over every key of kv_check ckpt: the step to go on from. */
static int
ckpt_resume(dt_kv *kv, const size_t *n, const many_keys *m)
{
	size_t nk = 2 + m[0].n + m[1].n, k = 0;
	dt_key *keys = malloc(nk * sizeof(dt_key));
	size_t *lens = malloc(nk * sizeof(size_t));
	uint64_t step = 0;

	if (keys == NULL || lens == NULL) {
		CHECK(0, "ckpt resume: out of memory");
		free(keys);
		free(lens);
		return 0;
	}
	keys[k] = 1, lens[k++] = n[0];
	keys[k] = 2, lens[k++] = n[1];
	for (int j = 0; j < 2; j++)
		for (size_t i = 0; i < m[j].n; i++)
			keys[k] = m[j].keys[i], lens[k++] = m[j].lens[i];
	OK(dt_kv_resume(kv, nk, keys, lens, &step));
	fprintf(stderr, "kv_check ckpt: resuming at step %llu\n",
	        (unsigned long long)step);
	free(keys);
	free(lens);
	return (int)step;
}

static void
check_ckpt(dt_kv *kv, int from, int to, const char *at)
{
	int rank = dt_kv_rank(kv);
	const char *b = getenv("MXNET_KVSTORE_BIGARRAY_BOUND");
	const char *nm = getenv("KV_CHECK_MANY");
	const int progress = getenv("KV_CHECK_PROGRESS") != NULL;
	size_t bound = b ? (size_t)atol(b) : 1000000;
	size_t n[2] = {5, 2 * bound + 3}, total = n[0] + n[1];
	float *w = malloc(total * sizeof(float));
	float *g = malloc(total * sizeof(float));
	many_keys m[2];

	many_make(&m[0], nm ? (size_t)atol(nm) : 0, 0);
	many_make(&m[1], nm ? (size_t)atol(nm) / 4 : 0, 1);
	OK(dt_kv_set_optimizer(kv, "sgd", "lr=0.125,momentum=0.5"));
	for (size_t i = 0; i < total; i++)
		w[i] = (float)(i % 5) * 0.25f;
	OK(dt_kv_init(kv, 1, w, n[0]));
	OK(dt_kv_init(kv, 2, w + n[0], n[1]));
	for (int k = 0; k < 2; k++)
		if (m[k].n)
			OK(dt_kv_init_many(kv, m[k].n, m[k].keys, m[k].pw,
			                   m[k].lens));
	/* A worker in a lost one's place (recovery.sh) goes on from the
	 * step its predecessor reached, every key's value as of that step;
	 * the others passed the barrier long ago. */
	if (dt_kv_rejoined(kv))
		from = ckpt_resume(kv, n, m);
	else
		OK(dt_kv_barrier(kv));
	OK(dt_kv_pull(kv, 1, w, n[0]));
	OK(dt_kv_pull(kv, 2, w + n[0], n[1]));
	for (int k = 0; k < 2; k++)
		if (m[k].n)
			OK(dt_kv_pull_many(kv, m[k].n, m[k].keys, m[k].po,
			                   m[k].lens));
	if (rank == 0)
		printf("kv_check ckpt at step %d: %016llx\n", from,
		       ckpt_hash(w, total, m));
	for (int s = from; s < to; s++) {
		for (size_t i = 0; i < total; i++)
			g[i] = grad(rank, s, i) * 0.0625f;
		for (int k = 0; k < 2; k++)
			for (size_t i = 0; i < m[k].total; i++)
				m[k].g[i] =
				    grad(rank, s, i + (size_t)k) * 0.0625f;
		OK(dt_kv_pushpull(kv, 1, g, w, n[0]));
		OK(dt_kv_pushpull(kv, 2, g + n[0], w + n[0], n[1]));
		for (int k = 0; k < 2; k++)
			if (m[k].n)
				OK(dt_kv_pushpull_many(kv, m[k].n, m[k].keys,
				                       m[k].pg, m[k].po,
				                       m[k].lens));
		if (progress && rank == 0)
			printf("kv_check ckpt step %d done\n", s + 1);
		char tag[16];
		snprintf(tag, sizeof(tag), ",%d,", s + 1);
		char list[256];
		snprintf(list, sizeof(list), ",%s,", at ? at : "");
		if (strstr(list, tag)) {
			OK(dt_kv_checkpoint(kv));
			if (rank == 0)
				printf("kv_check ckpt checkpoint at step %d: "
				       "%016llx\n",
				       s + 1, ckpt_hash(w, total, m));
		}
	}
	if (rank == 0)
		printf("kv_check ckpt at step %d: %016llx\n", to,
		       ckpt_hash(w, total, m));
	for (int k = 0; k < 2; k++)
		many_free(&m[k]);
	free(w);
	free(g);
}

/* Gradients whose decoded sums (and raw sums, for keys under min_size)
 * are exact in float32 in any order: halves of a narrow range (fp16),
 * short binary fractions (2bit, with values under the threshold so that
 * residuals carry), and two integers per rank and round (1bit: the
 * classes' means are exact). */
static float
comp_grad(dt_quant_kind kind, int rank, int round, size_t i)
{
	switch (kind) {
	case DT_QUANT_FP16:
		return (float)((rank + 1) * 0.1 * (double)(i % 7 + 1) +
		               round * 0.01);
	case DT_QUANT_2BIT:
		return (float)(((int)(i % 5) - 2) * 0.375 + rank * 0.0625 -
		               round * 0.125);
	default:
		return i % 3 == 0 ? (float)-(rank + 1)
		                  : (float)(rank + 2 + round);
	}
}

/* What rank r's codec sends in its next push of key (n values), decoded,
 * added into acc: every server part encoded on its own, as the client
 * does. res is rank r's residual of the key. */
static void
comp_sent(const dt_quant_spec *c, dt_kv *kv, dt_key key, size_t n, int r,
          int round, float *res, float *acc)
{
	dt_kv_part parts[64];
	int np = 0;

	OK(dt__kv_parts_of(kv, key, n, parts, &np)); /* (the worker's map) */
	dt_quant_spec none = {DT_QUANT_NONE, 0.0f, 0};
	dt_quant_kind data = c->kind; /* (what the worker's data is) */

	if (n < c->min_size) /* (small arrays go as fp32) */
		c = &none;
	float *g = malloc(n * sizeof(float)), *d = malloc(n * sizeof(float));
	uint8_t *buf = malloc(dt__quant_size(c->kind, n) + 64);

	for (size_t i = 0; i < n; i++)
		g[i] = comp_grad(data, r, round, i);
	for (int p = 0; p < np; p++) {
		size_t o = parts[p].offset, len = parts[p].len;

		dt__quant_encode(c, g + o, res + o, len, buf);
		if (dt__quant_decode(c->kind, c->threshold, buf, len, d))
			CHECK(0, "reference decode failed: %s", dt_errmsg());
		for (size_t i = 0; i < len; i++)
			acc[o + i] += d[i];
	}
	free(g);
	free(d);
	free(buf);
}

static void
round_fp16(float *x, size_t n)
{
	uint8_t *h = malloc(2 * n + 2);

	dt__quant_fp16(x, h, n);
	dt__dequant_fp16(h, x, n);
	free(h);
}

static void
check_comp(dt_kv *kv, const char *spec, int pull16, size_t bound)
{
	int rank = dt_kv_rank(kv), nw = dt_kv_num_workers(kv);
	int async = strcmp(dt_kv_type(kv), "dist_async") == 0;
	size_t sizes[] = {1, 7, 33, 1000, bound, 3 * bound + 1};
	dt_quant_spec c;
	dt_err err;

	OK(dt__quant_parse(spec, &c));
	if (async)
		OK(dt_kv_set_optimizer(kv, "sgd", "lr=1"));
	OK(dt_kv_set_gradient_compression(kv, spec));
	if (pull16)
		OK(dt_kv_set_pull_precision(kv, "fp16"));
	for (size_t k = 0; k < sizeof(sizes) / sizeof(*sizes); k++) {
		size_t n = sizes[k];
		dt_key key = 300 + k;
		float *v = calloc(n, sizeof(float)), *v2 = malloc(n * 4);
		float *out = malloc(n * 4), *want = calloc(n, 4);
		float *res = calloc((size_t)nw * n, sizeof(float));
		dt_kv_req r1, r2;
		int bad = 0;

		OK(dt_kv_init(kv, key, v, n));
		for (int round = 0; round < 4; round++) {
			/* round 2 and 3 are in flight at once */
			if (round == 3)
				continue;
			for (size_t i = 0; i < n; i++)
				v[i] = comp_grad(c.kind, rank, round, i);
			if (round == 2) {
				for (size_t i = 0; i < n; i++)
					v2[i] = comp_grad(c.kind, rank, 3, i);
				OK(dt_kv_push_async(kv, key, v, n, &r1));
				OK(dt_kv_pushpull_async(kv, key, v2, out, n,
				                        &r2));
				OK(dt_kv_wait(kv, r1));
				OK(dt_kv_wait(kv, r2));
			} else if (round == 0) {
				OK(dt_kv_push(kv, key, v, n));
				OK(dt_kv_pull(kv, key, out, n));
			} else {
				OK(dt_kv_pushpull(kv, key, v, out, n));
			}
			if (async) /* the others may still push */
				continue;
			/* The round's value: every rank's sent values, and
			 * the residuals move on (rounds 2 and 3 both). */
			for (int rr = round; rr <= (round == 2 ? 3 : round);
			     rr++) {
				memset(want, 0, n * 4);
				for (int r = 0; r < nw; r++)
					comp_sent(&c, kv, key, n, r, rr,
					          res + (size_t)r * n, want);
			}
			if (pull16)
				round_fp16(want, n);
			for (size_t i = 0; i < n && !bad; i++)
				if (memcmp(&out[i], &want[i], 4)) {
					CHECK(0,
					      "%s key %llu n=%zu round %d: "
					      "[%zu] = "
					      "%.9g, want %.9g",
					      spec, (unsigned long long)key, n,
					      round == 2 ? 3 : round, i, out[i],
					      want[i]);
					bad = 1;
				}
		}
		if (async) { /* minus the sum of every decoded push */
			OK(dt_kv_barrier(kv));
			OK(dt_kv_pull(kv, key, out, n));
			memset(want, 0, n * 4);
			for (int r = 0; r < nw; r++)
				for (int rr = 0; rr < 4; rr++)
					comp_sent(&c, kv, key, n, r, rr,
					          res + (size_t)r * n, want);
			for (size_t i = 0; i < n; i++)
				want[i] = -want[i];
			if (pull16)
				round_fp16(want, n);
			for (size_t i = 0; i < n && !bad; i++)
				if (memcmp(&out[i], &want[i], 4)) {
					CHECK(
					    0,
					    "async %s key %llu n=%zu: [%zu] = "
					    "%.9g, want %.9g",
					    spec, (unsigned long long)key, n, i,
					    out[i], want[i]);
					bad = 1;
				}
			OK(dt_kv_barrier(kv));
		}
		free(v);
		free(v2);
		free(out);
		free(want);
		free(res);
	}
	/* Compression is fixed once keys exist. */
	err = dt_kv_set_gradient_compression(kv, "fp16");
	CHECK(err == DT_ESTATE, "compression after init: %s", dt_errname(err));
	err = dt_kv_set_gradient_compression(kv, "3bit");
	CHECK(err == DT_EINVAL && strstr(dt_errmsg(), "3bit"),
	      "unknown compression: %s (%s)", dt_errname(err), dt_errmsg());
}

static float
half_grad(int rank, int round, size_t i)
{
	return (float)(((int)(i % 9) - 4) * 0.0625 * (rank + 1) +
	               round * 0.125);
}

static void
check_half(dt_kv *kv, size_t bound)
{
	int rank = dt_kv_rank(kv), nw = dt_kv_num_workers(kv);
	const char *params = "lr=0.1,momentum=0.9,wd=0.01,rescale_grad=0.25";
	size_t sizes[] = {1, 7, 1000, bound, 3 * bound + 1};
	dt_opt opt;

	OK(dt__opt_parse("sgd", params, &opt));
	OK(dt_kv_set_optimizer(kv, "sgd", params));
	for (size_t k = 0; k < sizeof(sizes) / sizeof(*sizes); k++) {
		size_t n = sizes[k];
		dt_key key = 400 + k;
		float *w = malloc(n * 4), *sum = malloc(n * 4),
		      *g = malloc(n * 4);
		float *st = calloc(dt__opt_state_len(&opt, n) + 1, 4);
		float *got = malloc(n * 4);
		uint16_t *h = malloc(n * 2), *out = malloc(n * 2);
		uint16_t *want = malloc(n * 2);
		dt_kv_part parts[64];
		int np = 0, bad = 0;

		for (size_t i = 0; i < n; i++)
			g[i] =
			    rank == 0 ? (float)((key + i % 100) * 0.25) : -1.0f;
		dt__quant_fp16(g, (uint8_t *)h, n);
		OK(dt_kv_init_fp16(kv, key, h, n));
		OK(dt__kv_parts_of(kv, key, n, parts, &np));
		for (size_t i = 0; i < n; i++)
			w[i] = (float)((key + i % 100) * 0.25);
		for (int round = 1; round <= 5 && !bad; round++) {
			for (size_t i = 0; i < n; i++)
				g[i] = half_grad(rank, round, i);
			dt__quant_fp16(g, (uint8_t *)h, n);
			OK(dt_kv_pushpull_fp16(kv, key, h, out, n));
			/* the reference: the sum of every rank's halves, the
			 * update on each server's part */
			memset(sum, 0, n * 4);
			for (int r = 0; r < nw; r++)
				for (size_t i = 0; i < n; i++)
					sum[i] += half_grad(r, round, i);
			for (int p = 0; p < np; p++)
				dt__opt_apply(&opt, w + parts[p].offset,
				              sum + parts[p].offset,
				              st + dt__opt_state_len(
				                       &opt, parts[p].offset),
				              parts[p].len, (uint64_t)round);
			dt__quant_fp16(w, (uint8_t *)want, n);
			for (size_t i = 0; i < n && !bad; i++)
				if (out[i] != want[i]) {
					CHECK(0,
					      "half key %llu n=%zu round %d: "
					      "[%zu] "
					      "= %#x, want %#x",
					      (unsigned long long)key, n, round,
					      i, out[i], want[i]);
					bad = 1;
				}
		}
		/* The master is fp32, not halves. */
		OK(dt_kv_barrier(kv));
		OK(dt_kv_pull(kv, key, got, n));
		for (size_t i = 0; i < n && !bad; i++)
			if (memcmp(&got[i], &w[i], 4)) {
				CHECK(
				    0,
				    "half key %llu: fp32 master [%zu] = %.9g, "
				    "want %.9g",
				    (unsigned long long)key, i, got[i], w[i]);
				bad = 1;
			}
		OK(dt_kv_pull_fp16(kv, key, out, n));
		CHECK(memcmp(out, want, n * 2) == 0, "half key %llu: pull_fp16",
		      (unsigned long long)key);
		OK(dt_kv_barrier(kv));
		free(w);
		free(sum);
		free(g);
		free(st);
		free(got);
		free(h);
		free(out);
		free(want);
	}
}

int
main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "sum";
	const char *type =
	    strcmp(mode, "async") == 0 || strcmp(mode, "async_noopt") == 0
	        ? "dist_async"
	    : strcmp(mode, "local") == 0 ? "local"
	    : (strcmp(mode, "comp") == 0 || strcmp(mode, "half") == 0) &&
	            getenv("KV_CHECK_TYPE")
	        ? getenv("KV_CHECK_TYPE")
	        : "dist_sync";
	const char *b = getenv("MXNET_KVSTORE_BIGARRAY_BOUND");
	size_t bound = b ? (size_t)atol(b) : 1000000;
	dt_kv *kv;

	OK(dt_kv_create(type, &kv));
	if (strcmp(mode, "sum") == 0 || strcmp(mode, "local") == 0) {
		size_t sizes[] = {1, 7, 1000, bound - 1, bound, 3 * bound + 1};
		for (size_t i = 0; i < sizeof(sizes) / sizeof(*sizes); i++)
			check_sum(kv, (dt_key)(100 + i), sizes[i]);
		if (strcmp(mode, "sum") == 0)
			check_errors(kv);
	} else if (strcmp(mode, "huge") == 0) {
		check_sum(kv, 900, ((size_t)1 << 28) + 3);
	} else if (strcmp(mode, "sgd") == 0 || strcmp(mode, "adam") == 0) {
		check_optimizer(kv, mode);
	} else if (strcmp(mode, "async") == 0) {
		check_async_opt(kv);
	} else if (strcmp(mode, "async_noopt") == 0) {
		check_async(kv);
	} else if (strcmp(mode, "half") == 0) {
		check_half(kv, bound);
	} else if (strcmp(mode, "comp") == 0 && argc >= 3) {
		check_comp(kv, argv[2],
		           argc > 3 && strcmp(argv[3], "fp16") == 0, bound);
	} else if (strcmp(mode, "ckpt") == 0 && argc >= 4) {
		check_ckpt(kv, atoi(argv[2]), atoi(argv[3]),
		           argc > 4 ? argv[4] : NULL);
	} else {
		fprintf(stderr, "kv_check: unknown mode '%s'\n", mode);
		return 2;
	}
	if (dt_kv_destroy(kv) != DT_OK) {
		fprintf(stderr, "kv_check: destroy: %s\n", dt_errmsg());
		return 1;
	}
	if (failures == 0)
		printf("kv_check %s: worker passed\n", mode);
	return failures ? 1 : 0;
}
