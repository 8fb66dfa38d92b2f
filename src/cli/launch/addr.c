/*
 * addr.c - the scheduler's address and its listening socket, made by the
 * launcher before anything starts so that no other program can take the
 * port between choosing and binding it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/launch/launch.h"
#include "net/sock.h"

dt_err
resolve4(const char *what, const char *host, struct in_addr *out)
{
	struct addrinfo hints = {0}, *res;
	int rc;

	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	if ((rc = getaddrinfo(host, NULL, &hints, &res)) != 0)
		return dt__fail(DT_ECONFIG, "%s: cannot resolve '%s': %s", what,
		                host, gai_strerror(rc));
	*out = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
	freeaddrinfo(res);
	return DT_OK;
}

/* Whether addr belongs to this machine (it can be bound). */
static int
is_local_addr(struct in_addr addr)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = addr};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

	if (fd < 0)
		return 0;
	ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

/* The local address the kernel would use to reach dst (no packet sent). */
static dt_err
route_source(struct in_addr dst, struct in_addr *out)
{
	struct sockaddr_in sa = {
	    .sin_family = AF_INET, .sin_addr = dst, .sin_port = htons(9)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		dt_err err = dt__fail(DT_ESYS, "no route to %s: %s",
		                      inet_ntoa(dst), strerror(errno));
		if (fd >= 0)
			close(fd);
		return err;
	}
	close(fd);
	*out = sa.sin_addr;
	return DT_OK;
}

/*
 * The address the scheduler binds and every node connects to: 127.0.0.1
 * for a back-end with everything on this machine (local). Otherwise
 * DMLC_NODE_HOST when set; else the first host of the host file when it is
 * this machine, or this machine's address on the way to it; else the
 * back-end's choice (slurm: the address of this machine's name), or
 * 127.0.0.1 (mpi on this machine).
 */
dt_err
scheduler_addr(const struct opts *o, const struct hosts *h, struct in_addr *out)
{
	const char *nh = dt__env_str("DMLC_NODE_HOST");
	dt_err err;

	out->s_addr = htonl(INADDR_LOOPBACK);
	if (o->be->hosts == HOSTS_UNUSED && o->be->sched_addr == NULL)
		return DT_OK;
	if (nh)
		return resolve4("DMLC_NODE_HOST", nh, out);
	if (h->n > 0) {
		struct in_addr first = {0};

		if ((err = resolve4("first host of -H", h->h[0].name, &first)))
			return dt__fail(err,
			                "%s; set DMLC_NODE_HOST to the address "
			                "other hosts reach this machine at",
			                dt_errmsg());
		if (is_local_addr(first)) {
			*out = first;
			return DT_OK;
		}
		return route_source(first, out);
	}
	if (o->be->sched_addr)
		return o->be->sched_addr(out);
	return DT_OK;
}

dt_err
listen_on(struct in_addr addr, int *fd_out, int *port_out)
{
	char host[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &addr, host, sizeof(host));
	return dt__sock_listen(host, 0, "the scheduler's socket", fd_out,
	                       port_out);
}
