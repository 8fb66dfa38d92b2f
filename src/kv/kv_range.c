/*
 * kv_range.c - key ranges on a worker. A batched call whose keys are k0,
 * k0 + d, k0 + 2d ... (ps-lite's benchmark lists 0..N-1; feature ids in
 * order look the same) need not copy its keys into one list per server:
 * each server's share is again such a progression, so its request says
 * the first key and the step (kv_impl.h: DT_KV_KEY_RANGE) and carries only
 * the values. kv_many.c plans and sends the call; this file finds whether
 * a call is one, cuts it (client_impl.h: kv_ranges) and moves its values
 * to the parts and the answers back.
 */
#include "kv/client_impl.h"
#include "kv/kv_impl.h"

static uint64_t
gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

int
dt__kvc_ranges_plan(kv_ranges *r, const dt_key *keys, size_t n, int ns)
{
	uint64_t d, k0;
	size_t p;

	if (ns < 1 || ns > DT_KVC_RANGES_MAX || n == 0 ||
	    (d = dt__kv_key_step((const uint8_t *)keys, n)) == 0)
		return 0;
	k0 = keys[0];
	p = (size_t)ns / (size_t)gcd64(d % (uint64_t)ns, (uint64_t)ns);
	memset(r, 0, sizeof(*r));
	r->period = p;
	/* (p <= ns <= n - 1 when the list has a step: no key past the
	 * last, so none wraps) */
	for (size_t j = 0; j < p && j < n; j++) {
		uint64_t first = k0 + d * (uint64_t)j;
		int s = (int)(first % (uint64_t)ns);

		r->srv[j] = s;
		r->off[s] = j;
		r->count[s] = (n - j + p - 1) / p;
		r->rng[s][0] = first;
		r->rng[s][1] = d * (uint64_t)p;
	}
	return 1;
}

void
dt__kvc_ranges_gather(const kv_ranges *r, int ns, const float *vals, size_t n,
                      mpart *mp)
{
	size_t p = r->period;

	if (p == 2) { /* (one pass that splits even and odd) */
		float *e = mp[r->srv[0]].vals, *o = mp[r->srv[1]].vals;

		for (size_t i = 0; i + 1 < n; i += 2) {
			e[i / 2] = vals[i];
			o[i / 2] = vals[i + 1];
		}
		if (n & 1)
			e[n / 2] = vals[n - 1];
		return;
	}
	for (int s = 0; s < ns; s++) {
		float *v = mp[s].vals;

		for (size_t i = r->off[s], m = 0; r->count[s] && i < n; i += p)
			v[m++] = vals[i];
	}
}

void
dt__kvc_ranges_scatter(const kv_ranges *r, int ns, const mpart *mp, size_t n,
                       float *outs)
{
	size_t p = r->period;

	if (p == 2) {
		const float *e = mp[r->srv[0]].ans, *o = mp[r->srv[1]].ans;

		for (size_t i = 0; i + 1 < n; i += 2) {
			outs[i] = e[i / 2];
			outs[i + 1] = o[i / 2];
		}
		if (n & 1)
			outs[n - 1] = e[n / 2];
		return;
	}
	for (int s = 0; s < ns; s++) {
		const float *a = mp[s].ans;

		for (size_t i = r->off[s], m = 0; r->count[s] && i < n; i += p)
			outs[i] = a[m++];
	}
}
