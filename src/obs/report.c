/*
 * report.c - what the scheduler prints at the end of a job with
 * DTRAIN_STATS=1 (`dtrain launch --stats`): every node's traffic, the
 * workers' KV latency and step times, the servers' load and the
 * collectives' bus bandwidth, then the straggler and imbalance report
 * that names the slowest worker and the busiest server; and the same as
 * JSON lines (DTRAIN_STATS_JSON). Also the one line a node logs every
 * DTRAIN_STATS_INTERVAL with PS_VERBOSE=1.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "obs/obs.h"

static uint64_t
sum_sent(const dt_stats *s, uint64_t *msgs)
{
	uint64_t b = 0;

	*msgs = 0;
	for (int i = 0; i < s->npeers; i++) {
		b += s->peers[i].bytes_sent;
		*msgs += s->peers[i].msgs_sent;
	}
	return b;
}

static uint64_t
sum_recv(const dt_stats *s, uint64_t *msgs)
{
	uint64_t b = 0;

	*msgs = 0;
	for (int i = 0; i < s->npeers; i++) {
		b += s->peers[i].bytes_recv;
		*msgs += s->peers[i].msgs_recv;
	}
	return b;
}

static const char *const op[DT_LAT_COUNT] = {"push", "pull", "pushpull"};

static int
cmp_pushed_desc(const void *a, const void *b)
{
	uint64_t x = ((const dt_key_stats *)a)->bytes_pushed,
	         y = ((const dt_key_stats *)b)->bytes_pushed;
	return x > y ? -1 : x < y;
}

/* The workers' key rows summed by key, most bytes pushed first, in *out
 * (the caller frees it): their count, or -1 when out of memory. */
