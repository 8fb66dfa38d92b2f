/*
 * auth.h - who may talk to a node: the handshake every connection starts
 * with, and the optional encryption of what follows (auth.c, libsodium).
 *
 * Every node of a job holds the job key K, derived from the shared secret
 * (DTRAIN_SECRET or DTRAIN_SECRET_FILE; `dtrain launch` makes one per job)
 * and the job id (DTRAIN_JOB_ID), so a node of another job is refused even
 * when the two share a secret. Before a single frame, the side that
 * connected and the side that accepted prove to each other that they hold
 * K, over fresh nonces from both (docs/security.md):
 *
 *   connector -> HELLO     "DTH1" flags nonce_c                  (40 bytes)
 *   acceptor  -> CHALLENGE "DTC1" flags nonce_s mac_s            (72 bytes)
 *   connector -> PROOF     "DTP1" mac_c                          (36 bytes)
 *
 *   mac_s = BLAKE2b-256_K("srv" HELLO CHALLENGE[0..40))
 *   mac_c = BLAKE2b-256_K("cli" HELLO CHALLENGE)
 *
 * The MACs are compared in constant time. flags (bit 0: encrypt, bit 1:
 * AES-GCM in hardware) are under the MACs, so nobody in the middle can turn
 * encryption off. With encryption (DTRAIN_ENCRYPT=1 on every node) each
 * direction then has a key of its own, BLAKE2b-256_K("c2s"|"s2c" HELLO
 * CHALLENGE), and the byte stream is cut into records:
 *
 *   u32 length L (little-endian, 1..DT_REC_MAX) | L + 16 bytes of AEAD
 *
 * sealed with AES-256-GCM when both ends have it in hardware, else
 * ChaCha20-Poly1305, with the record's number as nonce and its length as
 * additional data: a record replayed, dropped, reordered or altered fails
 * to open and the connection ends.
 */
#ifndef DT_NET_AUTH_H
#define DT_NET_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/err.h"

#define DT_AUTH_HELLO_LEN     40
#define DT_AUTH_CHALLENGE_LEN 72
#define DT_AUTH_PROOF_LEN     36
#define DT_AUTH_MAX_LEN       72
#define DT_AUTH_FLAG_ENCRYPT  1u
#define DT_AUTH_FLAG_AESGCM   2u

#define DT_REC_MAX  (64u << 10) /* plaintext bytes per record at most */
#define DT_REC_HDR  4
#define DT_REC_TAG  16
#define DT_REC_WIRE (DT_REC_HDR + DT_REC_MAX + DT_REC_TAG)

/* A node's side of authentication: the job key and whether to encrypt. */
typedef struct dt_auth dt_auth;

/*
 * From the environment: DTRAIN_SECRET (at least 16 bytes) or
 * DTRAIN_SECRET_FILE (a file only its owner may read), DTRAIN_JOB_ID and
 * DTRAIN_ENCRYPT. *out is NULL when DTRAIN_AUTH=none turns authentication
 * off (a warning is logged once); no secret otherwise is a DT_ECONFIG.
 */
dt_err dt__auth_from_env(dt_auth **out);
/*
 * The job's secret when no variable gives one: the collectives' rendezvous
 * under mpirun or srun (coll/rendezvous.c) makes one on rank 0 and hands
 * it to every rank, which sets it here before its nodes start.
 * DTRAIN_SECRET, DTRAIN_SECRET_FILE and DTRAIN_AUTH=none still win. The
 * bytes are copied; NULL forgets (and zeroes) them.
 */
#define DT_AUTH_JOB_SECRET_LEN 32
void dt__auth_set_job_secret(const uint8_t *secret);
/* The same from values (tests, fuzzers): secret of len bytes. */
dt_err dt__auth_new(const void *secret, size_t len, const char *job_id,
                    int encrypt, dt_auth **out);
void dt__auth_free(dt_auth *a);
int dt__auth_encrypts(const dt_auth *a);

/*
 * The token a connection to the same-host listener called name gives
 * before the listener allocates anything for it (net/shm.c):
 * BLAKE2b-256_K("loc" name), so only holders of K can make it, and it is
 * good for that listener only (its name has a fresh random part). All
 * zero when a is NULL (no authentication). out: 32 bytes.
 */
void dt__auth_local_token(const dt_auth *a, const char *name, uint8_t *out);

/* One direction of an encrypted connection. */
typedef struct dt_crypt dt_crypt;

/* The handshake of one connection, on either side. */
typedef struct dt_auth_hs {
	uint8_t hello[DT_AUTH_HELLO_LEN];
	uint8_t challenge[DT_AUTH_CHALLENGE_LEN];
	uint32_t peer_flags;
} dt_auth_hs;

/* Connector: the HELLO to send first. */
void dt__auth_hello(const dt_auth *a, dt_auth_hs *hs,
                    uint8_t out[DT_AUTH_HELLO_LEN]);
/* Connector: check the acceptor's CHALLENGE; on success the PROOF to send
 * and, when encrypting, the two directions' state (*tx, *rx). */
dt_err dt__auth_on_challenge(const dt_auth *a, dt_auth_hs *hs,
                             const uint8_t in[DT_AUTH_CHALLENGE_LEN],
                             uint8_t proof[DT_AUTH_PROOF_LEN], dt_crypt **tx,
                             dt_crypt **rx);
/* Acceptor: answer a HELLO with a CHALLENGE. */
dt_err dt__auth_on_hello(const dt_auth *a, dt_auth_hs *hs,
                         const uint8_t in[DT_AUTH_HELLO_LEN],
                         uint8_t out[DT_AUTH_CHALLENGE_LEN]);
/* Acceptor: check the PROOF; on success as dt__auth_on_challenge. */
dt_err dt__auth_on_proof(const dt_auth *a, dt_auth_hs *hs,
                         const uint8_t in[DT_AUTH_PROOF_LEN], dt_crypt **tx,
                         dt_crypt **rx);

/* Seal len (1..DT_REC_MAX) bytes into out (len + DT_REC_HDR + DT_REC_TAG
 * bytes); returns the record's size. */
size_t dt__crypt_seal(dt_crypt *cr, const void *pt, size_t len, uint8_t *out);
/* The plaintext length a record header announces, or 0 if out of range. */
size_t dt__crypt_rec_len(const uint8_t hdr[DT_REC_HDR]);
/* Open a whole record (its header included) into out (rec_len bytes). */
dt_err dt__crypt_open(dt_crypt *cr, const uint8_t *rec, size_t rec_len,
                      uint8_t *out);
void dt__crypt_free(dt_crypt *cr);

#endif
