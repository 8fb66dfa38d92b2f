/*
 * plan.c - the pure arithmetic of the collectives: how a buffer is cut into
 * blocks and chunks, the ring and chain schedules every rank derives on its
 * own, recursive-doubling partners and tensor-fusion batches. No I/O and no
 * shared state: algo.c runs what is planned here and the unit tests check it
 * directly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll_impl.h"
#include "net/codec.h"

const char *
dt__coll_kind_name(int kind)
{
	switch (kind) {
	case DT__COLL_ALLREDUCE:
		return "allreduce";
	case DT__COLL_BROADCAST:
		return "broadcast";
	case DT__COLL_ALLGATHERV:
		return "allgatherv";
	case DT__COLL_REDUCE_SCATTER:
		return "reduce_scatter";
	case DT__COLL_BARRIER:
		return "barrier";
	}
	return "unknown operation";
}

uint64_t
dt__coll_hash_counts(const size_t *counts, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++) {
		uint64_t v = (uint64_t)counts[i];
		for (int b = 0; b < 8; b++) {
			h ^= (v >> (8 * b)) & 0xff;
			h *= 1099511628211ull;
		}
	}
	return h;
}

void
dt__coll_block(size_t count, int n, int i, size_t *off, size_t *len)
{
	size_t base = count / (size_t)n, rem = count % (size_t)n;
	size_t ui = (size_t)i;

	*len = base + (ui < rem ? 1 : 0);
	*off = ui * base + (ui < rem ? ui : rem);
}

size_t
dt__coll_nchunks(size_t len, size_t chunk_elems)
{
	return len == 0 ? 0 : (len + chunk_elems - 1) / chunk_elems;
}

size_t
dt__coll_chunk_elems(size_t chunk_bytes, size_t elem_size)
{
	size_t e = elem_size ? chunk_bytes / elem_size : chunk_bytes;

	return e ? e : 1;
}

void
dt__coll_sched_free(dt__coll_sched *s)
{
	free(s->tx);
	free(s->rx);
	memset(s, 0, sizeof(*s));
}

static int
mod(int a, int n)
{
	return ((a % n) + n) % n;
}

/*
 * Messages for a block in a ring: an empty block still sends one empty
 * message, so that every rank hears from its neighbour at every step and
 * its completion depends on every other rank (the mismatch guarantee).
 */
static size_t
ring_nchunks(size_t len, size_t ce)
{
	return len == 0 ? 1 : dt__coll_nchunks(len, ce);
}

/* Append the chunks of one block to list at *pos. */
static void
add_chunks(dt__coll_msg *list, size_t *pos, size_t off, size_t len, size_t ce,
           uint8_t phase, int64_t dep_base, uint8_t from_src, uint8_t final)
{
	size_t nch = ring_nchunks(len, ce);

	for (size_t k = 0; k < nch; k++) {
		dt__coll_msg *m = &list[(*pos)++];
		m->off = off + k * ce;
		m->n = k + 1 < nch ? ce : len - k * ce;
		m->dep = dep_base < 0 ? -1 : dep_base + (int64_t)k;
		m->phase = phase;
		m->from_src = from_src;
		m->final = final;
	}
}

