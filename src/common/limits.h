/*
 * limits.h - how big a job may be, in one place: the configuration, the
 * message decoders, the statistics, the launcher and the Kubernetes
 * generator all check a job's size against these, so no layer refuses a
 * job that another one started.
 */
#ifndef DT_COMMON_LIMITS_H
#define DT_COMMON_LIMITS_H

/* The most servers, and the most workers, one job may have. Node ids and
 * ranks fit a 32-bit field on the wire far beyond this; the bound exists
 * so that a count read from a peer or a file is checked against something
 * before anything is sized from it. */
#define DT_MAX_ROLE_NODES 1000000
/* Every node of the largest job: the scheduler, the servers, the
 * workers. */
#define DT_MAX_NODES (1 + 2 * DT_MAX_ROLE_NODES)

#include "dtrain/err.h"

/* DT_OK when a job of `servers` servers and `workers` workers is within
 * the bounds above, else DT_ECONFIG with a message that names the bound
 * and the knob (`what_s`, `what_w`: how the caller's user sets the two
 * counts, e.g. "-s" and "-n", or "DMLC_NUM_SERVER" and
 * "DMLC_NUM_WORKER"). workers must be at least 1. */
dt_err dt__job_size_check(long servers, long workers, const char *what_s,
                          const char *what_w);

#endif
