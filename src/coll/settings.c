/*
 * settings.c - a communicator's settings from the environment (the
 * DT_COLL_* thresholds, DTRAIN_COLL_HIER, PS_RESEND's veto of same-host
 * reads), each checked against its bounds: a value out of them is a
 * DT_ECONFIG naming the variable. docs/collectives.md lists them.
 */
#include <string.h>

#include "coll/comm.h"

/* DTRAIN_COLL_HIER: auto (the default), on or off. */
static dt_err
hier_from_env(dt__coll_cfg *cfg)
{
	const char *v = dt__env_str("DTRAIN_COLL_HIER");

	if (v == NULL || !strcmp(v, "auto"))
		cfg->hier = DT__HIER_AUTO;
	else if (!strcmp(v, "on") || !strcmp(v, "1"))
		cfg->hier = DT__HIER_ON;
	else if (!strcmp(v, "off") || !strcmp(v, "0"))
		cfg->hier = DT__HIER_OFF;
	else
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_COLL_HIER=%s: expected auto, on or off",
		                v);
	return DT_OK;
}

dt_err
dt__coll_cfg_from_env(dt__coll_cfg *cfg)
{
	long v;
	dt_err err;

	if ((err = dt__env_long("DT_COLL_RING_THRESHOLD", 256L << 10, 0,
	                        1L << 40, &v)))
		return err;
	cfg->ring_threshold = (size_t)v;
	if ((err = dt__env_long("DT_COLL_CHUNK_BYTES", 512L << 10, 4096,
	                        1L << 30, &v)))
		return err;
	cfg->chunk_bytes = (size_t)v;
	if ((err = dt__env_long("HOROVOD_FUSION_THRESHOLD", 64L << 20, 0,
	                        1L << 40, &v)))
		return err;
	cfg->fusion_bytes = (size_t)v;
	if ((err = dt__env_long("DT_COLL_UNEXPECTED_MAX", 256L << 20, 1L << 20,
	                        1L << 40, &v)))
		return err;
	cfg->unexpected_max = (size_t)v;
	if ((err = dt__env_long("DT_COLL_TIMEOUT", 60, 1, 86400 * 7, &v)))
		return err;
	cfg->timeout_s = (double)v;
	if ((err = dt__env_long("DT_COLL_CMA", 1, 0, 1, &v)))
		return err;
	cfg->cma = (int)v;
	/* PS_RESEND keeps and resends what a rank sends; a same-host read
	 * or write of another rank's memory is not a message it can keep. */
	if ((err = dt__env_long("PS_RESEND", 0, 0, 1, &v)))
		return err;
	if (v)
		cfg->cma = 0;
	if ((err = dt__env_long("DT_COLL_CMA_WHOLE_MAX", 8L << 20, 0, 1L << 40,
	                        &v)))
		return err;
	cfg->cma_whole_max = (size_t)v;
	if ((err = dt__env_long("DT_COLL_CMA_PUSH_MAX", 4L << 20, 0, 1L << 32,
	                        &v)))
		return err;
	cfg->cma_push_max = (size_t)v;
	if ((err = dt__env_long("DT_COLL_CMA_PUSH_MANY_MAX", 16L << 10, 0,
	                        1L << 30, &v)))
		return err;
	cfg->cma_push_many = (size_t)v;
	if ((err = dt__env_long("DT_COLL_CMA_HALF_MIN", 128L << 10, 0, 1L << 40,
	                        &v)))
		return err;
	cfg->cma_half_min = (size_t)v ? (size_t)v : SIZE_MAX;
	if ((err = dt__env_long("DT_COLL_CMA_SHARED_MAX", 4L << 20, 0, 1L << 30,
	                        &v)))
		return err;
	cfg->cma_shared_max = (size_t)v;
	if ((err = dt__env_long("DT_COLL_CMA_FBOX_MAX", 256L << 10, 0, 1L << 24,
	                        &v)))
		return err;
	cfg->cma_fbox_max = ((size_t)v + 63) & ~(size_t)63;
	if ((err = dt__env_long("DT_COLL_CMA_THRESHOLD", 64L << 10, 0, 1L << 40,
	                        &v)))
		return err;
	cfg->cma_threshold = (size_t)v;
	return hier_from_env(cfg);
}
