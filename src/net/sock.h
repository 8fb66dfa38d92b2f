/*
 * sock.h - the socket helpers every part of dtrain that opens a socket
 * shares: the TCP transport (tcp.c), the collectives' rendezvous for an
 * mpirun/srun job (coll/api.c) and the launcher's scheduler socket
 * (cli/launch.c). Blocking or not is the caller's choice; every descriptor
 * is close-on-exec; every wait has a deadline.
 */
#ifndef DT_NET_SOCK_H
#define DT_NET_SOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dtrain/err.h"

/*
 * A listening TCP socket on host:port (host NULL or "" = every address,
 * port 0 = any free port); *bound_port receives the port. what names the
 * socket in the error ("the scheduler's socket").
 */
dt_err dt__sock_listen(const char *host, int port, const char *what, int *fd,
                       int *bound_port);
/* Make an inherited, bound socket listen (DT_LISTEN_FD); *bound_port as
 * above. */
dt_err dt__sock_adopt(int fd, int *bound_port);
/*
 * Connect to host:port, retrying a refused or unreachable peer (it may not
 * be up yet) with backoff until deadline_ns (dt__now_ns clock). The socket
 * comes back non-blocking. what names the peer in errors ("scheduler").
 */
dt_err dt__sock_connect(const char *host, int port, uint64_t deadline_ns,
                        const char *what, int *fd);
dt_err dt__sock_set_nonblock(int fd);
/* "10.0.0.2:9000", "[::1]:9000" */
void dt__sock_addr_str(const struct sockaddr_storage *ss, char *out,
                       size_t cap);

/* Resolve the address this node advertises: DMLC_NODE_HOST, else the
 * IPv4 address of DMLC_INTERFACE, else the first non-loopback IPv4 address,
 * else 127.0.0.1. */
dt_err dt__net_local_addr(const char *node_host, const char *iface, char *out,
                          size_t cap);

#endif
