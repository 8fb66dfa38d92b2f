/*
 * fuzz_auth_entry.h - the checks of the handshake and record fuzz target
 * (fuzz/fuzz_auth.c), shared with its CTest replay of fuzz/corpus/auth.
 * The first byte of an input picks what the rest is fed to:
 *   0: an acceptor's side: a HELLO (40 bytes), then a PROOF (36 bytes);
 *   1: a connector's side: the acceptor's CHALLENGE (72 bytes);
 *   2: an encrypted connection's receiver: a stream of records.
 * Besides "no crash, no overread", it traps when a proof or a challenge
 * that no one with the key made is accepted, when a record that was not
 * sealed with the session's key opens, when a refusal leaves no message,
 * and when the rest of the input, sealed and opened, does not come back
 * as it was.
 */
#ifndef DT_FUZZ_AUTH_ENTRY_H
#define DT_FUZZ_AUTH_ENTRY_H

#include "fuzz_check.h"

#include "net/auth.h"

static dt_auth *
fuzz_auth_key(int encrypt)
{
	static dt_auth *a[2];

	if (a[encrypt] == NULL &&
	    dt__auth_new("the fuzzer's job secret", 23, "fuzz", encrypt,
	                 &a[encrypt]) != DT_OK)
		__builtin_trap();
	return a[encrypt];
}

static void
fuzz_auth_acceptor(const uint8_t *d, size_t n)
{
	uint8_t chal[DT_AUTH_CHALLENGE_LEN];
	dt_crypt *tx, *rx;
	dt_auth_hs hs;

	if (n < DT_AUTH_HELLO_LEN)
		return;
	dt__clear_error();
	if (dt__auth_on_hello(fuzz_auth_key(0), &hs, d, chal)) {
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
		return;
	}
	FUZZ_CHECK(memcmp(chal, "DTC1", 4) == 0);
	d += DT_AUTH_HELLO_LEN;
	n -= DT_AUTH_HELLO_LEN;
	if (n < DT_AUTH_PROOF_LEN)
		return;
	/* The challenge's nonce is fresh: no input can know the proof. */
	dt__clear_error();
	FUZZ_CHECK(dt__auth_on_proof(fuzz_auth_key(0), &hs, d, &tx, &rx) ==
	           DT_EAUTH);
	FUZZ_CHECK(dt_errmsg()[0] != '\0' && tx == NULL && rx == NULL);
}

static void
fuzz_auth_connector(const uint8_t *d, size_t n)
{
	uint8_t hello[DT_AUTH_HELLO_LEN], proof[DT_AUTH_PROOF_LEN];
	dt_crypt *tx, *rx;
	dt_auth_hs hs;

	if (n < DT_AUTH_CHALLENGE_LEN)
		return;
	dt__auth_hello(fuzz_auth_key(0), &hs, hello);
	dt__clear_error();
	/* A MAC over the fresh HELLO: no input can hold it. */
	FUZZ_CHECK(dt__auth_on_challenge(fuzz_auth_key(0), &hs, d, proof, &tx,
	                                 &rx) == DT_EAUTH);
	FUZZ_CHECK(dt_errmsg()[0] != '\0' && tx == NULL && rx == NULL);
}

/* Both ends of an encrypted session, made by a real handshake. */
static void
fuzz_auth_session(dt_crypt **ctx, dt_crypt **crx, dt_crypt **stx,
                  dt_crypt **srx)
{
	dt_auth *a = fuzz_auth_key(1);
	uint8_t hello[DT_AUTH_HELLO_LEN], chal[DT_AUTH_CHALLENGE_LEN];
	uint8_t proof[DT_AUTH_PROOF_LEN];
	dt_auth_hs c, s;

	dt__auth_hello(a, &c, hello);
	if (dt__auth_on_hello(a, &s, hello, chal) ||
	    dt__auth_on_challenge(a, &c, chal, proof, ctx, crx) ||
	    dt__auth_on_proof(a, &s, proof, stx, srx))
		__builtin_trap();
}

static void
fuzz_auth_records(const uint8_t *d, size_t n)
{
	static uint8_t rec[DT_REC_WIRE], out[DT_REC_MAX];
	dt_crypt *ctx, *crx, *stx, *srx;
	size_t len;

	fuzz_auth_session(&ctx, &crx, &stx, &srx);
	/* The input as records from a stranger: none opens. */
	for (size_t off = 0; off + DT_REC_HDR <= n;) {
		size_t pl = dt__crypt_rec_len(d + off);
		size_t whole = DT_REC_HDR + pl + DT_REC_TAG;

		if (pl == 0 || off + whole > n)
			break;
		dt__clear_error();
		FUZZ_CHECK(dt__crypt_open(srx, d + off, whole, out) != DT_OK);
		FUZZ_CHECK(dt_errmsg()[0] != '\0');
		off += whole;
	}
	/* The input sealed by the real peer: opens to itself, once. */
	len = n < DT_REC_MAX ? n : DT_REC_MAX;
	if (len > 0) {
		size_t w = dt__crypt_seal(ctx, d, len, rec);

		FUZZ_CHECK(w == DT_REC_HDR + len + DT_REC_TAG);
		FUZZ_CHECK(dt__crypt_rec_len(rec) == len);
		FUZZ_CHECK(dt__crypt_open(srx, rec, w, out) == DT_OK);
		FUZZ_CHECK(memcmp(out, d, len) == 0);
		/* Replayed: refused. */
		FUZZ_CHECK(dt__crypt_open(srx, rec, w, out) != DT_OK);
	}
	dt__crypt_free(ctx);
	dt__crypt_free(crx);
	dt__crypt_free(stx);
	dt__crypt_free(srx);
}

static int
dt_fuzz_auth_one(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	switch (data[0] % 3) {
	case 0:
		fuzz_auth_acceptor(data + 1, size - 1);
		break;
	case 1:
		fuzz_auth_connector(data + 1, size - 1);
		break;
	default:
		fuzz_auth_records(data + 1, size - 1);
		break;
	}
	return 0;
}

#endif
