/*
 * sock.c - socket helpers (sock.h): listen, adopt, connect with retries,
 * addresses. Nothing here knows frames or nodes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "net/sock.h"

#define BACKLOG 1024

dt_err
dt__sock_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return dt__fail(DT_ESYS, "fcntl(O_NONBLOCK): %s",
		                strerror(errno));
	return DT_OK;
}

void
dt__sock_addr_str(const struct sockaddr_storage *ss, char *out, size_t cap)
{
	char host[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)ss;
		inet_ntop(AF_INET, &s->sin_addr, host, sizeof(host));
		port = ntohs(s->sin_port);
		snprintf(out, cap, "%s:%d", host, port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)ss;
		inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof(host));
		port = ntohs(s->sin6_port);
		snprintf(out, cap, "[%s]:%d", host, port);
	} else {
		snprintf(out, cap, "?");
	}
}

static dt_err
bound_port_of(int fd, int *port)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return dt__fail(DT_ESYS, "getsockname: %s", strerror(errno));
	*port = ss.ss_family == AF_INET
	            ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
	            : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return DT_OK;
}

dt_err
dt__sock_listen(const char *host, int port, const char *what, int *fd_out,
                int *bound_port)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
	                         .ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	char portstr[16];
	int fd, one = 1, rc;
	dt_err err;

	snprintf(portstr, sizeof(portstr), "%d", port);
	rc = getaddrinfo(host && *host ? host : NULL, portstr, &hints, &res);
	if (rc != 0)
		return dt__fail(DT_ECONFIG, "%s: cannot resolve '%s': %s", what,
		                host ? host : "", gai_strerror(rc));
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		freeaddrinfo(res);
		return dt__fail(DT_ESYS, "%s: socket: %s", what,
		                strerror(errno));
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 ||
	    listen(fd, BACKLOG) < 0) {
		/* The common case gets its remedy: a fixed port taken by
		 * another job (or one still closing). */
		if (errno == EADDRINUSE && port != 0)
			err = dt__fail(DT_ESYS,
			               "%s: cannot listen on %s:%d: port %d "
			               "is in use (use port 0 to let the "
			               "scheduler choose)",
			               what, host && *host ? host : "*", port,
			               port);
		else
			err = dt__fail(
			    DT_ESYS, "%s: cannot listen on %s:%d: %s", what,
			    host && *host ? host : "*", port, strerror(errno));
		freeaddrinfo(res);
		close(fd);
		return err;
	}
	freeaddrinfo(res);
	if ((err = bound_port_of(fd, bound_port))) {
		close(fd);
		return err;
	}
	*fd_out = fd;
	return DT_OK;
}

dt_err
dt__sock_adopt(int fd, int *bound_port)
{
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	if (listen(fd, BACKLOG) < 0)
		return dt__fail(DT_ECONFIG,
		                "DT_LISTEN_FD=%d is not a bound TCP socket: %s",
		                fd, strerror(errno));
	return bound_port_of(fd, bound_port);
}

/* One non-blocking connect, waited for until deadline_ns; 0 or -1 with
 * errno. */
static int
connect_once(int fd, const struct addrinfo *ai, uint64_t deadline_ns)
{
	int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);

	if (rc < 0 && errno == EINPROGRESS) {
		struct pollfd pfd = {.fd = fd, .events = POLLOUT};
		uint64_t now = dt__now_ns();
		int left = now < deadline_ns
		               ? (int)((deadline_ns - now) / 1000000) + 1
		               : 0;

		rc = poll(&pfd, 1, left);
		if (rc > 0) {
			int e = 0;
			socklen_t l = sizeof(e);

			getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
			rc = e ? -1 : 0;
			errno = e;
		} else {
			rc = -1;
			errno = ETIMEDOUT;
		}
	}
	return rc;
}

/* 0 if the name's wait was logged less than 10 s ago, else 1 (and now
 * it is). */
static int
time_to_say(uint64_t now)
{
	static _Atomic uint64_t said_ns;
	uint64_t last = said_ns;

	if (last && now - last < 10000000000ull)
		return 0;
	said_ns = now;
	return 1;
}

