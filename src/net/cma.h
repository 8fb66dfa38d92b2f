/*
 * cma.h - the same-host memory path (cma.c): read or write another
 * process's memory at an address it told us, all bytes or an error naming
 * the process. Each call blocks until done. And the shared areas: memory
 * a process offers to the others of its host, which they map read-only.
 */
#ifndef DT_NET_CMA_H
#define DT_NET_CMA_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/err.h"

dt_err dt__cma_read(int pid, void *dst, uint64_t remote, size_t bytes);
dt_err dt__cma_write(int pid, uint64_t remote, const void *src, size_t bytes);

/*
 * A shared area of `bytes` (> 0): a sealed memory file (it can neither
 * shrink nor grow) mapped here for reading and writing. *fd stays open
 * until the caller closes it, once the others have mapped it.
 */
dt_err dt__cma_area_create(size_t bytes, int *fd, void **addr);
/*
 * Map, read-only, the area that process pid offers as its descriptor fd
 * (the number it announced): the kernel duplicates the descriptor under
 * the same rights as a cross-memory read (pidfd_getfd), and it is refused
 * unless it is a sealed memory file of exactly `bytes`. Unmap with
 * dt__cma_area_unmap.
 */
dt_err dt__cma_area_map(int pid, int fd, size_t bytes, const void **addr);
void dt__cma_area_unmap(const void *addr, size_t bytes);

#endif
