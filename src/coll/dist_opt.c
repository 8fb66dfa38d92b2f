/*
 * dist_opt.c - the distributed-optimizer helpers of dtrain/coll.h
 * (Horovod's DistributedOptimizer in C): broadcasting the parameters,
 * gradient compression (fp16, 2bit, 1bit with error feedback, per tensor
 * of the layout given), and summing or averaging a flat gradient buffer
 * over the ranks, built on the public calls of api.c.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/comm.h"
#include "coll/exec.h"

dt_err
dt_coll_dist_opt_broadcast(dt_coll *c, float *params, size_t n)
{
	return dt_coll_broadcast(c, params, n, DT_FLOAT32, 0);
}

dt_err
dt_coll_set_compression(dt_coll *c, const char *spec)
{
	dt_quant_spec q;
	dt_err err;

	if (c == NULL)
		return dt__fail(DT_EINVAL, "set compression: c is NULL");
	if ((err = dt__quant_parse(spec, &q)))
		return err;
	if (q.kind != c->dopt.kind || q.threshold != c->dopt.threshold) {
		free(c->dopt_res); /* another codec: start from zero */
		c->dopt_res = NULL;
		c->dopt_res_n = 0;
	}
	c->dopt = q;
	return DT_OK;
}

/* Each rank's 2bit/1bit body starts with its codec: a rank set otherwise
 * is named, not decoded with the wrong threshold. */
#define DOPT_HEAD 8

dt_err
dt_coll_dist_opt_layout(dt_coll *c, const size_t *sizes, int ntensors)
{
	size_t *l = NULL;

	if (c == NULL || ntensors < 0 || (ntensors && sizes == NULL))
		return dt__fail(DT_EINVAL, "dist_opt_layout: %s",
		                c ? "sizes is NULL or ntensors < 0"
		                  : "c is NULL");
	if (ntensors && (l = malloc(sizeof(*l) * (size_t)ntensors)) == NULL)
		return DT_ENOMEM;
	if (ntensors)
		memcpy(l, sizes, sizeof(*l) * (size_t)ntensors);
	free(c->dopt_layout);
	c->dopt_layout = l;
	c->dopt_ntensors = ntensors;
	return DT_OK;
}

/* Tensor t of the layout (or the whole buffer): *off, *len; 1 if it is
 * encoded (not under min_size). */
static int
dopt_segment(const dt_coll *c, int t, size_t n, size_t *off, size_t *len)
{
	if (c->dopt_layout == NULL) {
		*off = 0;
		*len = n;
		return 1;
	}
	*len = c->dopt_layout[t];
	return *len >= c->dopt.min_size;
}

static size_t
dopt_body(const dt_coll *c, size_t n)
{
	size_t bytes = 0, off = 0, len;
	int nt = c->dopt_layout ? c->dopt_ntensors : 1;

	for (int t = 0; t < nt; t++, off += len)
		bytes += dopt_segment(c, t, n, &off, &len)
		             ? dt__quant_size(c->dopt.kind, len)
		             : len * sizeof(float);
	return bytes;
}

/*
 * 2bit/1bit: each rank encodes its gradients (plus its residual), every
 * body goes to every rank (an allgather: these codes cannot be added on
 * the way), and each rank decodes and adds them in rank order - the same
 * float32 sums, so the same bits, everywhere.
 */
