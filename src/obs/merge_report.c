/*
 * merge_report.c - what the scheduler of a job with a control tree prints
 * at its end from the merged report (merge.h): the star's sections where
 * totals can stand for them (report.c prints a row per node instead), the
 * traffic by role, the KV latency and keys over all workers, the servers'
 * and the collectives' totals, and the straggler report from the slowest
 * workers and the busiest servers kept by id; and the same as one JSON
 * object (DTRAIN_STATS_JSON).
 */
#include <stdlib.h>
#include <string.h>

#include "obs/merge.h"

static const char *const role_name[DT_MERGE_ROLES] = {"scheduler", "server",
                                                      "worker"};
static const char *const op[DT_LAT_COUNT] = {"push", "pull", "pushpull"};

static const char *
name(const char *(*name_of)(void *, int), void *arg, int id, char *buf,
     size_t cap)
{
	const char *s = name_of ? name_of(arg, id) : NULL;

	if (s)
		return s;
	snprintf(buf, cap, "node %d", id);
	return buf;
}

static void
report_head(FILE *f, const dt__merged *m, const char *(*name_of)(void *, int),
            void *arg)
{
	char b[32];

	fprintf(f,
	        "dtrain stats: %u server(s), %u worker(s), merged over the "
	        "control tree\n",
	        m->nodes[1], m->nodes[2]);
	fprintf(f, "merged: the reports of %u nodes and the scheduler's; ",
	        m->nodes[1] + m->nodes[2]);
	if (m->missing_nodes == 0) {
		fprintf(f, "missing: none\n");
	} else {
		fprintf(f, "missing: %u nodes, in the subtrees of",
		        m->missing_nodes);
		for (uint32_t i = 0; i < m->nmissing; i++)
			fprintf(
			    f, "%s %s", i ? "," : "",
			    name(name_of, arg, m->missing[i], b, sizeof(b)));
		fprintf(f, "\n");
	}
	fprintf(f, "%-10s %-10s %10s %12s %10s %12s\n", "role", "with",
	        "msgs sent", "MB sent", "msgs recv", "MB recv");
	for (int r = 0; r < DT_MERGE_ROLES; r++)
		for (int p = 0; p < DT_MERGE_ROLES; p++) {
			const uint64_t *t = m->traffic[r][p];

			if (!t[0] && !t[1] && !t[2] && !t[3])
				continue;
			fprintf(f, "%-10s %-10s %10llu %12.3f %10llu %12.3f\n",
			        role_name[r], role_name[p],
			        (unsigned long long)t[DT_MT_MSGS_SENT],
			        dt__mb(t[DT_MT_BYTES_SENT]),
			        (unsigned long long)t[DT_MT_MSGS_RECV],
			        dt__mb(t[DT_MT_BYTES_RECV]));
		}
	fprintf(f, "longest wall time: %.2f s\n",
	        (double)m->wall_max_ns * 1e-9);
}

static int
cmp_pushed_desc(const void *a, const void *b)
{
	const dt_key_stats *x = a, *y = b;

	if (x->bytes_pushed != y->bytes_pushed)
		return x->bytes_pushed > y->bytes_pushed ? -1 : 1;
	return x->key < y->key ? -1 : x->key > y->key;
}

/* The job's keys with most bytes pushed, as the star's table prints
 * them. */
static void
report_keys(FILE *f, const dt__merged *m)
{
	dt_key_stats *v = malloc((m->nkeys + 1) * sizeof(*v));
	uint32_t n = m->nkeys;

	fprintf(f, "\nKV keys, over all workers (the 10 with most "
	           "bytes pushed)\n");
	fprintf(f, "%-10s %9s %12s %9s %12s\n", "key", "pushes", "MB pushed",
	        "pulls", "MB pulled");
	if (v == NULL) {
		fprintf(f, "(out of memory for the key table)\n");
		return;
	}
	memcpy(v, m->keys, n * sizeof(*v));
	if (m->batched.key)
		v[n++] = m->batched;
	qsort(v, n, sizeof(*v), cmp_pushed_desc);
	for (uint32_t a = 0; a < n && a < 10; a++) {
		char kn[32];

		if (v[a].key == DT_STATS_KEY_BATCHED)
			snprintf(kn, sizeof(kn), "(batched)");
		else
			snprintf(kn, sizeof(kn), "%llu",
			         (unsigned long long)v[a].key);
		fprintf(
		    f, "%-10s %9llu %12.3f %9llu %12.3f\n", kn,
		    (unsigned long long)v[a].pushes, dt__mb(v[a].bytes_pushed),
		    (unsigned long long)v[a].pulls, dt__mb(v[a].bytes_pulled));
	}
	free(v);
	if (m->keys_omitted)
		fprintf(f,
		        "(%llu calls on keys beyond the %d counted "
		        "one by one)\n",
		        (unsigned long long)m->keys_omitted, DT_STATS_MAX_KEYS);
}

