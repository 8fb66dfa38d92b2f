/*
 * placement.c - which server holds which part of a key's array.
 *
 * A worker routes every dense request by the answer of this file; the
 * servers never compute it (a server keeps whatever slice it was given,
 * and so does its checkpoint), so every worker must reach the same answer
 * on its own, without a message. Two policies, behind one ops table, differ
 * in how they cut an array of at least the split bound:
 *
 * - "balanced" (the default) spreads bytes: such a key is placed when it
 *   is first initialised, in init order, by water filling - its floats go
 *   to the servers holding the fewest so far, raising them to one level,
 *   in contiguous parts, at most one a server (a server keeps one slice of
 *   a key). The map remembers each key's parts: the same inits in the same
 *   order give every worker, and a worker started in a lost one's place,
 *   the same map. The split bound is low (DTRAIN_KV_SPLIT_BYTES, 16 KiB),
 *   so the bytes of a model are nearly all in cut keys.
 * - "mxnet" is MXNet's rule and keeps nothing: such a key is split evenly
 *   over every server.
 *
 * An array under the bound lives whole on server key mod S in either
 * policy. The many-key store keeps such keys there, may hold millions of
 * them (too many to remember), and a key batched by one call may be
 * reached by a single-key call later: both must find the same server.
 */
#include <stdlib.h>
#include <string.h>

#include "common/table.h"
#include "kv/kv_impl.h"

/* One key's parts as the map placed them. */
typedef struct placed {
	dt_key key;
	size_t n;
	int nparts;
	dt_kv_part *parts;
	dt_hnode hn; /* in keys */
} placed;

typedef struct place_ops {
	const char *name;
	/* Place key (n >= the split bound floats, S > 1) now: fill parts,
	 * return their count, and count their floats in the loads. */
	int (*place)(dt_kv_map *m, dt_key key, size_t n, dt_kv_part *parts);
	/* Whether the answer depends on what was placed before, so that it
	 * is kept in the map. */
	int remembers;
} place_ops;

/* Cuts fall on multiples of this many floats (128 bytes: whole words of
 * the 1-bit and 2-bit codes, whole cache lines), so a part of a key packs
 * as the key would; each cut is within half of it of its place. */
#define DT_KV_CUT_ALIGN 32

struct dt_kv_map {
	const place_ops *ops;
	int S;
	size_t split;   /* floats: shorter arrays are never cut */
	size_t align;   /* floats: where cuts may fall */
	uint64_t *load; /* floats placed on each server */
	int *order;     /* scratch: servers by load */
	dt_table keys;  /* placed, by key (policies that remember) */
};

int
dt__kv_place(dt_key key, size_t n, int num_servers, size_t bound,
             dt_kv_part *parts)
{
	if (num_servers <= 1 || n < bound) {
		parts[0].server =
		    num_servers <= 1 ? 0 : (int)(key % (uint64_t)num_servers);
		parts[0].offset = 0;
		parts[0].len = n;
		return 1;
	}
	for (int i = 0; i < num_servers; i++) {
		size_t lo = n / (size_t)num_servers * (size_t)i +
		            DT_MIN((size_t)i, n % (size_t)num_servers);
		size_t len = n / (size_t)num_servers +
		             ((size_t)i < n % (size_t)num_servers ? 1 : 0);

		parts[i].server = i;
		parts[i].offset = lo;
		parts[i].len = len;
	}
	return num_servers;
}

static int
place_mxnet(dt_kv_map *m, dt_key key, size_t n, dt_kv_part *parts)
{
	return dt__kv_place(key, n, m->S, m->split, parts);
}

/* The servers in order of their loads, fewest floats first (ties: the
 * lower rank first), into m->order. S is small: an insertion sort. */
static void
by_load(dt_kv_map *m)
{
	for (int i = 0; i < m->S; i++) {
		int j = i;

		while (j > 0 && m->load[m->order[j - 1]] > m->load[i])
			j--;
		memmove(m->order + j + 1, m->order + j,
		        (size_t)(i - j) * sizeof(int));
		m->order[j] = i;
	}
}

/* x rounded to the nearest multiple of a (a power of two), at most n. */
static size_t
round_cut(uint64_t x, size_t a, size_t n)
{
	uint64_t r = (x + a / 2) & ~(uint64_t)(a - 1);

	return r > n ? n : (size_t)r;
}