dt_err
dt__coll_ring_sched(int r, int n, const size_t *offs, const size_t *lens,
                    size_t ce, int rs, int ag, dt__coll_sched *s)
{
	size_t total = 0, ntx = 0, nrx = 0;
	int64_t *rs_base = NULL, *ag_base = NULL;

	memset(s, 0, sizeof(*s));
	s->to = s->from = -1;
	if (n < 2)
		return DT_OK;
	s->to = mod(r + 1, n);
	s->from = mod(r - 1, n);
	for (int b = 0; b < n; b++)
		total += ring_nchunks(lens[b], ce);
	/* Each phase moves every block but one through this rank. */
	size_t per_phase = total; /* upper bound */
	size_t cap = (size_t)((rs ? 1 : 0) + (ag ? 1 : 0)) * per_phase;
	s->tx = calloc(cap ? cap : 1, sizeof(*s->tx));
	s->rx = calloc(cap ? cap : 1, sizeof(*s->rx));
	rs_base = calloc((size_t)n, sizeof(*rs_base));
	ag_base = calloc((size_t)n, sizeof(*ag_base));
	if (!s->tx || !s->rx || !rs_base || !ag_base) {
		free(rs_base);
		free(ag_base);
		dt__coll_sched_free(s);
		return dt__fail(DT_ENOMEM, "ring schedule of %zu chunks", cap);
	}
	if (rs) {
		for (int st = 0; st < n - 1; st++) {
			int sb = mod(r - st - 1, n), rb = mod(r - st - 2, n);
			size_t t0 = ntx;

			rs_base[st] = (int64_t)nrx;
			add_chunks(s->tx, &ntx, offs[sb], lens[sb], ce,
			           DT__PH_RS, st == 0 ? -1 : rs_base[st - 1],
			           st == 0 ? 1 : 0, 0);
			for (size_t k = t0; k < ntx; k++)
				s->tx[k].step = (uint16_t)st;
			add_chunks(s->rx, &nrx, offs[rb], lens[rb], ce,
			           DT__PH_RS, -1, 0, st == n - 2);
		}
	}
	if (ag) {
		for (int st = 0; st < n - 1; st++) {
			int sb = mod(r - st, n), rb = mod(r - st - 1, n);
			int64_t dep;

			ag_base[st] = (int64_t)nrx;
			if (st > 0)
				dep = ag_base[st - 1];
			else
				dep = rs ? rs_base[n - 2] : -1;
			size_t t0 = ntx;

			add_chunks(s->tx, &ntx, offs[sb], lens[sb], ce,
			           DT__PH_AG, dep, 0, 0);
			for (size_t k = t0; k < ntx; k++)
				s->tx[k].step =
				    (uint16_t)((rs ? n - 1 : 0) + st);
			add_chunks(s->rx, &nrx, offs[rb], lens[rb], ce,
			           DT__PH_AG, -1, 0, 0);
		}
	}
	free(rs_base);
	free(ag_base);
	s->ntx = ntx;
	s->nrx = nrx;
	return DT_OK;
}

dt_err
dt__coll_chain_sched(int r, int n, int root, size_t count, size_t ce,
                     dt__coll_sched *s)
{
	int pos = mod(r - root, n);
	size_t nch = dt__coll_nchunks(count, ce), ntx = 0, nrx = 0;

	memset(s, 0, sizeof(*s));
	s->from = pos > 0 ? mod(r - 1, n) : -1;
	s->to = pos < n - 1 ? mod(r + 1, n) : -1;
	s->tx = calloc(nch ? nch : 1, sizeof(*s->tx));
	s->rx = calloc(nch ? nch : 1, sizeof(*s->rx));
	if (!s->tx || !s->rx) {
		dt__coll_sched_free(s);
		return dt__fail(DT_ENOMEM, "chain schedule of %zu chunks", nch);
	}
	if (s->from >= 0)
		add_chunks(s->rx, &nrx, 0, count, ce, DT__PH_BC, -1, 0, 0);
	if (s->to >= 0)
		add_chunks(s->tx, &ntx, 0, count, ce, DT__PH_BC,
		           s->from >= 0 ? 0 : -1, 0, 0);
	s->ntx = ntx;
	s->nrx = nrx;
	return DT_OK;
}

void
dt__coll_rd_plan(int r, int n, dt__coll_rd *rd)
{
	int p2 = 1, rounds = 0;

	while (p2 * 2 <= n) {
		p2 *= 2;
		rounds++;
	}
	rd->p2 = p2;
	rd->rounds = rounds;
	rd->extra_of = r >= p2 ? r - p2 : -1;
	rd->extra = r < n - p2 ? r + p2 : -1;
}

size_t
dt__coll_fusion_plan(const size_t *counts, size_t n, size_t elem_size,
                     size_t threshold, size_t *first)
{
	size_t nb = 0, cur = 0;
	int open = 0;

	for (size_t i = 0; i < n; i++) {
		size_t bytes = counts[i] * elem_size;

		if (open && (bytes > threshold || cur + bytes > threshold))
			open = 0;
		if (!open) {
			first[nb++] = i;
			cur = 0;
			open = 1;
		}
		cur += bytes;
		if (bytes > threshold)
			open = 0; /* a big tensor travels alone */
	}
	return nb;
}

/* Append the messages of ring schedule p to s, shifting its rx
 * dependencies by rx0 (the rx entries before it); a first-step message
 * without one waits for rx entry dep0 instead (-1: none). */
static void
hier_append(dt__coll_sched *s, const dt__coll_sched *p, int64_t dep0,
            int acc_work, int keep_final)
{
	int64_t rx0 = (int64_t)s->nrx;

	for (size_t i = 0; i < p->ntx; i++) {
		dt__coll_msg m = p->tx[i];

		m.dep = m.dep < 0 ? dep0 : m.dep + rx0;
		if (acc_work)
			m.from_src = 0;
		s->tx[s->ntx++] = m;
	}
	for (size_t i = 0; i < p->nrx; i++) {
		dt__coll_msg m = p->rx[i];

		m.acc_work = (uint8_t)(acc_work && m.phase == DT__PH_RS);
		m.final = (uint8_t)(keep_final && m.final);
		s->rx[s->nrx++] = m;
	}
}

