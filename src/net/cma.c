/*
 * cma.c - the same-host memory path: copy bytes straight between this
 * process and another one on the machine with the kernel's cross-memory
 * attach (process_vm_readv / process_vm_writev), one copy instead of a
 * socket's two. The kernel allows it only where this process could ptrace
 * the other (same user, ptrace scope permitting); callers probe first and
 * fall back to the transport. Used by the collectives for large messages
 * between ranks of one host.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "common/util.h"
#include "net/cma.h"

/* Move bytes between dst/src here and remote in process pid, all of them. */
static dt_err
cma_move(int pid, void *local, uint64_t remote, size_t bytes, int write)
{
	size_t done = 0;

	while (done < bytes) {
		struct iovec l = {(uint8_t *)local + done, bytes - done};
		struct iovec r = {(void *)(uintptr_t)(remote + done),
		                  bytes - done};
		ssize_t n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
		                  : process_vm_readv(pid, &l, 1, &r, 1, 0);

		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			return dt__fail(
			    DT_EIO, "%s %zu bytes %s process %d: %s",
			    write ? "writing" : "reading", bytes - done,
			    write ? "to" : "from", pid,
			    n < 0   ? strerror(errno)
			    : write ? "nothing written"
			            : "nothing read");
		}
		done += (size_t)n;
	}
	return DT_OK;
}

dt_err
dt__cma_read(int pid, void *dst, uint64_t remote, size_t bytes)
{
	return cma_move(pid, dst, remote, bytes, 0);
}

dt_err
dt__cma_write(int pid, uint64_t remote, const void *src, size_t bytes)
{
	return cma_move(pid, (void *)src, remote, bytes, 1);
}
