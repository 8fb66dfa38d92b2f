/*
 * shm_admit.c - the same-host listener's door (shm_admit.h).
 *
 * The abstract socket can be reached by any process of the host, whatever
 * its user, so a connection is admitted in three steps, each before the
 * transport (shm.c) allocates anything for it: the kernel's word on who
 * connected (SO_PEERCRED: our own user, else refused at once), a cap on
 * the connections still to give their proof (PENDING_MIN, or as many as
 * the job has nodes: dt__shm_admit_set_queue; more are refused), and the
 * proof itself, the first 36 bytes the connector sends:
 * "DTL1" and a token only holders of the job key can make
 * (dt__auth_local_token). Until then a connection costs its socket and a
 * place in the listener's epoll set, which is the descriptor the van
 * watches, so the van's I/O thread never waits for one. Refusals are
 * logged at most once a second with the count of those left out.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/bytes.h"
#include "common/util.h"
#include "net/shm_admit.h"
#include "net/transport.h"

#define PROOF_MAGIC 0x314c5444u /* "DTL1" */
#define PROOF_LEN   (4 + DT_SHM_TOKEN_LEN)
/* Connections that have not given their proof yet, at most, unless the
 * owner sizes the door to its job (at most PENDING_CAP), and for how long
 * each may take to give it (the connector sends it right after connect,
 * in one write). Every peer of a job on this host may dial at once when
 * the job starts. */
#define PENDING_MIN 16
#define PENDING_CAP 65536
#define PENDING_NS  (2ull * 1000000000)

struct pending {
	int fd, pid;
	uint64_t born_ns;
};

struct dt_shm_admit {
	int sock;  /* the listening socket */
	uid_t uid; /* ours: the only user admitted */
	uint8_t token[DT_SHM_TOKEN_LEN];
	int npending, cap;
	struct pending *pending; /* cap of them */
	dt_log_gate refused;     /* refusals' log lines */
};

dt_err
dt__shm_abstract_addr(const char *name, struct sockaddr_un *sa, socklen_t *len)
{
	size_t n = strlen(name);

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (n == 0 || n + 1 > sizeof(sa->sun_path))
		return dt__fail(DT_EINVAL, "local endpoint '%s': bad name",
		                name);
	memcpy(sa->sun_path + 1, name, n);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
	return DT_OK;
}

/* The kernel's word on the process at the other end of sock: its pid, and
 * 0, or -1 when it is not of user uid (or cannot be told). */
static int
peer_of_user(int sock, uid_t uid, int *pid)
{
	struct ucred cr;
	socklen_t cl = sizeof(cr);

	*pid = 0;
	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0)
		return -1;
	*pid = (int)cr.pid;
	return cr.uid == uid ? 0 : -1;
}

dt_err
dt__shm_admit_open(const char *name, const uint8_t *token, int *epfd,
                   dt_shm_admit **out)
{
	struct sockaddr_un sa;
	socklen_t len = 0;
	dt_shm_admit *a;
	dt_err err;

	*epfd = -1;
	if ((err = dt__shm_abstract_addr(name, &sa, &len)))
		return err;
	if ((a = dt__calloc(1, sizeof(*a))) == NULL)
		return DT_ENOMEM;
	a->uid = geteuid();
	memcpy(a->token, token, DT_SHM_TOKEN_LEN);
	a->cap = PENDING_MIN;
	if ((a->pending = dt__calloc((size_t)a->cap, sizeof(*a->pending))) ==
	    NULL) {
		free(a);
		return DT_ENOMEM;
	}
	/* The listening socket, where connections arrive. */
	a->sock =
	    socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	/* The set the van watches: that socket and the connections that
	 * still owe their proof. */
	*epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = a->sock};
	if (a->sock < 0 || *epfd < 0 ||
	    bind(a->sock, (struct sockaddr *)&sa, len) < 0 ||
	    listen(a->sock, 128) < 0 ||
	    epoll_ctl(*epfd, EPOLL_CTL_ADD, a->sock, &ev) < 0) {
		err = dt__fail(DT_ESYS, "local endpoint @%s: %s", name,
		               strerror(errno));
		if (*epfd >= 0)
			close(*epfd);
		*epfd = -1;
		dt__shm_admit_free(a);
		return err;
	}
	*out = a;
	return DT_OK;
}

void
dt__shm_admit_free(dt_shm_admit *a)
{
	if (a == NULL)
		return;
	for (int i = 0; i < a->npending; i++)
		close(a->pending[i].fd);
	if (a->sock >= 0)
		close(a->sock);
	free(a->pending);
	free(a);
}

