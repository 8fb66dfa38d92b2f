/*
 * transport.c - the table of transports (transport.h) and the choice of
 * one. A new transport adds its file and one line here.
 */
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "net/transport.h"

extern const dt_transport_ops dt__tcp_transport;

const dt_transport_ops *const dt__transports[] = {
    &dt__tcp_transport,
    NULL,
};

dt_err
dt__transport_choose(const dt_transport_ops **out)
{
	const char *want = dt__env_str("DTRAIN_TRANSPORT");

	if (want == NULL || *want == '\0')
		want = "tcp";
	for (int i = 0; dt__transports[i]; i++)
		if (strcmp(dt__transports[i]->name, want) == 0) {
			*out = dt__transports[i];
			return DT_OK;
		}
	char have[128] = "";

	for (int i = 0; dt__transports[i]; i++)
		snprintf(have + strlen(have), sizeof(have) - strlen(have),
		         "%s%s", i ? ", " : "", dt__transports[i]->name);
	return dt__fail(DT_ECONFIG,
	                "DTRAIN_TRANSPORT='%s': no such transport (this build "
	                "has: %s)",
	                want, have);
}
