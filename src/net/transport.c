/*
 * transport.c - the table of transports (transport.h) and the choice
 * DTRAIN_TRANSPORT makes. A new transport adds its file and one line here.
 */
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "net/transport.h"

const dt_transport_ops *const dt__transports[] = {
    &dt__tcp_transport,
    &dt__shm_transport,
    NULL,
};

dt_err
dt__transport_choose(const dt_transport_ops *out[DT_TRANSPORTS_MAX])
{
	const char *want = dt__env_str("DTRAIN_TRANSPORT");

	out[0] = &dt__tcp_transport;
	out[1] = NULL;
	if (want == NULL || *want == '\0' || strcmp(want, "auto") == 0 ||
	    strcmp(want, "shm") == 0) {
		out[0] = &dt__shm_transport;
		out[1] = &dt__tcp_transport;
		out[2] = NULL;
		return dt__shm_configure();
	}
	if (strcmp(want, "tcp") == 0)
		return DT_OK;
	return dt__fail(DT_ECONFIG,
	                "DTRAIN_TRANSPORT='%s': no such choice (auto: shared "
	                "memory to peers on this host, TCP to the others; "
	                "tcp: TCP to all)",
	                want);
}

/* Per thread: whether it serves others (transport.h). */
static _Thread_local int serving;

int
dt__transport_set_serving(int on)
{
	int was = serving;

	serving = on;
	return was;
}

int
dt__transport_serving(void)
{
	return serving;
}
