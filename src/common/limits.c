/*
 * limits.c - the one check of a job's size against the bounds of limits.h,
 * used by the node's configuration, the launcher and the Kubernetes
 * generator, so that a job one of them accepts is one the others accept.
 */
#include "common/limits.h"
#include "common/util.h"

dt_err
dt__job_size_check(long servers, long workers, const char *what_s,
                   const char *what_w)
{
	if (servers < 0 || servers > DT_MAX_ROLE_NODES)
		return dt__fail(DT_ECONFIG, "%s=%ld: a job has 0 to %d servers",
		                what_s, servers, DT_MAX_ROLE_NODES);
	if (workers < 1 || workers > DT_MAX_ROLE_NODES)
		return dt__fail(DT_ECONFIG, "%s=%ld: a job has 1 to %d workers",
		                what_w, workers, DT_MAX_ROLE_NODES);
	return DT_OK;
}