static void
report_kv(FILE *f, const dt__merged *m)
{
	fprintf(f, "\nKV latency, call to answer (ms), over all workers\n");
	fprintf(f, "%-9s %9s %9s %9s %9s %9s\n", "op", "calls", "mean", "p50",
	        "p99", "max");
	for (int k = 0; k < DT_LAT_COUNT; k++) {
		const dt__mhist *h = &m->lat[k];

		if (h->n == 0)
			continue;
		fprintf(f, "%-9s %9llu %9.3f %9.3f %9.3f %9.3f\n", op[k],
		        (unsigned long long)h->n, dt__ms(h->sum / h->n),
		        dt__ms(dt__mhist_quantile(h, 0.5)),
		        dt__ms(dt__mhist_quantile(h, 0.99)), dt__ms(h->max));
	}
	report_keys(f, m);
}

static void
report_servers(FILE *f, const dt__merged *m,
               const char *(*name_of)(void *, int), void *arg)
{
	uint64_t recv = 0;
	char b[32];

	for (int p = 0; p < DT_MERGE_ROLES; p++)
		recv += m->traffic[1][p][DT_MT_BYTES_RECV];
	fprintf(f, "\n%-12s %12s %10s %9s %10s\n", "server", "MB recv",
	        "merges", "updates", "busy s");
	fprintf(f, "%-12s %12.3f %10llu %9llu %10.3f\n", "(all)", dt__mb(recv),
	        (unsigned long long)m->merges, (unsigned long long)m->updates,
	        (double)(m->merge_ns + m->update_ns) * 1e-9);
	for (uint32_t i = 0; i < m->nbusy; i++) {
		const dt__mtop *r = &m->busy[i];

		fprintf(f, "%-12s %12.3f %10llu %9llu %10.3f\n",
		        name(name_of, arg, r->id, b, sizeof(b)),
		        dt__mb(r->rank), (unsigned long long)r->f[0],
		        (unsigned long long)r->f[1], (double)r->f[2] * 1e-9);
	}
}

static void
report_steps(FILE *f, const dt__merged *m, const char *(*name_of)(void *, int),
             void *arg)
{
	uint64_t med = dt__mhist_quantile(&m->worker_p50, 0.5);
	char b[32];

	fprintf(f, "%-12s %8s %12s %12s %11s\n", "worker", "steps",
	        "step p50 ms", "step p99 ms", "comm share");
	fprintf(f, "%-12s %8llu %12.3f %12.3f %10.1f%%\n", "(all)",
	        (unsigned long long)m->steps,
	        dt__ms(dt__mhist_quantile(&m->step, 0.5)),
	        dt__ms(dt__mhist_quantile(&m->step, 0.99)),
	        m->step_ns ? 100.0 * (double)m->comm_ns / (double)m->step_ns
	                   : 0.0);
	for (uint32_t i = 0; i < m->nslow; i++) {
		const dt__mtop *r = &m->slow[i];

		fprintf(f, "%-12s %8llu %12.3f %12.3f %10.1f%%\n",
		        name(name_of, arg, r->id, b, sizeof(b)),
		        (unsigned long long)r->f[0], dt__ms(r->rank),
		        dt__ms(r->f[1]),
		        r->f[3] ? 100.0 * (double)r->f[2] / (double)r->f[3]
		                : 0.0);
	}
	if (m->nslow == 0)
		return;
	fprintf(f,
	        "slowest worker: %s, step p50 %.3f ms (%.2fx the workers' "
	        "median %.3f ms, within 12.5%%)\n",
	        name(name_of, arg, m->slow[0].id, b, sizeof(b)),
	        dt__ms(m->slow[0].rank),
	        med ? (double)m->slow[0].rank / (double)med : 1.0, dt__ms(med));
}

