/*
 * auth.c - the connection handshake and record encryption (auth.h), on
 * libsodium: BLAKE2b (crypto_generichash) for keys and MACs, AES-256-GCM or
 * ChaCha20-Poly1305 for records, randombytes for nonces.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/util.h"
#include "net/auth.h"
#include "net/codec.h"

#define KEY_LEN    32
#define NONCE_LEN  32
#define MAC_LEN    32
#define MIN_SECRET 16
#define MAX_SECRET 4096
#define MAX_JOB_ID 256
#define SECRET_HINT                                                            \
	"set DTRAIN_SECRET or DTRAIN_SECRET_FILE to the job's secret "         \
	"(dtrain launch makes one), or DTRAIN_AUTH=none to run without "       \
	"authentication"

struct dt_auth {
	uint8_t key[KEY_LEN]; /* K: the secret and the job id */
	uint32_t flags;       /* what this node asks for and can do */
};

struct dt_crypt {
	int aes;
	uint64_t counter; /* the next record's number */
	uint8_t key[KEY_LEN];
	crypto_aead_aes256gcm_state aes_state;
};

static const char magic_hello[4] = {'D', 'T', 'H', '1'};
static const char magic_chal[4] = {'D', 'T', 'C', '1'};
static const char magic_proof[4] = {'D', 'T', 'P', '1'};

static dt_err
sodium_ready(void)
{
	if (sodium_init() < 0)
		return dt__fail(DT_ESYS, "libsodium cannot start");
	return DT_OK;
}

dt_err
dt__auth_new(const void *secret, size_t len, const char *job_id, int encrypt,
             dt_auth **out)
{
	uint8_t k0[KEY_LEN];
	crypto_generichash_state st;
	static const char label[] = "dtrain-v1 job";
	dt_auth *a;
	dt_err err;

	*out = NULL;
	if ((err = sodium_ready()))
		return err;
	if (len < MIN_SECRET || len > MAX_SECRET)
		return dt__fail(DT_ECONFIG,
		                "the job's secret is %zu bytes long; it must "
		                "have %d to %d",
		                len, MIN_SECRET, MAX_SECRET);
	if (job_id == NULL)
		job_id = "";
	if (strlen(job_id) > MAX_JOB_ID)
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_JOB_ID is longer than %d bytes",
		                MAX_JOB_ID);
	a = sodium_malloc(sizeof(*a));
	if (a == NULL)
		return dt__fail(DT_ENOMEM, "out of memory for the job key");
	crypto_generichash(k0, sizeof(k0), secret, len, NULL, 0);
	crypto_generichash_init(&st, k0, sizeof(k0), sizeof(a->key));
	crypto_generichash_update(&st, (const uint8_t *)label, sizeof(label));
	crypto_generichash_update(&st, (const uint8_t *)job_id, strlen(job_id));
	crypto_generichash_final(&st, a->key, sizeof(a->key));
	sodium_memzero(k0, sizeof(k0));
	sodium_memzero(&st, sizeof(st));
	a->flags = encrypt ? DT_AUTH_FLAG_ENCRYPT : 0;
	if (crypto_aead_aes256gcm_is_available())
		a->flags |= DT_AUTH_FLAG_AESGCM;
	*out = a;
	return DT_OK;
}

/*
 * The secret a rendezvous handed this process (dt__auth_set_job_secret),
 * used when no variable names one. Set before the nodes of the process
 * start and read as each starts, so a lock is all it needs.
 */
static pthread_mutex_t job_secret_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t job_secret[DT_AUTH_JOB_SECRET_LEN];
static int job_secret_set;

void
dt__auth_set_job_secret(const uint8_t *secret)
{
	pthread_mutex_lock(&job_secret_mu);
	if (secret)
		memcpy(job_secret, secret, sizeof(job_secret));
	else
		sodium_memzero(job_secret, sizeof(job_secret));
	job_secret_set = secret != NULL;
	pthread_mutex_unlock(&job_secret_mu);
}

/* The secret of dt__auth_set_job_secret into buf; 0 when there is none. */
static size_t
get_job_secret(uint8_t *buf)
{
	size_t len = 0;

	pthread_mutex_lock(&job_secret_mu);
	if (job_secret_set) {
		memcpy(buf, job_secret, sizeof(job_secret));
		len = sizeof(job_secret);
	}
	pthread_mutex_unlock(&job_secret_mu);
	return len;
}

