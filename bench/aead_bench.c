/*
 * aead_bench.c - the baseline of encryption's cost (bench/auth_bench.sh):
 * how fast this machine seals and opens 64 KiB records with libsodium's
 * AES-256-GCM and ChaCha20-Poly1305 on one core, the work an encrypted
 * connection adds per byte (docs/security.md). Prints a table, or JSON
 * lines with --json.
 */
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define REC (64u << 10)

typedef int (*seal_fn)(unsigned char *, unsigned long long *,
                       const unsigned char *, unsigned long long,
                       const unsigned char *, const unsigned char *,
                       const void *);

static crypto_aead_aes256gcm_state aes_state;
static unsigned char key[32];

static int
aes_seal(unsigned char *c, unsigned long long *cl, const unsigned char *m,
         unsigned long long ml, const unsigned char *ad,
         const unsigned char *nonce, const void *k)
{
	(void)k;
	return crypto_aead_aes256gcm_encrypt_afternm(c, cl, m, ml, ad, 4, NULL,
	                                             nonce, &aes_state);
}

static int
aes_open(unsigned char *c, unsigned long long *cl, const unsigned char *m,
         unsigned long long ml, const unsigned char *ad,
         const unsigned char *nonce, const void *k)
{
	(void)k;
	return crypto_aead_aes256gcm_decrypt_afternm(c, cl, NULL, m, ml, ad, 4,
	                                             nonce, &aes_state);
}

static int
chacha_seal(unsigned char *c, unsigned long long *cl, const unsigned char *m,
            unsigned long long ml, const unsigned char *ad,
            const unsigned char *nonce, const void *k)
{
	return crypto_aead_chacha20poly1305_ietf_encrypt(c, cl, m, ml, ad, 4,
	                                                 NULL, nonce, k);
}

static int
chacha_open(unsigned char *c, unsigned long long *cl, const unsigned char *m,
            unsigned long long ml, const unsigned char *ad,
            const unsigned char *nonce, const void *k)
{
	return crypto_aead_chacha20poly1305_ietf_decrypt(c, cl, NULL, m, ml, ad,
	                                                 4, nonce, k);
}

/* GB/s of fn over 64 KiB records for about 0.3 s; best of 3. */
static double
rate(seal_fn fn, unsigned char *in, size_t inlen, unsigned char *out)
{
	unsigned char nonce[12] = {0}, ad[4] = {0};
	unsigned long long len;
	double best = 0;

	for (int round = 0; round < 3; round++) {
		uint64_t t0 = dt__now_ns(), n = 0;

		while (dt__now_ns() - t0 < 100000000ull) {
			for (int i = 0; i < 16; i++, n++)
				if (fn(out, &len, in, inlen, ad, nonce, key))
					return -1;
		}
		double s = (double)(dt__now_ns() - t0) * 1e-9;
		double r = (double)n * REC / s / 1e9;
		if (r > best)
			best = r;
	}
	return best;
}

int
main(int argc, char **argv)
{
	int json = argc > 1 && strcmp(argv[1], "--json") == 0;
	unsigned char *m = malloc(REC), *c = malloc(REC + 16),
	              *back = malloc(REC);
	unsigned long long cl;
	unsigned char nonce[12] = {0}, ad[4] = {0};

	if (sodium_init() < 0 || !m || !c || !back)
		return 1;
	randombytes_buf(key, sizeof(key));
	randombytes_buf(m, REC);
	struct {
		const char *name;
		seal_fn seal, open;
		int ok;
	} algs[] = {
	    {"aes256gcm", aes_seal, aes_open,
	     crypto_aead_aes256gcm_is_available()},
	    {"chacha20poly1305", chacha_seal, chacha_open, 1},
	};
	if (algs[0].ok)
		crypto_aead_aes256gcm_beforenm(&aes_state, key);
	if (!json)
		printf("%-18s %12s %12s\n", "aead (64 KiB)", "seal GB/s",
		       "open GB/s");
	for (size_t i = 0; i < DT_ARRAY_LEN(algs); i++) {
		if (!algs[i].ok)
			continue;
		algs[i].seal(c, &cl, m, REC, ad, nonce, key);
		double s = rate(algs[i].seal, m, REC, c);
		double o = rate(algs[i].open, c, REC + 16, back);
		if (json)
			printf(
			    "{\"bench\":\"aead\",\"alg\":\"%s\",\"record\":%u,"
			    "\"seal_gbps\":%.3f,\"open_gbps\":%.3f}\n",
			    algs[i].name, REC, s, o);
		else
			printf("%-18s %12.3f %12.3f\n", algs[i].name, s, o);
	}
	free(m);
	free(c);
	free(back);
	return 0;
}