static dt_err
dopt_gather(dt_coll *c, float *grads, size_t n)
{
	const dt_quant_spec *q = &c->dopt;
	size_t body, each, total = 0;
	uint8_t *mine, *p, head[DOPT_HEAD];
	uint32_t kind = (uint32_t)q->kind;
	int nt = c->dopt_layout ? c->dopt_ntensors : 1;
	dt_err err;

	for (int t = 0; c->dopt_layout && t < nt; t++)
		total += c->dopt_layout[t];
	if (c->dopt_layout && total != n)
		return dt__fail(DT_EINVAL,
		                "compressed allreduce of %zu floats: the "
		                "layout's %d tensors hold %zu",
		                n, nt, total);
	body = dopt_body(c, n);
	each = DOPT_HEAD + body;

	if (c->dopt_res_n != n) {
		free(c->dopt_res);
		c->dopt_res_n = 0;
		if ((c->dopt_res = calloc(DT_MAX(n, 1), sizeof(float))) == NULL)
			return dt__fail(DT_ENOMEM,
			                "compressed allreduce of %zu "
			                "floats: out of memory for "
			                "the residual",
			                n);
		c->dopt_res_n = n;
	}
	if (!dt__buf_reserve(&c->dopt_buf, &c->dopt_buf_cap,
	                     each * (size_t)(c->size + 1)))
		return dt__fail(DT_ENOMEM,
		                "compressed allreduce of %zu floats: out of "
		                "memory",
		                n);
	memcpy(head, &kind, 4);
	memcpy(head + 4, &q->threshold, 4);
	mine = c->dopt_buf + each * (size_t)c->size;
	memcpy(mine, head, DOPT_HEAD);
	p = mine + DOPT_HEAD;
	for (size_t t = 0, off = 0, len; (int)t < nt; t++, off += len) {
		if (dopt_segment(c, (int)t, n, &off, &len)) {
			dt__quant_encode(q, grads + off, c->dopt_res + off, len,
			                 p);
			p += dt__quant_size(q->kind, len);
		} else { /* a small tensor: as it is */
			memcpy(p, grads + off, len * sizeof(float));
			p += len * sizeof(float);
		}
	}
	if ((err = dt_coll_allgather(c, mine, c->dopt_buf, each / 4, DT_INT32)))
		return err;
	memset(grads, 0, n * sizeof(float));
	for (int r = 0; r < c->size; r++) {
		const uint8_t *b = c->dopt_buf + each * (size_t)r;

		if (memcmp(b, head, DOPT_HEAD))
			return dt__fail(DT_EMISMATCH,
			                "compressed allreduce: rank %d uses "
			                "another compression than rank %d's %s "
			                "(every rank must set the same)",
			                r, c->rank, dt__quant_name(q->kind));
		b += DOPT_HEAD;
		for (size_t t = 0, off = 0, len; (int)t < nt; t++, off += len) {
			int enc = dopt_segment(c, (int)t, n, &off, &len);

			if ((err = dt__quant_decode_add(
			         enc ? q->kind : DT_QUANT_NONE, q->threshold, b,
			         len, grads + off)))
				return dt__fail(
				    err,
				    "compressed allreduce: rank %d's "
				    "body: %s",
				    r, dt_errmsg());
			b += enc ? dt__quant_size(q->kind, len)
			         : len * sizeof(float);
		}
	}
	return DT_OK;
}

dt_err
dt_coll_dist_opt_sum(dt_coll *c, float *grads, size_t n)
{
	dt_err err;

	if (c == NULL || (grads == NULL && n))
		return dt__fail(DT_EINVAL, "dist_opt_sum: %s is NULL",
		                c ? "grads" : "c");
	switch (c->dopt.kind) {
	case DT_QUANT_FP16: { /* halves on the wire, float32 sums */
		uint8_t *h;

		if (!dt__buf_reserve(&c->dopt_buf, &c->dopt_buf_cap, 2 * n))
			return dt__fail(DT_ENOMEM,
			                "fp16 allreduce of %zu floats: out of "
			                "memory",
			                n);
		h = c->dopt_buf;
		dt__quant_fp16(grads, h, n);
		if ((err = dt_coll_allreduce(c, DT_COLL_IN_PLACE, h, n,
		                             DT_FLOAT16, DT_COLL_SUM)))
			return err;
		dt__dequant_fp16(h, grads, n);
		return DT_OK;
	}
	case DT_QUANT_2BIT:
	case DT_QUANT_1BIT:
		return dopt_gather(c, grads, n);
	default:
		return dt_coll_allreduce(c, DT_COLL_IN_PLACE, grads, n,
		                         DT_FLOAT32, DT_COLL_SUM);
	}
}

dt_err
dt_coll_dist_opt_average(dt_coll *c, float *grads, size_t n)
{
	dt_err err;

	if (c == NULL || c->dopt.kind == DT_QUANT_NONE)
		return dt_coll_allreduce(c, DT_COLL_IN_PLACE, grads, n,
		                         DT_FLOAT32, DT_COLL_AVG);
	if ((err = dt_coll_dist_opt_sum(c, grads, n)))
		return err;
	dt__coll_scale(DT_FLOAT32, grads, n, c->size);
	return DT_OK;
}