/* The secret in a file that only its owner may read (like ssh's keys). */
static dt_err
read_secret_file(const char *path, uint8_t *buf, size_t cap, size_t *len)
{
	struct stat sb;
	ssize_t n;
	size_t got = 0;
	int fd;
	dt_err err;

	/* (a FIFO would block the open: refused by name, at once) */
	if ((err = dt__file_open_regular(DT_ECONFIG,
	                                 "DTRAIN_SECRET_FILE=", path, &fd)))
		return err;
	if (fstat(fd, &sb) < 0) {
		close(fd);
		return dt__fail(DT_ECONFIG, "DTRAIN_SECRET_FILE=%s: %s", path,
		                strerror(errno));
	}
	if (sb.st_mode & 077) {
		close(fd);
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_SECRET_FILE=%s may be read by others "
		                "(mode %04o); chmod 600 it",
		                path, (unsigned)(sb.st_mode & 07777));
	}
	while (got < cap && (n = read(fd, buf + got, cap - got)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			close(fd);
			return dt__fail(DT_ECONFIG, "DTRAIN_SECRET_FILE=%s: %s",
			                path, strerror(errno));
		}
		got += (size_t)n;
	}
	close(fd);
	if (got == cap)
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_SECRET_FILE=%s is longer than %d bytes",
		                path, MAX_SECRET);
	while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == '\r' ||
	                   buf[got - 1] == ' '))
		got--;
	*len = got;
	return DT_OK;
}

dt_err
dt__auth_from_env(dt_auth **out)
{
	static atomic_int warned;
	const char *mode = dt__env_str("DTRAIN_AUTH");
	const char *secret = dt__env_str("DTRAIN_SECRET");
	const char *file = dt__env_str("DTRAIN_SECRET_FILE");
	uint8_t buf[MAX_SECRET + 1];
	size_t len = 0;
	long encrypt;
	dt_err err;

	*out = NULL;
	if (mode && strcmp(mode, "none") == 0) {
		if (atomic_exchange(&warned, 1) == 0)
			dt__log(0, "warning: authentication is off "
			           "(DTRAIN_AUTH=none): anyone who can reach "
			           "this node's port can join the job, read "
			           "and change its parameters");
		return DT_OK;
	}
	if (mode && strcmp(mode, "secret") != 0)
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_AUTH=%s: expected secret (the default) "
		                "or none",
		                mode);
	if ((err = dt__env_long("DTRAIN_ENCRYPT", 0, 0, 1, &encrypt)))
		return err;
	if (secret && file)
		return dt__fail(DT_ECONFIG, "both DTRAIN_SECRET and "
		                            "DTRAIN_SECRET_FILE are set; "
		                            "keep one");
	if (secret) {
		len = strlen(secret);
		if (len > MAX_SECRET)
			return dt__fail(DT_ECONFIG,
			                "DTRAIN_SECRET is longer than %d bytes",
			                MAX_SECRET);
		memcpy(buf, secret, len);
	} else if (file) {
		if ((err = read_secret_file(file, buf, sizeof(buf), &len)))
			return err;
	} else if ((len = get_job_secret(buf)) == 0) {
		return dt__fail(DT_ECONFIG,
		                "no secret to authenticate this node: %s",
		                SECRET_HINT);
	}
	err = dt__auth_new(buf, len, dt__env_str("DTRAIN_JOB_ID"), (int)encrypt,
	                   out);
	sodium_memzero(buf, sizeof(buf));
	if (err == DT_ECONFIG && len < MIN_SECRET)
		return dt__fail(DT_ECONFIG,
		                "the secret in %s is %zu bytes long; it must "
		                "have at least %d",
		                secret ? "DTRAIN_SECRET" : "DTRAIN_SECRET_FILE",
		                len, MIN_SECRET);
	return err;
}

void
dt__auth_free(dt_auth *a)
{
	if (a)
		sodium_free(a); /* zeroes it */
}

int
dt__auth_encrypts(const dt_auth *a)
{
	return a && (a->flags & DT_AUTH_FLAG_ENCRYPT);
}

/* BLAKE2b-256 keyed with K over label and two handshake messages. */
static void
mac(const dt_auth *a, const char *label, const uint8_t *m1, size_t l1,
    const uint8_t *m2, size_t l2, uint8_t out[MAC_LEN])
{
	crypto_generichash_state st;

	crypto_generichash_init(&st, a->key, sizeof(a->key), MAC_LEN);
	crypto_generichash_update(&st, (const uint8_t *)label,
	                          strlen(label) + 1);
	crypto_generichash_update(&st, m1, l1);
	crypto_generichash_update(&st, m2, l2);
	crypto_generichash_final(&st, out, MAC_LEN);
	sodium_memzero(&st, sizeof(st));
}

