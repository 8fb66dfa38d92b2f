/*
 * same_host.c - a communicator whose ranks all run on one host: what its
 * same-host algorithms (algo_cma.c) need, set up once when it starts
 * (api.c's comm_start) and freed with it. The pid of every rank, as the
 * kernel vouches for it; whether the ranks may copy each other's memory
 * (all agree); the slots the pushes write into; and the shared areas the
 * allreduce of more than 2 ranks goes through (net/cma.c makes and maps
 * them), with 2 ranks the fast boxes at their end (algo_fbox.c). An
 * elastic communicator, whose ranks move, has none of it.
 */
#include <stdlib.h>
#include <unistd.h>

#include "coll/algo.h"
#include "coll/comm.h"

/* Unmap the shared areas (probe_shared), mine and the peers'. */
static void
share_free(dt_coll *c)
{
	for (int r = 0; c->share_peer && r < c->size; r++)
		dt__cma_area_unmap(c->share_peer[r], c->share_bytes);
	free(c->share_peer);
	dt__cma_area_unmap(c->share_mine, c->share_bytes);
	c->share_peer = NULL;
	c->share_mine = NULL;
	c->share_max = 0;
	c->fbox_mine = NULL;
	c->fbox_peer = NULL;
	c->fbox_max = 0;
}

/*
 * When every rank runs on this host, find out whether they may read and
 * write each other's memory (process_vm_readv/writev need ptrace rights
 * over the peer): each rank publishes the address of a marker, reads
 * everyone else's and writes it back, and the ranks agree (allreduce min)
 * so that all use CMA or none does. Each also publishes two slot areas for
 * the others to write their inputs into (algo_cma.c, push), and their size
 * per rank; all then use the smallest. Each also offers a shared area
 * (its descriptor's number and size), which the others map
 * (probe_shared); all use them or none does.
 * Costs two small collectives at start-up, which users' numbering skips.
 */
enum {
	PROBE_WORDS = 12
}; /* mark, slot 0, slot 1, slot size, area's
      descriptor, area size: u64 each */

static uint64_t
probe_word(const int32_t *w, int i)
{
	return (uint64_t)(uint32_t)w[2 * i] | (uint64_t)(uint32_t)w[2 * i + 1]
	                                          << 32;
}

/* The fast boxes' part of an area: 2 ranks only. */
static size_t
fbox_bytes(const dt_coll *c)
{
	return c->size == 2 && c->cfg.cma_fbox_max
	           ? DT__FBOX_CTL + 2 * c->cfg.cma_fbox_max
	           : 0;
}

/* My shared area, when the ranks may use one: its descriptor (-1:
 * none). */
static int
share_create(dt_coll *c)
{
	/* (two halves: the input blocks, then the finished ones; with 2
	 * ranks the fast boxes after them) */
	size_t bytes = 2 * c->cfg.cma_shared_max + fbox_bytes(c);
	int fd = -1;
	void *addr;

	if (!c->cfg.cma || c->size < 2 || bytes == 0)
		return -1;
	if (dt__cma_area_create(bytes, &fd, &addr)) {
		DT_LOG(1, "collectives: no shared area (%s)", dt_errmsg());
		return -1;
	}
	c->share_mine = addr;
	c->share_bytes = bytes;
	return fd;
}

/* Map every peer's area (all[r * PROBE_WORDS]: its probe words) when
 * each offers one of my size; 1 if all are mapped. */
static int
probe_shared(dt_coll *c, const int32_t *all)
{
	c->share_peer = calloc((size_t)c->size, sizeof(*c->share_peer));
	if (c->share_mine == NULL || c->share_peer == NULL)
		return 0;
	for (int r = 0; r < c->size; r++) {
		const int32_t *w = all + (size_t)r * PROBE_WORDS;
		uint64_t fd = probe_word(w, 4), bytes = probe_word(w, 5);

		if (r == c->rank)
			continue;
		if (bytes != c->share_bytes || fd > INT32_MAX ||
		    dt__cma_area_map(c->pids[r], (int)fd, c->share_bytes,
		                     (const void **)&c->share_peer[r])) {
			DT_LOG(1,
			       "collectives: rank %d's shared area unused "
			       "(%s)",
			       r,
			       bytes != c->share_bytes
			           ? "another DT_COLL_CMA_SHARED_MAX or "
			             "DT_COLL_CMA_FBOX_MAX, or none"
			           : dt_errmsg());
			return 0;
		}
	}
	return 1;
}

