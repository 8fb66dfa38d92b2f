/*
 * seal.h - encrypted records (DTRAIN_ENCRYPT) as a layer that wraps a
 * transport's link, as TLS wraps a connection: once a handshake has agreed
 * on the keys (auth.h), dt__seal_wrap puts the layer over the link, and
 * whoever holds the link moves plaintext through the usual ops
 * (transport.h) while the wire carries sealed records (the record format
 * is auth.h's). The van never knows whether a link is sealed.
 */
#ifndef DT_NET_SEAL_H
#define DT_NET_SEAL_H

#include "net/auth.h"
#include "net/transport.h"

/*
 * Wrap *l (a connected link of any transport) so that what is sent is
 * sealed with tx and what is received is opened with rx. On DT_OK the
 * wrapped link owns the inner link, tx and rx (its close frees them all);
 * on error nothing changed and the caller still owns them. Call it before
 * anything but the handshake moved on the link, with no other thread on it.
 */
dt_err dt__seal_wrap(dt_link *l, dt_crypt *tx, dt_crypt *rx);

#endif
