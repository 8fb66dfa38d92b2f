/*
 * shm_admit.h - who may connect to a same-host listener (shm_admit.c):
 * the listening socket in the abstract namespace, and the checks a
 * connection passes before the shared-memory transport (shm.c) allocates
 * anything for it. Used by shm.c only.
 */
#ifndef DT_NET_SHM_ADMIT_H
#define DT_NET_SHM_ADMIT_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "dtrain/err.h"

/* A listener's admission state (the accepting thread only). */
typedef struct dt_shm_admit dt_shm_admit;

/* The name's sockaddr: abstract namespace (sun_path[0] = 0). */
dt_err dt__shm_abstract_addr(const char *name, struct sockaddr_un *sa,
                             socklen_t *len);
/*
 * Listen on name, admitting connections that prove token (32 bytes). On
 * DT_OK, *epfd is the descriptor to watch (an epoll set of the listening
 * socket and the connections that still owe their proof) and *out the
 * state; both are the caller's to free (close, dt__shm_admit_free).
 */
dt_err dt__shm_admit_open(const char *name, const uint8_t *token, int *epfd,
                          dt_shm_admit **out);
void dt__shm_admit_free(dt_shm_admit *a);
/* Let about n connections wait at once (in the listen queue, and to give
 * their proof): a job's peers on this host dial at once when it starts.
 * Never below the default; the listener's thread. */
void dt__shm_admit_set_queue(dt_shm_admit *a, int n);
/*
 * The next connection that has proved the job key, without waiting: 1
 * with its socket in *fd (the caller's) and the kernel's pid for it in
 * *pid; 0 when none is there now; -1 on an error of the listening socket
 * (errno; EMFILE and the like: out of descriptors). Refusals are closed
 * and logged here.
 */
int dt__shm_admit_next(dt_shm_admit *a, int epfd, int *fd, int *pid);
/* Log a refusal of the connection from pid, at most once a second. */
void dt__shm_admit_refuse(dt_shm_admit *a, int pid, const char *why);

/* The connector's side: the listener's process must be our user; then
 * send the proof (what and name for the message). *pid: the listener's
 * pid as the kernel gives it. */
dt_err dt__shm_admit_prove(int fd, const uint8_t *token, const char *what,
                           const char *name, int *pid);

#endif