void
dt__auth_local_token(const dt_auth *a, const char *name, uint8_t *out)
{
	memset(out, 0, MAC_LEN);
	if (a != NULL)
		mac(a, "loc", (const uint8_t *)name, strlen(name), NULL, 0,
		    out);
}

static dt_crypt *
crypt_new(const dt_auth *a, const dt_auth_hs *hs, const char *label, int aes)
{
	dt_crypt *cr = sodium_malloc(sizeof(*cr));

	if (cr == NULL)
		return NULL;
	memset(cr, 0, sizeof(*cr));
	mac(a, label, hs->hello, sizeof(hs->hello), hs->challenge,
	    sizeof(hs->challenge), cr->key);
	cr->aes = aes;
	if (aes)
		crypto_aead_aes256gcm_beforenm(&cr->aes_state, cr->key);
	return cr;
}

/* Both handshake messages are in: the per-direction record state. */
static dt_err
session(const dt_auth *a, const dt_auth_hs *hs, int connector, dt_crypt **tx,
        dt_crypt **rx)
{
	int aes = (a->flags & hs->peer_flags & DT_AUTH_FLAG_AESGCM) != 0;

	*tx = *rx = NULL;
	if ((a->flags & DT_AUTH_FLAG_ENCRYPT) !=
	    (hs->peer_flags & DT_AUTH_FLAG_ENCRYPT))
		return dt__fail(
		    DT_EAUTH,
		    "this node %s encryption and the peer %s "
		    "(DTRAIN_ENCRYPT must be the same on every node)",
		    (a->flags & DT_AUTH_FLAG_ENCRYPT) ? "asks for"
		                                      : "does not want",
		    (hs->peer_flags & DT_AUTH_FLAG_ENCRYPT) ? "asks for it"
		                                            : "does not");
	if (!(a->flags & DT_AUTH_FLAG_ENCRYPT))
		return DT_OK;
	*tx = crypt_new(a, hs, connector ? "c2s" : "s2c", aes);
	*rx = crypt_new(a, hs, connector ? "s2c" : "c2s", aes);
	if (*tx == NULL || *rx == NULL) {
		dt__crypt_free(*tx);
		dt__crypt_free(*rx);
		*tx = *rx = NULL;
		return dt__fail(DT_ENOMEM, "out of memory for a session key");
	}
	return DT_OK;
}

void
dt__auth_hello(const dt_auth *a, dt_auth_hs *hs, uint8_t out[DT_AUTH_HELLO_LEN])
{
	memcpy(out, magic_hello, 4);
	dt__put_u32(out + 4, a->flags);
	randombytes_buf(out + 8, NONCE_LEN);
	memcpy(hs->hello, out, DT_AUTH_HELLO_LEN);
}

dt_err
dt__auth_on_hello(const dt_auth *a, dt_auth_hs *hs,
                  const uint8_t in[DT_AUTH_HELLO_LEN],
                  uint8_t out[DT_AUTH_CHALLENGE_LEN])
{
	if (memcmp(in, magic_hello, 4) != 0) {
		if (dt__get_u32(in) == DT_WIRE_MAGIC)
			return dt__fail(DT_EAUTH,
			                "authentication failed: the peer sent "
			                "a frame without the handshake (a node "
			                "with DTRAIN_AUTH=none, or not of "
			                "dtrain)");
		return dt__fail(DT_EAUTH,
		                "authentication failed: the peer did not start "
		                "with the handshake");
	}
	memcpy(hs->hello, in, DT_AUTH_HELLO_LEN);
	hs->peer_flags = dt__get_u32(in + 4);
	memcpy(out, magic_chal, 4);
	dt__put_u32(out + 4, a->flags);
	randombytes_buf(out + 8, NONCE_LEN);
	mac(a, "srv", hs->hello, DT_AUTH_HELLO_LEN, out, 8 + NONCE_LEN,
	    out + 8 + NONCE_LEN);
	memcpy(hs->challenge, out, DT_AUTH_CHALLENGE_LEN);
	return DT_OK;
}

