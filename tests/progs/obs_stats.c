/*
 * obs_stats.c - the counters a worker reads with dt_kv_stats equal what
 * it did, exactly; run one copy per worker under `dtrain launch`
 * (tests/integration/observability.sh).
 *
 * Each of R rounds: push key 7 (1000 floats), pull it, pushpull key 9
 * (300 floats), each round marked as a training step with its
 * communication. Then: per key calls and payload bytes, the latency
 * histograms' call counts, the steps, and frames sent to the servers
 * (at least the payloads plus a header each).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/kv.h"
#include "dtrain/obs.h"

#define R 25

static int failures;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr,                                        \
			        "obs_stats FAILED at line %d: ", __LINE__);    \
			fprintf(stderr, __VA_ARGS__);                          \
			fprintf(stderr, "\n");                                 \
			failures++;                                            \
		}                                                              \
	} while (0)

#define OK(call)                                                               \
	do {                                                                   \
		if ((call) != DT_OK) {                                         \
			fprintf(stderr, "obs_stats FAILED: %s: %s\n", #call,   \
			        dt_errmsg());                                  \
			exit(1);                                               \
		}                                                              \
	} while (0)

static const dt_key_stats *
key_of(const dt_stats *s, uint64_t key)
{
	for (int i = 0; i < s->nkeys; i++)
		if (s->keys[i].key == key)
			return &s->keys[i];
	return NULL;
}

int
main(void)
{
	static float a[1000], b[300], out[1000];
	dt_kv *kv;
	dt_stats s;

	for (int i = 0; i < 1000; i++)
		a[i] = (float)(i % 7);
	for (int i = 0; i < 300; i++)
		b[i] = 1.0f;
	OK(dt_kv_create("dist_sync", &kv));
	OK(dt_kv_init(kv, 7, a, 1000));
	OK(dt_kv_init(kv, 9, b, 300));
	for (int r = 0; r < R; r++) {
		uint64_t t0 = dt_obs_now();

		OK(dt_kv_push(kv, 7, a, 1000));
		OK(dt_kv_pull(kv, 7, out, 1000));
		OK(dt_kv_pushpull(kv, 9, b, out, 300));
		dt_obs_phase(DT_PHASE_COMM, t0);
		dt_obs_phase(DT_PHASE_STEP, t0);
	}
	OK(dt_kv_stats(kv, &s));
	const dt_key_stats *k7 = key_of(&s, 7), *k9 = key_of(&s, 9);
	CHECK(k7 && k7->pushes == R && k7->pulls == R &&
	          k7->bytes_pushed == R * 4000ull &&
	          k7->bytes_pulled == R * 4000ull,
	      "key 7: %llu pushes %llu pulls, %llu B pushed %llu B pulled "
	      "(want %d, %d, %llu, %llu)",
	      k7 ? (unsigned long long)k7->pushes : 0ull,
	      k7 ? (unsigned long long)k7->pulls : 0ull,
	      k7 ? (unsigned long long)k7->bytes_pushed : 0ull,
	      k7 ? (unsigned long long)k7->bytes_pulled : 0ull, R, R,
	      R * 4000ull, R * 4000ull);
	CHECK(k9 && k9->pushes == R && k9->pulls == R &&
	          k9->bytes_pushed == R * 1200ull &&
	          k9->bytes_pulled == R * 1200ull,
	      "key 9: %llu pushes, %llu B pushed, %llu B pulled",
	      k9 ? (unsigned long long)k9->pushes : 0ull,
	      k9 ? (unsigned long long)k9->bytes_pushed : 0ull,
	      k9 ? (unsigned long long)k9->bytes_pulled : 0ull);
	CHECK(s.latency[0].count == R && s.latency[1].count == R &&
	          s.latency[2].count == R,
	      "latency counts %llu %llu %llu, want %d each",
	      (unsigned long long)s.latency[0].count,
	      (unsigned long long)s.latency[1].count,
	      (unsigned long long)s.latency[2].count, R);
	CHECK(s.latency[0].p50_ns > 0 &&
	          s.latency[0].p50_ns <= s.latency[0].p99_ns &&
	          s.latency[0].p99_ns <= s.latency[0].max_ns + 1,
	      "push latency p50 %llu p99 %llu max %llu",
	      (unsigned long long)s.latency[0].p50_ns,
	      (unsigned long long)s.latency[0].p99_ns,
	      (unsigned long long)s.latency[0].max_ns);
	CHECK(s.steps == R && s.comm_ns > 0 && s.comm_ns <= s.step_ns,
	      "%llu steps, comm %llu ns of %llu", (unsigned long long)s.steps,
	      (unsigned long long)s.comm_ns, (unsigned long long)s.step_ns);
	uint64_t to_servers = 0, frames = 0;
	int ns =
	    getenv("DMLC_NUM_SERVER") ? atoi(getenv("DMLC_NUM_SERVER")) : 0;
	for (int i = 1; i <= ns && i < s.npeers; i++) {
		to_servers += s.peers[i].bytes_sent;
		frames += s.peers[i].msgs_sent;
	}
	CHECK(frames >= 3 * R &&
	          to_servers >= R * (4000ull + 1200) + frames * 64,
	      "%llu frames, %llu bytes to the servers",
	      (unsigned long long)frames, (unsigned long long)to_servers);
	printf("obs_stats: worker %d: key 7 %llu B pushed, key 9 %llu B, "
	       "%llu frames to the servers, %llu steps: %s\n",
	       dt_kv_rank(kv), k7 ? (unsigned long long)k7->bytes_pushed : 0ull,
	       k9 ? (unsigned long long)k9->bytes_pushed : 0ull,
	       (unsigned long long)frames, (unsigned long long)s.steps,
	       failures ? "FAILED" : "ok");
	dt_stats_fini(&s);
	OK(dt_kv_destroy(kv));
	return failures ? 1 : 0;
}