static dt_err
probe_cma(dt_coll *c)
{
	uint64_t *mark = malloc(sizeof(*mark)), v = 0;
	int32_t *all = calloc((size_t)c->size * PROBE_WORDS, sizeof(int32_t));
	int32_t mine[PROBE_WORDS] = {0}, ok[3] = {c->cfg.cma, 0, 0};
	uint64_t words[PROBE_WORDS / 2] = {0};
	int share_fd = share_create(c);
	size_t push = dt__coll_push_bytes(c), others = (size_t)c->size - 1;
	dt_err err = DT_OK;

	c->push_remote = calloc(2 * (size_t)c->size, sizeof(uint64_t));
	if (mark == NULL || all == NULL || c->push_remote == NULL) {
		err = dt__fail(DT_ENOMEM, "CMA probe");
		goto out;
	}
	*mark = 0x636d610000000000ull + (uint64_t)c->rank;
	if (push && c->cfg.cma) {
		c->push_slot[0] = dt__aligned_alloc(push * others);
		c->push_slot[1] = dt__aligned_alloc(push * others);
		if (c->push_slot[0] == NULL || c->push_slot[1] == NULL)
			push = 0;
	}
	words[0] = (uint64_t)(uintptr_t)mark;
	words[1] = (uint64_t)(uintptr_t)c->push_slot[0];
	words[2] = (uint64_t)(uintptr_t)c->push_slot[1];
	words[3] = push && c->cfg.cma ? push : 0;
	words[4] = share_fd >= 0 ? (uint64_t)share_fd : UINT64_MAX;
	words[5] = share_fd >= 0 ? c->share_bytes : 0;
	for (int i = 0; i < PROBE_WORDS / 2; i++) {
		mine[2 * i] = (int32_t)(uint32_t)words[i];
		mine[2 * i + 1] = (int32_t)(uint32_t)(words[i] >> 32);
	}
	if ((err = dt_coll_allgather(c, mine, all, PROBE_WORDS, DT_INT32)))
		goto out;
	ok[1] = ok[0];
	for (int r = 0; ok[0] && r < c->size; r++) {
		const int32_t *w = all + (size_t)r * PROBE_WORDS;
		if (r == c->rank)
			continue;
		/* Read its mark, and write it back: the allreduces write
		 * their blocks into the peers' outputs. */
		if (dt__cma_read(c->pids[r], &v, probe_word(w, 0), sizeof(v)) ||
		    v != 0x636d610000000000ull + (uint64_t)r ||
		    dt__cma_write(c->pids[r], probe_word(w, 0), &v,
		                  sizeof(v))) {
			DT_LOG(1,
			       "collectives: cannot read and write rank %d's "
			       "memory (%s); using TCP for large messages",
			       r,
			       v && v != 0x636d610000000000ull + (uint64_t)r
			           ? "wrong data"
			           : dt_errmsg());
			ok[0] = ok[1] = 0;
			break;
		}
		if (!ok[1] || probe_word(w, 3) == 0 ||
		    dt__cma_write(c->pids[r], probe_word(w, 1), &v,
		                  sizeof(v))) {
			ok[1] = 0;
			continue;
		}
		c->push_remote[2 * r] = probe_word(w, 1);
		c->push_remote[2 * r + 1] = probe_word(w, 2);
		push = DT_MIN(push, probe_word(w, 3));
	}
	ok[2] = ok[0] && share_fd >= 0 && probe_shared(c, all);
	if ((err = dt_coll_allreduce(c, DT_COLL_IN_PLACE, ok, 3, DT_INT32,
	                             DT_COLL_MIN)))
		goto out;
	c->cma = ok[0];
	c->push_max = ok[0] && ok[1] ? push : 0;
	if (ok[0] && ok[2]) {
		size_t halves = 2 * c->cfg.cma_shared_max;

		c->share_max = c->cfg.cma_shared_max;
		if (fbox_bytes(c)) {
			c->fbox_max = c->cfg.cma_fbox_max;
			c->fbox_mine = c->share_mine + halves;
			c->fbox_peer = c->share_peer[1 - c->rank] + halves;
		}
	}
out:
	/* (every rank has mapped the areas, or given up, before the
	 * allreduce above completes) */
	if (share_fd >= 0)
		close(share_fd);
	if (c->share_max == 0 && c->fbox_max == 0)
		share_free(c);
	free(mark);
	free(all);
	return err;
}

int
dt__coll_cma_pid(int declared_pid, int kernel_pid)
{
	return kernel_pid > 0 && kernel_pid == declared_pid ? kernel_pid : 0;
}

/*
 * The pids for CMA, by rank (ours: getpid()): 1 if the kernel vouches for
 * every peer's, else 0 with the first one it does not vouch for logged
 * (PS_VERBOSE=1) and no CMA at all: with DTRAIN_TRANSPORT=tcp always,
 * since a TCP connection carries no credentials.
 */
static int
cma_pids(dt_coll *c)
{
	for (int r = 0; r < c->size; r++) {
		int id = c->base_id + r;
		const dt_node_entry *e = dt__node_entry(c->node, id);
		int declared = e ? e->pid : 0;
		int kernel = r == c->rank ? (int)getpid()
		                          : dt__node_peer_pid(c->node, id);

		c->pids[r] = dt__coll_cma_pid(declared, kernel);
		if (c->pids[r] == 0) {
			DT_LOG(
			    1,
			    "collectives: rank %d's pid is not vouched for "
			    "by the kernel (declared %d, connection's %d%s); "
			    "no cross-memory copies (CMA), large messages "
			    "go over the connections",
			    r, declared, kernel,
			    kernel ? ""
			           : ": not a same-host shared-memory "
			             "link");
			return 0;
		}
	}
	return 1;
}

dt_err
dt__coll_same_host_start(dt_coll *c)
{
	dt_err err;

	c->pids = calloc((size_t)c->size, sizeof(int));
	c->bounce_cap = 256u << 10;
	c->bounce = dt__aligned_alloc(c->bounce_cap);
	if (c->pids == NULL || c->bounce == NULL)
		return dt__fail(DT_ENOMEM, "CMA buffers");
	/* (the pids are checked through connections, made on demand: none
	 * is made for CMA that will not be used; the ranks' entries, with
	 * their declared pids, asked for now: every rank is on this host) */
	if (c->cfg.cma && (err = dt__node_lookup(c->node, c->base_id, c->size)))
		return err;
	if (!c->cfg.cma || !cma_pids(c))
		c->cfg.cma = 0; /* the probe agrees on no CMA */
	return probe_cma(c);
}

void
dt__coll_same_host_free(dt_coll *c)
{
	free(c->pids);
	free(c->bounce);
	free(c->push_slot[0]);
	free(c->push_slot[1]);
	free(c->push_remote);
	share_free(c);
}