dt_err
dt__sock_connect(const char *host, int port, uint64_t deadline_ns,
                 const char *what, int *fd_out)
{
	uint64_t start = dt__now_ns();
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
	                         .ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	char portstr[16];
	int backoff_ms = 5, rc, last_errno = 0;

	snprintf(portstr, sizeof(portstr), "%d", port);
	for (int tries = 0;; tries++) {
		uint64_t now;

		rc = getaddrinfo(host, portstr, &hints, &res);
		if (rc == 0)
			break;
		now = dt__now_ns();
		/* A name that does not resolve yet may soon: a Kubernetes
		 * Service's record comes with its pod, and pods start in any
		 * order. So it is tried again until the deadline. */
		if ((rc != EAI_AGAIN && rc != EAI_NONAME &&
#ifdef EAI_NODATA
		     rc != EAI_NODATA &&
#endif
		     rc != EAI_FAIL) ||
		    now >= deadline_ns)
			return dt__fail(DT_ECONFIG,
			                "cannot resolve %s address '%s': %s",
			                what, host, gai_strerror(rc));
		/* (said once in 10 s at most: the van dials in slices of a
		 * second, each a call of its own) */
		if (tries == 0 && rc != EAI_AGAIN && time_to_say(now))
			dt__log(0,
			        "cannot resolve %s address '%s' yet (%s): "
			        "trying again until the connect timeout",
			        what, host, gai_strerror(rc));
		/* After a nap, not at once: 50 ms, growing to 1 s, never
		 * past the deadline. */
		uint64_t left_ms = (deadline_ns - now) / 1000000 + 1;
		long ms = (long)DT_MIN(
		    (uint64_t)(tries < 4 ? 50L << tries : 1000L), left_ms);
		struct timespec nap = {ms / 1000, (ms % 1000) * 1000000L};
		nanosleep(&nap, NULL);
	}
	for (;;) {
		int fd = socket(res->ai_family,
		                SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		uint64_t now;

		if (fd < 0) {
			freeaddrinfo(res);
			return dt__fail(DT_ESYS, "socket: %s", strerror(errno));
		}
		if (connect_once(fd, res, deadline_ns) == 0) {
			freeaddrinfo(res);
			*fd_out = fd;
			return DT_OK;
		}
		last_errno = errno;
		close(fd);
		now = dt__now_ns();
		if (now >= deadline_ns)
			break;
		/* Refused or unreachable: the peer may not be up yet, or its
		 * queue is full (a job's joins come at once). The nap grows
		 * and half of it is random, so that refused dialers do not
		 * all come back together. */
		uint64_t left_ms = (deadline_ns - now) / 1000000;
		uint32_t r = (uint32_t)now;

		(void)getrandom(&r, sizeof(r), GRND_NONBLOCK);
		uint64_t nap = DT_MIN((uint64_t)(backoff_ms / 2) +
		                          r % (uint32_t)(backoff_ms / 2 + 1),
		                      left_ms + 1);
		struct timespec ts = {(time_t)(nap / 1000),
		                      (long)(nap % 1000) * 1000000L};
		nanosleep(&ts, NULL);
		backoff_ms = DT_MIN(backoff_ms * 2, 500);
	}
	freeaddrinfo(res);
	return dt__fail(
	    last_errno == ECONNREFUSED ? DT_ECONNREFUSED : DT_ETIMEDOUT,
	    "%s at %s:%d unreachable after %.1f s: %s", what, host, port,
	    (double)(deadline_ns - start) / 1e9, strerror(last_errno));
}

dt_err
dt__net_local_addr(const char *node_host, const char *iface, char *out,
                   size_t cap)
{
	struct ifaddrs *ifs, *i;
	int found = 0;

	if (node_host && *node_host) {
		snprintf(out, cap, "%s", node_host);
		return DT_OK;
	}
	if (getifaddrs(&ifs) < 0)
		return dt__fail(DT_ESYS, "getifaddrs: %s", strerror(errno));
	for (i = ifs; i && !found; i = i->ifa_next) {
		if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
			continue;
		if (iface && *iface) {
			if (strcmp(i->ifa_name, iface) != 0)
				continue;
		} else if (strncmp(i->ifa_name, "lo", 2) == 0) {
			continue;
		}
		inet_ntop(AF_INET,
		          &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out,
		          (socklen_t)cap);
		found = 1;
	}
	freeifaddrs(ifs);
	if (!found && iface && *iface)
		return dt__fail(DT_ECONFIG,
		                "DMLC_INTERFACE=%s: no such interface with an "
		                "IPv4 address",
		                iface);
	if (!found)
		snprintf(out, cap, "127.0.0.1");
	return DT_OK;
}