void
dt__shm_admit_set_queue(dt_shm_admit *a, int n)
{
	struct pending *p;

	n = n < PENDING_MIN ? PENDING_MIN : n > PENDING_CAP ? PENDING_CAP : n;
	(void)listen(a->sock, n); /* (capped by net.core.somaxconn) */
	if (n <= a->cap)
		return;
	/* (out of memory: the door stays as it was) */
	if ((p = realloc(a->pending, (size_t)n * sizeof(*p))) == NULL)
		return;
	a->pending = p;
	a->cap = n;
}

void
dt__shm_admit_refuse(dt_shm_admit *a, int pid, const char *why)
{
	uint64_t held = 0;

	if (!dt__log_gate(&a->refused, dt__now_ns(), &held))
		return;
	if (held)
		dt__log(0,
		        "refusing a local connection from pid %d: %s (and %llu "
		        "more refused in the last second, not logged)",
		        pid, why, (unsigned long long)held);
	else
		dt__log(0, "refusing a local connection from pid %d: %s", pid,
		        why);
}

/*
 * The connection's proof of the job key, looked at without waiting: 1 if
 * it came and is right, 0 if nothing came yet, -1 if it is wrong, short
 * or the connection ended (why in *why). The connector writes the 36
 * bytes at once on a new socket, so they come together or not at all; a
 * part is refused, which also keeps the epoll set from reporting it over
 * and over. recv with no room for descriptors takes none.
 */
static int
proof_check(const dt_shm_admit *a, int fd, const char **why)
{
	uint8_t b[PROOF_LEN];
	uint8_t diff = 0;
	ssize_t n;

	do
		n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (n != PROOF_LEN) {
		*why = n == 0 ? "closed before its proof of the job key"
		              : "a short proof of the job key";
		return -1;
	}
	/* In constant time: the comparison tells nothing of the token. */
	for (int i = 0; i < DT_SHM_TOKEN_LEN; i++)
		diff |= (uint8_t)(b[4 + i] ^ a->token[i]);
	if (dt__get_u32(b) != PROOF_MAGIC || diff != 0) {
		*why = "wrong proof of the job key (another job, or no key)";
		return -1;
	}
	return 1;
}

/* The waiting connections: one that has proved itself (1, *fd), or 0;
 * those that failed, or took too long, are refused on the way. */
static int
next_pending(dt_shm_admit *a, int epfd, uint64_t now, int *fd, int *pid)
{
	const char *why = "";

	for (int i = 0; i < a->npending;) {
		int rc = proof_check(a, a->pending[i].fd, &why);

		if (rc == 0 && now - a->pending[i].born_ns < PENDING_NS) {
			i++;
			continue;
		}
		*fd = a->pending[i].fd;
		*pid = a->pending[i].pid;
		epoll_ctl(epfd, EPOLL_CTL_DEL, *fd, NULL);
		a->pending[i] = a->pending[--a->npending];
		if (rc == 1)
			return 1;
		dt__shm_admit_refuse(
		    a, *pid,
		    rc == 0 ? "no proof of the job key within 2 s" : why);
		close(*fd);
	}
	return 0;
}

int
dt__shm_admit_next(dt_shm_admit *a, int epfd, int *fd, int *pid)
{
	uint64_t now = dt__now_ns();
	const char *why = "";
	int rc;

	if (next_pending(a, epfd, now, fd, pid))
		return 1;
	for (;;) {
		*fd =
		    accept4(a->sock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (*fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
		}
		if (peer_of_user(*fd, a->uid, pid) != 0)
			why = "not this job's user";
		else if (a->npending == a->cap)
			why = "too many local connections owe their proof of "
			      "the job key";
		else if ((rc = proof_check(a, *fd, &why)) == 1)
			return 1;
		else if (rc == 0) {
			struct epoll_event ev = {.events = EPOLLIN,
			                         .data.fd = *fd};

			if (epoll_ctl(epfd, EPOLL_CTL_ADD, *fd, &ev) == 0) {
				a->pending[a->npending].fd = *fd;
				a->pending[a->npending].pid = *pid;
				a->pending[a->npending].born_ns = now;
				a->npending++;
				continue;
			}
			why = "cannot watch it";
		}
		dt__shm_admit_refuse(a, *pid, why);
		close(*fd);
	}
}

dt_err
dt__shm_admit_prove(int fd, const uint8_t *token, const char *what,
                    const char *name, int *pid)
{
	uint8_t b[PROOF_LEN];
	ssize_t w;

	if (peer_of_user(fd, geteuid(), pid) != 0)
		return dt__fail(DT_EAUTH,
		                "%s at local endpoint @%s: its process (pid "
		                "%d) is not this job's user",
		                what, name, *pid);
	dt__put_u32(b, PROOF_MAGIC);
	memcpy(b + 4, token, DT_SHM_TOKEN_LEN);
	do
		w = send(fd, b, sizeof(b), MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	if (w != PROOF_LEN)
		return dt__fail(DT_ECLOSED, "%s at local endpoint @%s: %s",
		                what, name,
		                w < 0 ? strerror(errno) : "short write");
	return DT_OK;
}
