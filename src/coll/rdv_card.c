/*
 * rdv_card.c - the rendezvous card (rdv.h) as text, the one form every
 * kind carries it in (a file's contents, a PMIx string):
 *
 *   dtrain-rendezvous 1
 *   size <ranks>
 *   root <host> <port>
 *   secret <64 hex digits>
 *
 * Whatever brought the text, it is checked field by field before use.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "coll/rdv.h"
#include "common/limits.h"

#define CARD_MAGIC "dtrain-rendezvous 1\n"

void
dt__rdv_card_format(const dt__rdv_card *card, char *out, size_t cap)
{
	int n = snprintf(out, cap, CARD_MAGIC "size %d\nroot %s %d\nsecret ",
	                 card->size, card->host, card->port);

	for (size_t i = 0; n > 0 && i < sizeof(card->secret); i++)
		if ((size_t)n + 3 < cap)
			n += snprintf(out + n, cap - (size_t)n, "%02x",
			              card->secret[i]);
	if (n > 0 && (size_t)n + 1 < cap)
		snprintf(out + n, cap - (size_t)n, "\n");
}

/* A host as a card may name it: a name or an address, nothing else. */
static int
host_ok(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr(".-:_", *s)))
			return 0;
	return 1;
}

dt_err
dt__rdv_card_parse(const char *what, const char *text, dt__rdv_card *card)
{
	char hex[2 * DT_AUTH_JOB_SECRET_LEN + 2];
	int used = 0;

	if (strncmp(text, CARD_MAGIC, strlen(CARD_MAGIC)) != 0)
		goto bad;
	text += strlen(CARD_MAGIC);
	if (sscanf(text, "size %d\nroot %255s %d\nsecret %65s\n%n", &card->size,
	           card->host, &card->port, hex, &used) != 4 ||
	    used == 0 || text[used] != '\0')
		goto bad;
	if (card->size < 2 || card->size > DT_MAX_ROLE_NODES ||
	    card->port < 1 || card->port > 65535 || !host_ok(card->host) ||
	    strlen(hex) != 2 * DT_AUTH_JOB_SECRET_LEN)
		goto bad;
	for (size_t i = 0; i < DT_AUTH_JOB_SECRET_LEN; i++) {
		unsigned b;

		if (sscanf(hex + 2 * i, "%2x", &b) != 1 ||
		    !strchr("0123456789abcdef", hex[2 * i]) ||
		    !strchr("0123456789abcdef", hex[2 * i + 1]))
			goto bad;
		card->secret[i] = (uint8_t)b;
	}
	explicit_bzero(hex, sizeof(hex));
	return DT_OK;
bad:
	explicit_bzero(hex, sizeof(hex));
	return dt__fail(DT_EPROTO, "%s is not a rendezvous card", what);
}
