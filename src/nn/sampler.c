/*
 * sampler.c - the split sampler: which samples each worker trains on.
 *
 * MXNet's Gluon tutorial (seed 004) gives every worker a fixed contiguous
 * shard of n/num_parts samples and shuffles within it. Its batch counts are
 * equal only because every shard has exactly the same length; shards cut by
 * rank ranges or by files easily differ by a sample, and then by a batch,
 * and in dist_sync a worker with one batch more waits forever for a round
 * the others never start. A worker also only ever sees its own shard. This
 * sampler deals instead: each epoch draws one permutation of [0, n) from
 * (seed, epoch) — the same on every worker, as it depends on nothing else —
 * and cuts it into GLOBAL batches of batch * num_parts indices. Part r takes
 * the slice [r*batch, (r+1)*batch) of each global batch, so
 *   - every part has exactly floor(n / (batch * num_parts)) batches, all
 *     full (the remainder of the permutation is left out of this epoch and
 *     is a different set of samples in the next one);
 *   - the parts of a global batch together are exactly the batch a single
 *     process with batch * num_parts would train on, which is what makes
 *     distributed training reproduce single-process training.
 * The shuffle is Fisher-Yates driven by the trainer's portable splitmix64,
 * with unbiased bounded integers, so the permutation is the same on every
 * machine.
 */
#include <stdlib.h>

#include "common/util.h"
#include "dtrain/nn.h"
#include "nn/layers.h"

struct dt_sampler {
	size_t n, batch, nbatches;
	int num_parts, part;
	uint64_t seed;
	int shuffle;
	size_t *perm;
	size_t start; /* dt_sampler_reshard: where batch 0 begins */
};

dt_err
dt_sampler_create(size_t n, size_t batch, int num_parts, int part_index,
                  uint64_t seed, int shuffle, dt_sampler **out)
{
	dt_sampler *s;
	dt_err err;

	if (out == NULL)
		return dt__fail(DT_EINVAL, "sampler: NULL argument");
	*out = NULL;
	if (n == 0 || batch == 0 || num_parts <= 0 || part_index < 0 ||
	    part_index >= num_parts)
		return dt__fail(DT_EINVAL,
		                "sampler: need n > 0, batch > 0 "
		                "and 0 <= part_index < num_parts (n %zu, "
		                "batch %zu, part %d of %d)",
		                n, batch, part_index, num_parts);
	if ((s = dt__calloc(1, sizeof(*s))) == NULL)
		return DT_ENOMEM;
	s->n = n;
	s->batch = batch;
	s->num_parts = num_parts;
	s->part = part_index;
	s->seed = seed;
	s->shuffle = shuffle;
	s->nbatches = n / batch / (size_t)num_parts;
	if ((s->perm = dt__calloc(n, sizeof(size_t))) == NULL) {
		free(s);
		return DT_ENOMEM;
	}
	if ((err = dt_sampler_set_epoch(s, 0))) {
		dt_sampler_destroy(s);
		return err;
	}
	*out = s;
	return DT_OK;
}

void
dt_sampler_destroy(dt_sampler *s)
{
	if (s == NULL)
		return;
	free(s->perm);
	free(s);
}

size_t
dt_sampler_num_batches(const dt_sampler *s)
{
	return s->nbatches;
}

dt_err
dt_sampler_set_epoch(dt_sampler *s, uint64_t epoch)
{
	uint64_t rng =
	    nn_mix(nn_mix(s->seed, 0x73706c6974ull /* "split" */), epoch);

	s->start = 0;
	s->nbatches = s->n / s->batch / (size_t)s->num_parts;
	for (size_t i = 0; i < s->n; i++)
		s->perm[i] = i;
	if (!s->shuffle)
		return DT_OK;
	for (size_t i = s->n - 1; i > 0; i--) {
		size_t j = (size_t)nn_rng_below(&rng, (uint64_t)i + 1);
		size_t t = s->perm[i];

		s->perm[i] = s->perm[j];
		s->perm[j] = t;
	}
	return DT_OK;
}

dt_err
dt_sampler_batch(const dt_sampler *s, size_t b, const size_t **idx)
{
	if (b >= s->nbatches)
		return dt__fail(DT_EINVAL,
		                "sampler: batch %zu of an epoch of "
		                "%zu batches (n %zu, batch %zu, %d parts)",
		                b, s->nbatches, s->n, s->batch, s->num_parts);
	*idx = s->perm + s->start +
	       (b * (size_t)s->num_parts + (size_t)s->part) * s->batch;
	return DT_OK;
}

/*
 * Elastic training keeps the epoch's permutation, which depends on
 * (seed, epoch) only, and moves where the deal begins: the samples before
 * start were consumed by the old parts, the rest go to the new ones in
 * the same global-batch pattern.
 */
dt_err
dt_sampler_reshard(dt_sampler *s, int num_parts, int part_index, size_t start)
{
	if (s == NULL || num_parts <= 0 || part_index < 0 ||
	    part_index >= num_parts || start > s->n)
		return dt__fail(DT_EINVAL,
		                "sampler_reshard: part %d of %d from position "
		                "%zu of %zu samples",
		                part_index, num_parts, start, s ? s->n : 0);
	s->num_parts = num_parts;
	s->part = part_index;
	s->start = start;
	s->nbatches = (s->n - start) / s->batch / (size_t)num_parts;
	return DT_OK;
}

size_t
dt_sampler_position(const dt_sampler *s, size_t b)
{
	return s->start + (b + 1) * s->batch * (size_t)s->num_parts;
}