dt_err
dt__auth_on_challenge(const dt_auth *a, dt_auth_hs *hs,
                      const uint8_t in[DT_AUTH_CHALLENGE_LEN],
                      uint8_t proof[DT_AUTH_PROOF_LEN], dt_crypt **tx,
                      dt_crypt **rx)
{
	uint8_t want[MAC_LEN];
	int ok;

	*tx = *rx = NULL;
	if (memcmp(in, magic_chal, 4) != 0)
		return dt__fail(
		    DT_EAUTH, "the peer did not answer the handshake "
		              "(DTRAIN_AUTH=none there, or not a dtrain node)");
	mac(a, "srv", hs->hello, DT_AUTH_HELLO_LEN, in, 8 + NONCE_LEN, want);
	ok = crypto_verify_32(want, in + 8 + NONCE_LEN) == 0;
	sodium_memzero(want, sizeof(want));
	if (!ok)
		return dt__fail(DT_EAUTH,
		                "the peer does not hold this job's key (a "
		                "different DTRAIN_SECRET, or a node of another "
		                "job: DTRAIN_JOB_ID)");
	memcpy(hs->challenge, in, DT_AUTH_CHALLENGE_LEN);
	hs->peer_flags = dt__get_u32(in + 4);
	memcpy(proof, magic_proof, 4);
	mac(a, "cli", hs->hello, DT_AUTH_HELLO_LEN, hs->challenge,
	    DT_AUTH_CHALLENGE_LEN, proof + 4);
	return session(a, hs, 1, tx, rx);
}

dt_err
dt__auth_on_proof(const dt_auth *a, dt_auth_hs *hs,
                  const uint8_t in[DT_AUTH_PROOF_LEN], dt_crypt **tx,
                  dt_crypt **rx)
{
	uint8_t want[MAC_LEN];
	int ok;

	*tx = *rx = NULL;
	mac(a, "cli", hs->hello, DT_AUTH_HELLO_LEN, hs->challenge,
	    DT_AUTH_CHALLENGE_LEN, want);
	ok = memcmp(in, magic_proof, 4) == 0 &&
	     crypto_verify_32(want, in + 4) == 0;
	sodium_memzero(want, sizeof(want));
	if (!ok)
		return dt__fail(DT_EAUTH,
		                "authentication failed: wrong proof (the peer "
		                "does not hold this job's key)");
	return session(a, hs, 0, tx, rx);
}

/* ---- records ---- */

static void
nonce_of(uint64_t counter, uint8_t out[12])
{
	memset(out, 0, 12);
	dt__put_u64(out, counter);
}

size_t
dt__crypt_seal(dt_crypt *cr, const void *pt, size_t len, uint8_t *out)
{
	uint8_t nonce[12];
	unsigned long long clen = 0;

	dt__put_u32(out, (uint32_t)len);
	nonce_of(cr->counter++, nonce);
	if (cr->aes)
		crypto_aead_aes256gcm_encrypt_afternm(
		    out + DT_REC_HDR, &clen, pt, len, out, DT_REC_HDR, NULL,
		    nonce, &cr->aes_state);
	else
		crypto_aead_chacha20poly1305_ietf_encrypt(
		    out + DT_REC_HDR, &clen, pt, len, out, DT_REC_HDR, NULL,
		    nonce, cr->key);
	return DT_REC_HDR + (size_t)clen;
}

size_t
dt__crypt_rec_len(const uint8_t hdr[DT_REC_HDR])
{
	uint32_t len = dt__get_u32(hdr);

	return len >= 1 && len <= DT_REC_MAX ? len : 0;
}

dt_err
dt__crypt_open(dt_crypt *cr, const uint8_t *rec, size_t rec_len, uint8_t *out)
{
	uint8_t nonce[12];
	unsigned long long mlen = 0;
	size_t len;
	int rc;

	if (rec_len < DT_REC_HDR + DT_REC_TAG + 1 ||
	    (len = dt__crypt_rec_len(rec)) == 0 ||
	    rec_len != DT_REC_HDR + len + DT_REC_TAG)
		return dt__fail(DT_EPROTO, "bad record length");
	nonce_of(cr->counter, nonce);
	if (cr->aes)
		rc = crypto_aead_aes256gcm_decrypt_afternm(
		    out, &mlen, NULL, rec + DT_REC_HDR, rec_len - DT_REC_HDR,
		    rec, DT_REC_HDR, nonce, &cr->aes_state);
	else
		rc = crypto_aead_chacha20poly1305_ietf_decrypt(
		    out, &mlen, NULL, rec + DT_REC_HDR, rec_len - DT_REC_HDR,
		    rec, DT_REC_HDR, nonce, cr->key);
	if (rc != 0)
		return dt__fail(DT_EAUTH,
		                "record %llu does not open: altered, replayed "
		                "or out of order",
		                (unsigned long long)cr->counter);
	cr->counter++;
	return DT_OK;
}

void
dt__crypt_free(dt_crypt *cr)
{
	if (cr)
		sodium_free(cr);
}