static int
keys_over_workers(dt_stats *const *all, int count, dt_key_stats **out)
{
	size_t n = 0, k = 0;
	dt_key_stats *v;

	*out = NULL;
	for (int i = 0; i < count; i++)
		if (all[i] && all[i]->role == 2)
			n += (size_t)all[i]->nkeys;
	if (n == 0)
		return 0;
	if ((v = malloc(n * sizeof(*v))) == NULL)
		return -1;
	for (int i = 0; i < count; i++)
		if (all[i] && all[i]->role == 2)
			for (int j = 0; j < all[i]->nkeys; j++)
				v[k++] = all[i]->keys[j];
	qsort(v, n, sizeof(*v), dt__key_stats_cmp);
	k = 0;
	for (size_t i = 0; i < n; i++) {
		if (k > 0 && v[k - 1].key == v[i].key) {
			v[k - 1].pushes += v[i].pushes;
			v[k - 1].pulls += v[i].pulls;
			v[k - 1].bytes_pushed += v[i].bytes_pushed;
			v[k - 1].bytes_pulled += v[i].bytes_pulled;
		} else {
			v[k++] = v[i];
		}
	}
	qsort(v, k, sizeof(*v), cmp_pushed_desc);
	*out = v;
	return (int)k;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The first table: every node's traffic and wall time. */
static void
report_traffic(FILE *f, dt_stats *const *all, const char *const *names,
               int count)
{
	fprintf(f, "%-12s %10s %12s %10s %12s %9s\n", "node", "msgs sent",
	        "MB sent", "msgs recv", "MB recv", "wall s");
	for (int i = 0; i < count; i++) {
		uint64_t ms_, mr, bs, br;

		if (!all[i]) {
			fprintf(f, "%-12s %10s\n", names[i], "(no report)");
			continue;
		}
		bs = sum_sent(all[i], &ms_);
		br = sum_recv(all[i], &mr);
		fprintf(f, "%-12s %10llu %12.3f %10llu %12.3f %9.2f\n",
		        names[i], (unsigned long long)ms_, dt__mb(bs),
		        (unsigned long long)mr, dt__mb(br),
		        (double)all[i]->wall_ns * 1e-9);
	}
}

/* The workers' KV latency, then the job's keys with most bytes pushed. */
static void
report_kv(FILE *f, dt_stats *const *all, const char *const *names, int count)
{
	fprintf(f, "\nKV latency, call to answer (ms)\n");
	fprintf(f, "%-12s %-9s %9s %9s %9s %9s %9s\n", "worker", "op", "calls",
	        "mean", "p50", "p99", "max");
	for (int i = 0; i < count; i++)
		for (int k = 0; all[i] && k < DT_LAT_COUNT; k++) {
			const dt_latency *l = &all[i]->latency[k];

			if (l->count == 0)
				continue;
			fprintf(f, "%-12s %-9s %9llu %9.3f %9.3f %9.3f %9.3f\n",
			        names[i], op[k], (unsigned long long)l->count,
			        dt__ms(l->mean_ns), dt__ms(l->p50_ns),
			        dt__ms(l->p99_ns), dt__ms(l->max_ns));
		}
	/* Keys: the job's totals over the workers, biggest first. */
	fprintf(f, "\nKV keys, over all workers (the 10 with most "
	           "bytes pushed)\n");
	fprintf(f, "%-10s %9s %12s %9s %12s\n", "key", "pushes", "MB pushed",
	        "pulls", "MB pulled");
	dt_key_stats *top;
	int ntop = keys_over_workers(all, count, &top);
	uint64_t omitted = 0;

	for (int i = 0; i < count; i++)
		if (all[i] && all[i]->role == 2)
			omitted += all[i]->keys_omitted;
	if (ntop < 0)
		fprintf(f, "(out of memory for the key table)\n");
	for (int a = 0; a < ntop && a < 10; a++) {
		char kn[32];

		if (top[a].key == DT_STATS_KEY_BATCHED)
			snprintf(kn, sizeof(kn), "(batched)");
		else
			snprintf(kn, sizeof(kn), "%llu",
			         (unsigned long long)top[a].key);
		fprintf(f, "%-10s %9llu %12.3f %9llu %12.3f\n", kn,
		        (unsigned long long)top[a].pushes,
		        dt__mb(top[a].bytes_pushed),
		        (unsigned long long)top[a].pulls,
		        dt__mb(top[a].bytes_pulled));
	}
	free(top);
	if (omitted)
		fprintf(f,
		        "(%llu calls on keys beyond the %d counted "
		        "one by one)\n",
		        (unsigned long long)omitted, DT_STATS_MAX_KEYS);
}

static void
report_servers(FILE *f, dt_stats *const *all, const char *const *names,
               int count)
{
	fprintf(f, "\n%-12s %12s %10s %9s %10s\n", "server", "MB recv",
	        "merges", "updates", "busy s");
	for (int i = 0; i < count; i++) {
		uint64_t m;

		if (!all[i] || all[i]->role != 1)
			continue;
		fprintf(f, "%-12s %12.3f %10llu %9llu %10.3f\n", names[i],
		        dt__mb(sum_recv(all[i], &m)),
		        (unsigned long long)all[i]->merges,
		        (unsigned long long)all[i]->updates,
		        (double)(all[i]->merge_ns + all[i]->update_ns) * 1e-9);
	}
}

static void
report_coll(FILE *f, dt_stats *const *all, const char *const *names, int count)
{
	fprintf(f, "\n%-12s %9s %12s %9s %12s\n", "worker", "collectives", "MB",
	        "time s", "busbw GB/s");
	for (int i = 0; i < count; i++) {
		if (!all[i] || all[i]->coll_ops == 0)
			continue;
		fprintf(f, "%-12s %9llu %12.3f %9.3f %12.3f\n", names[i],
		        (unsigned long long)all[i]->coll_ops,
		        dt__mb(all[i]->coll_bytes),
		        (double)all[i]->coll_ns * 1e-9,
		        all[i]->coll_busbw / 1e9);
	}
}

/* Each worker's step times, and the slowest worker against the median of
 * all of them (every worker counts, however many the job has). */
static void
report_steps(FILE *f, dt_stats *const *all, const char *const *names, int count)
{
	uint64_t *p50s =
	    malloc((size_t)(count > 0 ? count : 1) * sizeof(*p50s));
	int np = 0, slow = -1;

	fprintf(f, "%-12s %8s %12s %12s %11s\n", "worker", "steps",
	        "step p50 ms", "step p99 ms", "comm share");
	for (int i = 0; i < count; i++) {
		const dt_stats *s = all[i];

		if (!s || s->role != 2 || s->steps == 0)
			continue;
		fprintf(f, "%-12s %8llu %12.3f %12.3f %10.1f%%\n", names[i],
		        (unsigned long long)s->steps, dt__ms(s->step_p50_ns),
		        dt__ms(s->step_p99_ns),
		        s->step_ns
		            ? 100.0 * (double)s->comm_ns / (double)s->step_ns
		            : 0.0);
		if (p50s)
			p50s[np++] = s->step_p50_ns;
		if (slow < 0 || s->step_p50_ns > all[slow]->step_p50_ns)
			slow = i;
	}
	if (!p50s) {
		fprintf(f, "(out of memory for the workers' median)\n");
		return;
	}
	qsort(p50s, (size_t)np, sizeof(p50s[0]), cmp_u64);
	if (slow >= 0 && np > 0) {
		uint64_t med = p50s[(np - 1) / 2];

		fprintf(f,
		        "slowest worker: %s, step p50 %.3f ms (%.2fx "
		        "the workers' median %.3f ms)\n",
		        names[slow], dt__ms(all[slow]->step_p50_ns),
		        med ? (double)all[slow]->step_p50_ns / (double)med
		            : 1.0,
		        dt__ms(med));
	}
	free(p50s);
}

/* The server that received most bytes, against an even share. */
static void
report_busiest(FILE *f, dt_stats *const *all, const char *const *names,
               int count, int ns)
{
	int busy = -1;
	uint64_t total = 0, bbusy = 0, m;

	for (int i = 0; i < count; i++) {
		if (!all[i] || all[i]->role != 1)
			continue;
		uint64_t b = sum_recv(all[i], &m);
		total += b;
		if (busy < 0 || b > bbusy)
			busy = i, bbusy = b;
	}
	if (busy < 0)
		return;
	fprintf(f,
	        "busiest server: %s, %.3f MB received (%.1f%% of the "
	        "servers' %.3f MB; an even share is %.1f%%), busy %.3f s\n",
	        names[busy], dt__mb(bbusy),
	        total ? 100.0 * (double)bbusy / (double)total : 0.0,
	        dt__mb(total), 100.0 / ns,
	        (double)(all[busy]->merge_ns + all[busy]->update_ns) * 1e-9);
}

void
dt__stats_report(FILE *f, dt_stats *const *all, const char *const *names,
                 int count)
{
	int nw = 0, ns = 0, have_lat = 0, have_coll = 0, have_steps = 0;

	for (int i = 0; i < count; i++) {
		if (!all[i])
			continue;
		nw += all[i]->role == 2; /* DT_ROLE_WORKER */
		ns += all[i]->role == 1; /* DT_ROLE_SERVER */
		for (int k = 0; k < DT_LAT_COUNT; k++)
			have_lat |= all[i]->latency[k].count > 0;
		have_coll |= all[i]->coll_ops > 0;
		have_steps |= all[i]->steps > 0;
	}
	fprintf(f, "dtrain stats: %d server(s), %d worker(s)\n", ns, nw);
	report_traffic(f, all, names, count);
	if (have_lat)
		report_kv(f, all, names, count);
	if (ns)
		report_servers(f, all, names, count);
	if (have_coll)
		report_coll(f, all, names, count);

	/* The straggler and imbalance report. */
	fprintf(f, "\nstraggler report\n");
	if (have_steps)
		report_steps(f, all, names, count);
	else
		fprintf(f, "no training steps were marked (dt_obs_phase "
		           "DT_PHASE_STEP)\n");
	if (ns)
		report_busiest(f, all, names, count, ns);
}

void
dt__stats_json(FILE *f, dt_stats *const *all, const char *const *names,
               int count)
{
	static const char *const role[] = {"scheduler", "server", "worker"};

	for (int i = 0; i < count; i++) {
		const dt_stats *s = all[i];

		if (!s)
			continue;
		fprintf(f,
		        "{\"node\":%d,\"name\":\"%s\",\"role\":\"%s\","
		        "\"rank\":%d,\"wall_s\":%.6f,\"peers\":[",
		        i, names[i],
		        role[s->role >= 0 && s->role < 3 ? s->role : 0],
		        s->rank, (double)s->wall_ns * 1e-9);
		for (int k = 0; k < s->npeers; k++)
			fprintf(
			    f,
			    "%s{\"id\":%d,\"msgs_sent\":%llu,\"bytes_sent\":"
			    "%llu,\"msgs_recv\":%llu,\"bytes_recv\":%llu}",
			    k ? "," : "", s->peers[k].id,
			    (unsigned long long)s->peers[k].msgs_sent,
			    (unsigned long long)s->peers[k].bytes_sent,
			    (unsigned long long)s->peers[k].msgs_recv,
			    (unsigned long long)s->peers[k].bytes_recv);
		fputs("],\"keys\":[", f);
		for (int k = 0; k < s->nkeys; k++) {
			const dt_key_stats *ks = &s->keys[k];

			if (ks->key == DT_STATS_KEY_BATCHED)
				fprintf(f, "%s{\"key\":\"batched\"",
				        k ? "," : "");
			else
				fprintf(f, "%s{\"key\":%llu", k ? "," : "",
				        (unsigned long long)ks->key);
			fprintf(
			    f,
			    ",\"pushes\":%llu,\"pulls\":%llu,\"bytes_pushed\":"
			    "%llu,\"bytes_pulled\":%llu}",
			    (unsigned long long)ks->pushes,
			    (unsigned long long)ks->pulls,
			    (unsigned long long)ks->bytes_pushed,
			    (unsigned long long)ks->bytes_pulled);
		}
		fprintf(f, "],\"keys_omitted\":%llu,\"latency\":{",
		        (unsigned long long)s->keys_omitted);
		for (int k = 0; k < DT_LAT_COUNT; k++) {
			const dt_latency *l = &s->latency[k];

			fprintf(
			    f,
			    "%s\"%s\":{\"count\":%llu,\"mean_ns\":%llu,"
			    "\"p50_ns\":%llu,\"p99_ns\":%llu,\"max_ns\":%llu}",
			    k ? "," : "", op[k], (unsigned long long)l->count,
			    (unsigned long long)l->mean_ns,
			    (unsigned long long)l->p50_ns,
			    (unsigned long long)l->p99_ns,
			    (unsigned long long)l->max_ns);
		}
		fprintf(f,
		        "},\"merges\":%llu,\"merge_ns\":%llu,\"updates\":%llu,"
		        "\"update_ns\":%llu,\"coll_ops\":%llu,\"coll_bytes\":"
		        "%llu,\"coll_ns\":%llu,\"coll_busbw\":%.1f,\"steps\":"
		        "%llu,\"step_ns\":%llu,\"comm_ns\":%llu,\"forward_ns\":"
		        "%llu,\"backward_ns\":%llu,\"step_p50_ns\":%llu,"
		        "\"step_p99_ns\":%llu}\n",
		        (unsigned long long)s->merges,
		        (unsigned long long)s->merge_ns,
		        (unsigned long long)s->updates,
		        (unsigned long long)s->update_ns,
		        (unsigned long long)s->coll_ops,
		        (unsigned long long)s->coll_bytes,
		        (unsigned long long)s->coll_ns, s->coll_busbw,
		        (unsigned long long)s->steps,
		        (unsigned long long)s->step_ns,
		        (unsigned long long)s->comm_ns,
		        (unsigned long long)s->forward_ns,
		        (unsigned long long)s->backward_ns,
		        (unsigned long long)s->step_p50_ns,
		        (unsigned long long)s->step_p99_ns);
	}
}

static void add(char *buf, size_t cap, const char *fmt, ...) DT_PRINTF(3, 4);

/* Append to the string in buf (cap bytes) as far as it fits. */
static void
add(char *buf, size_t cap, const char *fmt, ...)
{
	size_t len = strlen(buf);
	va_list ap;

	if (len + 1 >= cap)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + len, cap - len, fmt, ap);
	va_end(ap);
}