/*
 * Water filling: the k least-loaded servers that n floats can raise to a
 * common level share them, each up to that level; the others get none.
 * Parts follow server rank and their cuts are rounded to m->align floats,
 * so each server ends within align floats of the level.
 */
static int
place_cut(dt_kv_map *m, size_t n, dt_kv_part *parts)
{
	uint64_t total = n, level, rem, cum = 0;
	size_t at = 0;
	int k = 0, np = 0;

	by_load(m);
	/* (Integers only: every worker computes the same cuts.) */
	for (int j = 0; j < m->S; j++) {
		uint64_t t = total + m->load[m->order[j]];

		if (m->load[m->order[j]] * (uint64_t)(j + 1) >= t)
			break;
		total = t;
		k = j + 1;
	}
	level = total / (uint64_t)k;
	rem = total % (uint64_t)k;
	for (int s = 0; s < m->S; s++) {
		uint64_t share;
		size_t end;
		int in = 0;

		for (int j = 0; j < k; j++)
			in |= m->order[j] == s;
		if (!in)
			continue;
		share = level - m->load[s] + (rem > 0 ? 1 : 0);
		if (rem > 0)
			rem--;
		cum += share;
		end = cum >= n ? n : round_cut(cum, m->align, n);
		if (end <= at)
			continue;
		parts[np].server = s;
		parts[np].offset = at;
		parts[np].len = end - at;
		m->load[s] += end - at;
		at = end;
		np++;
	}
	return np;
}

static int
place_balanced(dt_kv_map *m, dt_key key, size_t n, dt_kv_part *parts)
{
	(void)key;
	return place_cut(m, n, parts);
}

static const place_ops policies[] = {
    {"balanced", place_balanced, 1},
    {"mxnet", place_mxnet, 0},
};

dt_err
dt__kv_map_create(const char *policy, int nservers, size_t split,
                  dt_kv_map **out)
{
	const place_ops *ops = NULL;
	dt_kv_map *m;

	*out = NULL;
	for (size_t i = 0; i < DT_ARRAY_LEN(policies); i++)
		if (strcmp(policies[i].name, policy) == 0)
			ops = &policies[i];
	if (ops == NULL)
		return dt__fail(DT_ECONFIG,
		                "DTRAIN_KV_PLACEMENT: unknown placement '%s' "
		                "(balanced or mxnet)",
		                policy);
	if (nservers < 1 || split < 1)
		return dt__fail(DT_EINVAL,
		                "placement: %d servers and a split bound of "
		                "%zu floats",
		                nservers, split);
	if ((m = dt__calloc(1, sizeof(*m))) == NULL)
		return DT_ENOMEM;
	m->ops = ops;
	m->S = nservers;
	m->split = split;
	m->align = DT_KV_CUT_ALIGN;
	m->load = dt__calloc((size_t)nservers, sizeof(*m->load));
	m->order = dt__calloc((size_t)nservers, sizeof(*m->order));
	if (m->load == NULL || m->order == NULL) {
		dt__kv_map_destroy(m);
		return DT_ENOMEM;
	}
	*out = m;
	return DT_OK;
}

dt_err
dt__kv_map_from_env(int nservers, dt_kv_map **out)
{
	const char *policy = dt__env_str("DTRAIN_KV_PLACEMENT");
	long bytes, bound;
	dt_err err;

	*out = NULL;
	if (policy == NULL)
		policy = "balanced";
	if ((err = dt__env_long("DTRAIN_KV_SPLIT_BYTES", 16384, 4,
	                        (long)1 << 40, &bytes)) ||
	    (err = dt__env_long("MXNET_KVSTORE_BIGARRAY_BOUND", 1000000, 1,
	                        (long)1 << 40, &bound)))
		return err;
	/* MXNet's bound, when it is set, wins in either policy: it is in
	 * floats and says where arrays start to be cut. */
	if (dt__env_str("MXNET_KVSTORE_BIGARRAY_BOUND") == NULL &&
	    strcmp(policy, "mxnet") != 0)
		bound = bytes / 4;
	return dt__kv_map_create(policy, nservers, (size_t)bound, out);
}

void
dt__kv_map_destroy(dt_kv_map *m)
{
	dt_table_iter it;

	if (m == NULL)
		return;
	for (dt_hnode *h = dt__table_first(&m->keys, &it); h;
	     h = dt__table_next(&it)) {
		placed *p = DT_CONTAINER_OF(h, placed, hn);

		dt__table_remove(&m->keys, h);
		free(p->parts);
		free(p);
	}
	dt__table_fini(&m->keys);
	free(m->load);
	free(m->order);
	free(m);
}