void
dt__merged_report(FILE *f, const dt__merged *m,
                  const char *(*name_of)(void *arg, int id), void *arg)
{
	int have_lat = 0;
	char b[32];

	for (int k = 0; k < DT_LAT_COUNT; k++)
		have_lat |= m->lat[k].n > 0;
	report_head(f, m, name_of, arg);
	if (have_lat)
		report_kv(f, m);
	if (m->nodes[1])
		report_servers(f, m, name_of, arg);
	if (m->coll_ops)
		fprintf(f,
		        "\n%-12s %9s %12s %9s %12s\n%-12s %9llu %12.3f %9.3f "
		        "%12.3f\n",
		        "worker", "collectives", "MB", "time s", "busbw GB/s",
		        "(all)", (unsigned long long)m->coll_ops,
		        dt__mb(m->coll_bytes), (double)m->coll_ns * 1e-9,
		        m->coll_nodes
		            ? m->coll_busbw_sum / (double)m->coll_nodes / 1e9
		            : 0.0);
	fprintf(f,
	        "\nstraggler report (the %d slowest workers and busiest "
	        "servers are kept)\n",
	        DT_MERGE_TOP);
	if (m->steps)
		report_steps(f, m, name_of, arg);
	else
		fprintf(f, "no training steps were marked (dt_obs_phase "
		           "DT_PHASE_STEP)\n");
	if (m->nbusy == 0)
		return;
	uint64_t total = 0;

	for (int p = 0; p < DT_MERGE_ROLES; p++)
		total += m->traffic[1][p][DT_MT_BYTES_RECV];
	fprintf(f,
	        "busiest server: %s, %.3f MB received (%.1f%% of the "
	        "servers' %.3f MB; an even share is %.1f%%), busy %.3f s\n",
	        name(name_of, arg, m->busy[0].id, b, sizeof(b)),
	        dt__mb(m->busy[0].rank),
	        total ? 100.0 * (double)m->busy[0].rank / (double)total : 0.0,
	        dt__mb(total), 100.0 / m->nodes[1],
	        (double)m->busy[0].f[2] * 1e-9);
}

/* ---- JSON ---- */

static void
json_hist(FILE *f, const char *key, const dt__mhist *h, int comma)
{
	fprintf(f,
	        "%s\"%s\":{\"count\":%llu,\"mean_ns\":%llu,\"p50_ns\":%llu,"
	        "\"p99_ns\":%llu,\"max_ns\":%llu}",
	        comma ? "," : "", key, (unsigned long long)h->n,
	        (unsigned long long)(h->n ? h->sum / h->n : 0),
	        (unsigned long long)dt__mhist_quantile(h, 0.5),
	        (unsigned long long)dt__mhist_quantile(h, 0.99),
	        (unsigned long long)h->max);
}

static void
json_traffic(FILE *f, const dt__merged *m)
{
	fputs(",\"traffic\":{", f);
	for (int r = 0; r < DT_MERGE_ROLES; r++) {
		fprintf(f, "%s\"%s\":{", r ? "," : "", role_name[r]);
		for (int p = 0; p < DT_MERGE_ROLES; p++) {
			const uint64_t *t = m->traffic[r][p];

			fprintf(
			    f,
			    "%s\"%s\":{\"msgs_sent\":%llu,\"bytes_sent\":"
			    "%llu,\"msgs_recv\":%llu,\"bytes_recv\":%llu}",
			    p ? "," : "", role_name[p],
			    (unsigned long long)t[0], (unsigned long long)t[1],
			    (unsigned long long)t[2], (unsigned long long)t[3]);
		}
		fputc('}', f);
	}
	fputc('}', f);
}

static void
json_key(FILE *f, const dt_key_stats *ks, int comma)
{
	if (ks->key == DT_STATS_KEY_BATCHED)
		fprintf(f, "%s{\"key\":\"batched\"", comma ? "," : "");
	else
		fprintf(f, "%s{\"key\":%llu", comma ? "," : "",
		        (unsigned long long)ks->key);
	fprintf(f,
	        ",\"pushes\":%llu,\"pulls\":%llu,\"bytes_pushed\":%llu,"
	        "\"bytes_pulled\":%llu}",
	        (unsigned long long)ks->pushes, (unsigned long long)ks->pulls,
	        (unsigned long long)ks->bytes_pushed,
	        (unsigned long long)ks->bytes_pulled);
}

