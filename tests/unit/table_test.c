/*
 * table_test.c - the shared containers (common/table.h): the id-keyed hash
 * table against a plain array as the model, through growth, removal during
 * a walk and adversarial keys; the list's order and removal.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/table.h"

typedef struct item {
	uint64_t key;
	int present;
	dt_hnode hn;
	dt_lnode ln;
} item;

static uint64_t
rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void
test_table_model(void **state)
{
	enum { N = 20000 };
	item *it = calloc(N, sizeof(*it));
	dt_table t = {0}; /* an all-zero table is an empty one */
	uint64_t s = 88172645463325252ull;

	(void)state;
	assert_non_null(it);
	assert_null(dt__table_find(&t, 0));
	assert_null(dt__table_take(&t, 0));
	for (int i = 0; i < N; i++) /* distinct keys: strided, then random */
		it[i].key = i < N / 2 ? (uint64_t)i << 32 : rng(&s) | 1;
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < N; i++) {
			if (it[i].present || (rng(&s) & 1))
				continue;
			dt__table_insert(&t, &it[i].hn, it[i].key);
			it[i].present = 1;
		}
		for (int i = 0; i < N; i += 3) {
			dt_hnode *h = dt__table_take(&t, it[i].key);

			assert_true(h == (it[i].present ? &it[i].hn : NULL));
			it[i].present = 0;
		}
		size_t want = 0;
		for (int i = 0; i < N; i++) {
			dt_hnode *h = dt__table_find(&t, it[i].key);

			want += (size_t)it[i].present;
			assert_true(h == (it[i].present ? &it[i].hn : NULL));
		}
		assert_int_equal(dt__table_count(&t), want);
	}
	/* The table grows with its contents: chains stay short. */
	assert_true(t.nbuckets >= dt__table_count(&t));
	/* A walk sees each entry once and may remove the current one. */
	size_t seen = 0, before = dt__table_count(&t), left = before;
	dt_table_iter iter;
	for (dt_hnode *h = dt__table_first(&t, &iter); h;
	     h = dt__table_next(&iter)) {
		item *x = DT_CONTAINER_OF(h, item, hn);

		assert_true(x->present);
		x->present = 2;
		seen++;
		if (seen & 1) {
			dt__table_remove(&t, h);
			left--;
		}
	}
	assert_int_equal(seen, before);
	for (int i = 0; i < N; i++)
		assert_true(it[i].present != 1); /* none missed */
	assert_int_equal(dt__table_count(&t), left);
	dt__table_fini(&t);
	assert_int_equal(dt__table_count(&t), 0);
	free(it);
}

static void
test_list(void **state)
{
	item it[5];
	dt_list l;
	int order[5], n = 0;

	(void)state;
	dt__list_init(&l);
	assert_true(dt__list_empty(&l));
	assert_null(dt__list_first(&l));
	for (int i = 0; i < 5; i++) {
		it[i].key = (uint64_t)i;
		memset(&it[i].ln, 0, sizeof(it[i].ln));
		assert_false(dt__list_linked(&it[i].ln));
	}
	dt__list_push_back(&l, &it[1].ln);
	dt__list_push_back(&l, &it[2].ln);
	dt__list_push_front(&l, &it[0].ln);
	dt__list_push_back(&l, &it[3].ln);
	dt__list_push_back(&l, &it[4].ln);
	dt__list_remove(&it[2].ln);
	assert_false(dt__list_linked(&it[2].ln));
	for (dt_lnode *x = dt__list_first(&l); x; x = dt__list_next(&l, x))
		order[n++] = (int)DT_CONTAINER_OF(x, item, ln)->key;
	assert_int_equal(n, 4);
	assert_int_equal(order[0], 0);
	assert_int_equal(order[1], 1);
	assert_int_equal(order[2], 3);
	assert_int_equal(order[3], 4);
	assert_ptr_equal(dt__list_pop_front(&l), &it[0].ln);
	assert_ptr_equal(dt__list_pop_front(&l), &it[1].ln);
	assert_ptr_equal(dt__list_pop_front(&l), &it[3].ln);
	assert_ptr_equal(dt__list_pop_front(&l), &it[4].ln);
	assert_null(dt__list_pop_front(&l));
	assert_true(dt__list_empty(&l));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_table_model),
	    cmocka_unit_test(test_list),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
