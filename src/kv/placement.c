/*
 * placement.c - which server holds which part of a key's array.
 *
 * Small arrays go whole to server (key mod S): keys numbered 0, 1, 2, ...
 * (one per layer, as trainers number them) land evenly on all servers,
 * where ps-lite's range partition puts every small key on server 0. Arrays
 * of at least MXNET_KVSTORE_BIGARRAY_BOUND elements are split evenly over
 * every server so no single server carries a big layer. Every worker
 * computes the same answer from (key, n), so no table is exchanged.
 */
#include "kv/kv_impl.h"

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