static void
json_tops(FILE *f, const dt__merged *m, const char *(*name_of)(void *, int),
          void *arg)
{
	char b[32];

	fputs(",\"slowest_workers\":[", f);
	for (uint32_t i = 0; i < m->nslow; i++) {
		const dt__mtop *r = &m->slow[i];

		fprintf(
		    f,
		    "%s{\"node\":%d,\"name\":\"%s\",\"step_p50_ns\":%llu,"
		    "\"steps\":%llu,\"step_p99_ns\":%llu,\"comm_ns\":%llu,"
		    "\"step_ns\":%llu}",
		    i ? "," : "", (int)r->id,
		    name(name_of, arg, r->id, b, sizeof(b)),
		    (unsigned long long)r->rank, (unsigned long long)r->f[0],
		    (unsigned long long)r->f[1], (unsigned long long)r->f[2],
		    (unsigned long long)r->f[3]);
	}
	fputs("],\"busiest_servers\":[", f);
	for (uint32_t i = 0; i < m->nbusy; i++) {
		const dt__mtop *r = &m->busy[i];

		fprintf(
		    f,
		    "%s{\"node\":%d,\"name\":\"%s\",\"bytes_recv\":%llu,"
		    "\"merges\":%llu,\"updates\":%llu,\"busy_ns\":%llu}",
		    i ? "," : "", (int)r->id,
		    name(name_of, arg, r->id, b, sizeof(b)),
		    (unsigned long long)r->rank, (unsigned long long)r->f[0],
		    (unsigned long long)r->f[1], (unsigned long long)r->f[2]);
	}
	fputc(']', f);
}

void
dt__merged_json(FILE *f, const dt__merged *m,
                const char *(*name_of)(void *arg, int id), void *arg)
{
	fprintf(f,
	        "{\"merged\":true,\"nodes\":{\"scheduler\":%u,\"server\":%u,"
	        "\"worker\":%u},\"missing_nodes\":%u,\"missing\":[",
	        m->nodes[0], m->nodes[1], m->nodes[2], m->missing_nodes);
	for (uint32_t i = 0; i < m->nmissing; i++)
		fprintf(f, "%s%d", i ? "," : "", (int)m->missing[i]);
	fprintf(f, "],\"wall_max_s\":%.6f", (double)m->wall_max_ns * 1e-9);
	json_traffic(f, m);
	fputs(",\"keys\":[", f);
	for (uint32_t i = 0; i < m->nkeys; i++)
		json_key(f, &m->keys[i], i > 0);
	if (m->batched.key)
		json_key(f, &m->batched, m->nkeys > 0);
	fprintf(f, "],\"keys_omitted\":%llu,\"latency\":{",
	        (unsigned long long)m->keys_omitted);
	for (int k = 0; k < DT_LAT_COUNT; k++)
		json_hist(f, op[k], &m->lat[k], k > 0);
	fprintf(
	    f,
	    "},\"merges\":%llu,\"merge_ns\":%llu,\"updates\":%llu,"
	    "\"update_ns\":%llu,\"coll_ops\":%llu,\"coll_bytes\":%llu,"
	    "\"coll_ns\":%llu,\"coll_busbw_mean\":%.1f,\"steps\":%llu,"
	    "\"step_ns\":%llu,\"comm_ns\":%llu,\"forward_ns\":%llu,"
	    "\"backward_ns\":%llu",
	    (unsigned long long)m->merges, (unsigned long long)m->merge_ns,
	    (unsigned long long)m->updates, (unsigned long long)m->update_ns,
	    (unsigned long long)m->coll_ops, (unsigned long long)m->coll_bytes,
	    (unsigned long long)m->coll_ns,
	    m->coll_nodes ? m->coll_busbw_sum / (double)m->coll_nodes : 0.0,
	    (unsigned long long)m->steps, (unsigned long long)m->step_ns,
	    (unsigned long long)m->comm_ns, (unsigned long long)m->forward_ns,
	    (unsigned long long)m->backward_ns);
	json_hist(f, "step", &m->step, 1);
	json_hist(f, "worker_step_p50", &m->worker_p50, 1);
	json_tops(f, m, name_of, arg);
	fputs("}\n", f);
}
