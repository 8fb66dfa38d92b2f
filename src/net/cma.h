/*
 * cma.h - the same-host memory path (cma.c): read or write another
 * process's memory at an address it told us, all bytes or an error naming
 * the process. Each call blocks until done.
 */
#ifndef DT_NET_CMA_H
#define DT_NET_CMA_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/err.h"

dt_err dt__cma_read(int pid, void *dst, uint64_t remote, size_t bytes);
dt_err dt__cma_write(int pid, uint64_t remote, const void *src, size_t bytes);

#endif