/* The last of rx entries [lo, hi) that overlaps [off, +len), else hi - 1. */
static int64_t
hier_last_writer(const dt__coll_sched *s, size_t lo, size_t hi, uint64_t off,
                 uint64_t len)
{
	int64_t last = -1;

	for (size_t r = lo; r < hi; r++)
		if (s->rx[r].off < off + len && off < s->rx[r].off + s->rx[r].n)
			last = (int64_t)r;
	return last >= 0 ? last : (int64_t)hi - 1;
}

dt_err
dt__coll_hier_sched(int h, int H, int j, int L, size_t count, size_t ce,
                    dt__coll_sched *s, size_t n[6])
{
	dt__coll_sched p[3];
	size_t *offs = calloc((size_t)(L > H ? L : H), sizeof(size_t));
	size_t *lens = calloc((size_t)(L > H ? L : H), sizeof(size_t));
	size_t boff, blen, cap_tx = 0, cap_rx = 0;
	dt_err err = DT_OK;

	memset(s, 0, sizeof(*s));
	memset(p, 0, sizeof(p));
	s->to = s->from = -1;
	if (!offs || !lens) {
		err = dt__fail(DT_ENOMEM, "hierarchy of %d x %d ranks", H, L);
		goto fail;
	}
	for (int b = 0; b < L; b++)
		dt__coll_block(count, L, b, &offs[b], &lens[b]);
	if ((err = dt__coll_ring_sched(j, L, offs, lens, ce, 1, 0, &p[0])) ||
	    (err = dt__coll_ring_sched(j, L, offs, lens, ce, 0, 1, &p[2])))
		goto fail;
	/* Phase 2 works on my local block only, cut over the hosts. */
	boff = offs[j];
	blen = lens[j];
	for (int b = 0; b < H; b++) {
		dt__coll_block(blen, H, b, &offs[b], &lens[b]);
		offs[b] += boff;
	}
	if ((err = dt__coll_ring_sched(h, H, offs, lens, ce, 1, 1, &p[1])))
		goto fail;
	for (int k = 0; k < 3; k++) {
		cap_tx += p[k].ntx;
		cap_rx += p[k].nrx;
		n[k] = p[k].ntx;
		n[3 + k] = p[k].nrx;
	}
	s->tx = calloc(cap_tx ? cap_tx : 1, sizeof(*s->tx));
	s->rx = calloc(cap_rx ? cap_rx : 1, sizeof(*s->rx));
	if (!s->tx || !s->rx) {
		err = dt__fail(DT_ENOMEM, "hierarchical schedule of %zu chunks",
		               cap_tx + cap_rx);
		goto fail;
	}
	/* Phase 2 starts once phase 1 has summed my block over the host,
	 * phase 3 once phase 2 has summed it over the hosts (then each
	 * message as soon as its own range is ready, below); only phase 2's
	 * last reduction is final (AVG divides there). */
	hier_append(s, &p[0], -1, 0, 0);
	hier_append(s, &p[1], (int64_t)n[3] - 1, 1, 1);
	hier_append(s, &p[2], (int64_t)(n[3] + n[4]) - 1, 0, 0);
	/* Phase 2's first messages go as phase 1 finishes their range. */
	for (size_t i = n[0]; i < n[0] + n[1]; i++)
		if (p[1].tx[i - n[0]].dep < 0 && s->tx[i].n > 0)
			s->tx[i].dep = hier_last_writer(
			    s, 0, n[3], s->tx[i].off, s->tx[i].n);
	/* Phase 3's first messages forward my block as phase 2 finishes it:
	 * each waits only for the phase 2 messages that wrote its range, so
	 * the host's allgather overlaps the hosts' allgather. */
	for (size_t i = n[0] + n[1]; i < n[0] + n[1] + p[2].ntx; i++)
		if (p[2].tx[i - n[0] - n[1]].dep < 0 && s->tx[i].n > 0)
			s->tx[i].dep = hier_last_writer(
			    s, n[3], n[3] + n[4], s->tx[i].off, s->tx[i].n);
fail:
	for (int k = 0; k < 3; k++)
		dt__coll_sched_free(&p[k]);
	free(offs);
	free(lens);
	if (err)
		dt__coll_sched_free(s);
	return err;
}