/* Remember key's parts (np of them); 0 when out of memory. */
static int
remember(dt_kv_map *m, dt_key key, size_t n, const dt_kv_part *parts, int np)
{
	placed *p = calloc(1, sizeof(*p));

	if (p == NULL ||
	    (p->parts = malloc((size_t)np * sizeof(*parts))) == NULL) {
		free(p);
		return 0;
	}
	memcpy(p->parts, parts, (size_t)np * sizeof(*parts));
	p->key = key;
	p->n = n;
	p->nparts = np;
	dt__table_insert(&m->keys, &p->hn, key);
	return 1;
}

dt_err
dt__kv_map_parts(dt_kv_map *m, const char *op, dt_key key, size_t n, int place,
                 dt_kv_part *parts, int *nparts)
{
	dt_hnode *h = dt__table_find(&m->keys, key);
	placed *p = h ? DT_CONTAINER_OF(h, placed, hn) : NULL;

	*nparts = 0;
	if (p != NULL) {
		/* (The parts' offsets are p->n's: another length would
		 * read or write past the caller's array.) */
		if (p->n != n)
			return dt__fail(DT_ESIZE,
			                "%s of key %llu: length %zu != "
			                "initialised length %zu",
			                op, (unsigned long long)key, n, p->n);
		memcpy(parts, p->parts, (size_t)p->nparts * sizeof(*parts));
		*nparts = p->nparts;
		return DT_OK;
	}
	/* Arrays under the bound stay whole on key mod S in either policy:
	 * the many-key store keeps them there too, and it may hold millions
	 * of keys, too many for the map. */
	if (m->S <= 1 || n < m->split || !place || !m->ops->remembers) {
		*nparts = place && m->S > 1 && n >= m->split
		              ? m->ops->place(m, key, n, parts)
		              : dt__kv_place(key, n, m->S, m->split, parts);
		return DT_OK;
	}
	int np = m->ops->place(m, key, n, parts);

	if (!remember(m, key, n, parts, np)) {
		/* (Not placed after all: the loads go back.) */
		for (int i = 0; i < np; i++)
			m->load[parts[i].server] -= parts[i].len;
		return dt__fail(DT_ENOMEM,
		                "%s of key %llu: out of memory placing it", op,
		                (unsigned long long)key);
	}
	*nparts = np;
	return DT_OK;
}

size_t
dt__kv_map_split(const dt_kv_map *m)
{
	return m->split;
}

const char *
dt__kv_map_policy(const dt_kv_map *m)
{
	return m->ops->name;
}

uint64_t
dt__kv_map_load(const dt_kv_map *m, int server)
{
	return server >= 0 && server < m->S ? m->load[server] : 0;
}

/* ---- row tables: MXNet's rule in either policy ---- */

/* (rows * width >= bound, without overflow) */
static int
rows_split(uint64_t rows, size_t width, int S, size_t bound)
{
	return S > 1 && rows >= (uint64_t)S &&
	       (width == 0 ||
	        rows >= bound / width + (bound % width != 0 ? 1 : 0));
}

void
dt__kv_rows_place(dt_key key, uint64_t rows, size_t width, int S, size_t bound,
                  int i, uint64_t *lo, uint64_t *n)
{
	if (!rows_split(rows, width, S, bound)) {
		int home = S <= 1 ? 0 : (int)(key % (uint64_t)S);

		*lo = 0;
		*n = i == home ? rows : 0;
		return;
	}
	uint64_t q = rows / (uint64_t)S, r = rows % (uint64_t)S;

	*lo = q * (uint64_t)i + DT_MIN((uint64_t)i, r);
	*n = q + ((uint64_t)i < r ? 1 : 0);
}

int
dt__kv_rows_server(dt_key key, uint64_t rows, size_t width, int S, size_t bound,
                   uint64_t id)
{
	if (!rows_split(rows, width, S, bound))
		return S <= 1 ? 0 : (int)(key % (uint64_t)S);
	uint64_t q = rows / (uint64_t)S, r = rows % (uint64_t)S;

	if (id < r * (q + 1))
		return (int)(id / (q + 1));
	return (int)(r + (id - r * (q + 1)) / q);
}