/* A rate in bytes/s as "12.3 MB/s" (k, M, G: powers of 1000). */
static void
rate(char *out, size_t cap, double bps)
{
	if (bps >= 1e9)
		snprintf(out, cap, "%.2f GB/s", bps / 1e9);
	else if (bps >= 1e6)
		snprintf(out, cap, "%.2f MB/s", bps / 1e6);
	else
		snprintf(out, cap, "%.1f kB/s", bps / 1e3);
}

/* A duration as "870 ns", "17.2 us" or "1.53 ms". */
static const char *
dur(char *out, size_t cap, uint64_t ns)
{
	if (ns < 1000)
		snprintf(out, cap, "%llu ns", (unsigned long long)ns);
	else if (ns < 1000000)
		snprintf(out, cap, "%.1f us", (double)ns / 1e3);
	else
		snprintf(out, cap, "%.2f ms", dt__ms(ns));
	return out;
}

void
dt__stats_line(char *buf, size_t cap, const dt_stats *s, dt__stats_mark *mark)
{
	uint64_t fs, fr, bs = sum_sent(s, &fs), br = sum_recv(s, &fr);
	double dt = s->wall_ns > mark->wall_ns
	                ? (double)(s->wall_ns - mark->wall_ns) * 1e-9
	                : 0;
	char rs[32], rr[32], d1[24], d2[24];

	if (cap == 0)
		return;
	buf[0] = '\0';
	rate(rs, sizeof(rs),
	     dt > 0 && bs >= mark->bytes_sent
	         ? (double)(bs - mark->bytes_sent) / dt
	         : 0);
	rate(rr, sizeof(rr),
	     dt > 0 && br >= mark->bytes_recv
	         ? (double)(br - mark->bytes_recv) / dt
	         : 0);
	add(buf, cap,
	    "stats at %.1f s: sent %.2f MB in %llu frames (%s), received "
	    "%.2f MB in %llu frames (%s)",
	    (double)s->wall_ns * 1e-9, dt__mb(bs), (unsigned long long)fs, rs,
	    dt__mb(br), (unsigned long long)fr, rr);
	for (int i = 0; i < 3; i++)
		if (s->latency[i].count)
			add(buf, cap, "; %s %llu, p50 %s, p99 %s", op[i],
			    (unsigned long long)s->latency[i].count,
			    dur(d1, sizeof(d1), s->latency[i].p50_ns),
			    dur(d2, sizeof(d2), s->latency[i].p99_ns));
	if (s->steps)
		add(buf, cap, "; steps %llu, p50 %s, communication %.1f%%",
		    (unsigned long long)s->steps,
		    dur(d1, sizeof(d1), s->step_p50_ns),
		    s->step_ns ? 100.0 * (double)s->comm_ns / (double)s->step_ns
		               : 0.0);
	if (s->merges || s->updates)
		add(buf, cap, "; merges %llu (%s each), updates %llu (%s each)",
		    (unsigned long long)s->merges,
		    dur(d1, sizeof(d1),
		        s->merges ? s->merge_ns / s->merges : 0),
		    (unsigned long long)s->updates,
		    dur(d2, sizeof(d2),
		        s->updates ? s->update_ns / s->updates : 0));
	if (s->coll_ops) {
		rate(rs, sizeof(rs), s->coll_busbw);
		add(buf, cap, "; collectives %llu, %.2f MB, busbw %s",
		    (unsigned long long)s->coll_ops, dt__mb(s->coll_bytes), rs);
	}
	*mark = (dt__stats_mark){s->wall_ns, bs, br};
}
