/*
 * tree_test.c - the control tree's shape (core/tree.c) and its message,
 * TREE (core/msg.c). For jobs of one host and of many, of arity 2 to 64,
 * every node is reached from the scheduler with no cycle, a node's parent
 * is of its host but for the host's leader (its lowest id), whose parent
 * is the scheduler or another leader, no node has more children than the
 * arity allows, and each subtree's counts are its node's and its
 * children's. A small job's tree is checked node by node. TREE round-trips
 * every node's place and refuses what a hostile peer could send: ids
 * outside the job, the node itself, a child twice or out of order, an
 * empty subtree, counts that do not add up, too many children, a length
 * that is not the count's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/bytes.h"
#include "core/msg.h"
#include "core/tree.h"

static void
assert_msg_has(const char *word)
{
	if (strstr(dt_errmsg(), word) == NULL)
		fail_msg("error message '%s' does not mention '%s'",
		         dt_errmsg(), word);
}

/* A table of 1 + ns + nw entries; node id on host "h<host(id)>". */
static dt_node_entry *
make_table(int ns, int nw, int (*host)(int id, int arg), int arg)
{
	int count = 1 + ns + nw;
	dt_node_entry *t = calloc((size_t)count, sizeof(*t));

	assert_non_null(t);
	for (int id = 0; id < count; id++) {
		t[id].id = id;
		t[id].role = id == 0    ? DT_ROLE_SCHEDULER
		             : id <= ns ? DT_ROLE_SERVER
		                        : DT_ROLE_WORKER;
		snprintf(t[id].host, sizeof(t[id].host), "h%d",
		         id == 0 ? -1 : host(id, arg));
		t[id].known = 1;
	}
	return t;
}

static int
one_host(int id, int arg)
{
	(void)id;
	(void)arg;
	return 0;
}

/* Hosts of arg nodes each, the ids dealt round-robin (so a host's ids
 * are not a run). */
static int
dealt(int id, int arg)
{
	return id % arg;
}

/* The lowest id of id's host. */
static int
leader_of(const dt_node_entry *t, int count, int id)
{
	for (int k = 1; k < count; k++)
		if (strcmp(t[k].host, t[id].host) == 0)
			return k;
	return id;
}

/* Every property of a tree that does not depend on the job's layout. */
static void
check_tree(const dt_node_entry *t, int ns, int nw, int arity)
{
	int count = 1 + ns + nw, depth_max = 0;
	dt__tree tr;

	assert_int_equal(dt__tree_build(t, count, arity, &tr), DT_OK);
	assert_int_equal(tr.count, count);
	assert_int_equal(tr.parent[0], -1);
	assert_true(tr.nkids[0] >= 1 && tr.nkids[0] <= arity);
	assert_int_equal(tr.servers[0], ns);
	assert_int_equal(tr.workers[0], nw);
	for (int id = 1; id < count; id++) {
		int p = tr.parent[id], lead = leader_of(t, count, id),
		    depth = 0;
		int s = t[id].role == DT_ROLE_SERVER, w = !s;

		/* reached: the walk up ends at the root, with no cycle */
		for (int a = id; a != 0; a = tr.parent[a]) {
			assert_true(a > 0 && a < count);
			assert_true(++depth < count);
		}
		if (depth > depth_max)
			depth_max = depth;
		/* host-aware: a leader under the root or a leader, any other
		 * node under a node of its host */
		assert_true(p >= 0 && p < count && p != id);
		if (lead == id)
			assert_true(p == 0 || leader_of(t, count, p) == p);
		else
			assert_string_equal(t[p].host, t[id].host);
		assert_true(tr.nkids[id] <= (lead == id ? 2 * arity : arity));
		/* the children list holds id under its parent, ascending */
		int found = 0;

		for (int c = 0; c < tr.nkids[p]; c++) {
			int kid = tr.kids[tr.first[p] + c];

			found += kid == id;
			if (c > 0)
				assert_true(kid > tr.kids[tr.first[p] + c - 1]);
		}
		assert_int_equal(found, 1);
		for (int c = 0; c < tr.nkids[id]; c++) {
			int kid = tr.kids[tr.first[id] + c];

			s += tr.servers[kid];
			w += tr.workers[kid];
		}
		assert_int_equal(tr.servers[id], s);
		assert_int_equal(tr.workers[id], w);
	}
	/* k-ary: about log_k N levels (one more for the hosts' level) */
	int bound = 2;

	for (long reach = arity; reach < count; reach *= arity)
		bound += 2;
	assert_true(depth_max <= bound);
	dt__tree_free(&tr);
}

static void
test_shape_one_host(void **state)
{
	int sizes[][3] = {{0, 1, 2},     {1, 1, 2},    {2, 6, 2},
	                  {4, 1996, 16}, {8, 992, 64}, {3, 250, 3}};

	(void)state;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		dt_node_entry *t =
		    make_table(sizes[i][0], sizes[i][1], one_host, 0);

		check_tree(t, sizes[i][0], sizes[i][1], sizes[i][2]);
		free(t);
	}
}

static void
test_shape_hosts(void **state)
{
	dt_node_entry *t;
	dt__tree tr;

	(void)state;
	/* 2,000 nodes on 20 hosts of 100, arity 16: 16 leaders under the
	 * root, the other 4 under the first leaders */
	t = make_table(4, 1996, dealt, 20);
	check_tree(t, 4, 1996, 16);
	assert_int_equal(dt__tree_build(t, 2001, 16, &tr), DT_OK);
	assert_int_equal(tr.nkids[0], 16);
	for (int c = 0; c < 16; c++)
		assert_int_equal(tr.kids[tr.first[0] + c], 1 + c);
	assert_int_equal(tr.parent[17], 1);
	assert_int_equal(tr.parent[20], 1);
	dt__tree_free(&tr);
	free(t);
	/* many small hosts, a small arity */
	t = make_table(5, 60, dealt, 13);
	check_tree(t, 5, 60, 2);
	free(t);
	/* one node per host */
	t = make_table(3, 97, dealt, 100);
	check_tree(t, 3, 97, 4);
	free(t);
}

static int
two_hosts(int id, int arg)
{
	(void)arg;
	return id % 2 == 0;
}

/* 1 server and 4 workers, arity 2; host 0: 1, 3, 5; host 1: 2, 4. */
static void
test_shape_small(void **state)
{
	dt_node_entry *t = make_table(1, 4, two_hosts, 0);
	int parent[] = {-1, 0, 0, 1, 2, 1};
	int servers[] = {1, 1, 0, 0, 0, 0}, workers[] = {4, 2, 2, 1, 1, 1};
	dt__tree tr;
	dt__tree_place p;

	(void)state;
	assert_int_equal(dt__tree_build(t, 6, 2, &tr), DT_OK);
	for (int id = 0; id < 6; id++) {
		assert_int_equal(tr.parent[id], parent[id]);
		assert_int_equal(tr.servers[id], servers[id]);
		assert_int_equal(tr.workers[id], workers[id]);
	}
	dt__tree_place_of(&tr, 1, &p);
	assert_int_equal(p.parent, 0);
	assert_int_equal(p.nkids, 2);
	assert_int_equal(p.kid[0].id, 3);
	assert_int_equal(p.kid[1].id, 5);
	assert_int_equal(p.kid[1].workers, 1);
	assert_int_equal(p.kid[1].servers, 0);
	dt__tree_free(&tr);
	free(t);
}

static void
test_shape_bad_arity(void **state)
{
	dt_node_entry *t = make_table(1, 4, one_host, 0);
	dt__tree tr;

	(void)state;
	assert_int_equal(dt__tree_build(t, 6, 1, &tr), DT_EINVAL);
	assert_msg_has("arity 1");
	assert_int_equal(dt__tree_build(t, 6, DT_TREE_ARITY_MAX + 1, &tr),
	                 DT_EINVAL);
	assert_null(tr.parent);
	free(t);
}

/* A decoded place equals the one encoded. */
static void
assert_place_equal(const dt__tree_place *q, const dt__tree_place *p)
{
	assert_int_equal(q->parent, p->parent);
	assert_int_equal(q->servers, p->servers);
	assert_int_equal(q->workers, p->workers);
	assert_int_equal(q->nkids, p->nkids);
	assert_memory_equal(q->kid, p->kid,
	                    sizeof(p->kid[0]) * (size_t)p->nkids);
}

/* Every node's TREE of a job decodes to its place, bit for bit. */
static void
test_codec_roundtrip(void **state)
{
	dt_node_entry *t = make_table(4, 300, dealt, 7);
	dt__tree tr;

	(void)state;
	assert_int_equal(dt__tree_build(t, 305, 64, &tr), DT_OK);
	for (int id = 1; id < 305; id++) {
		dt__tree_place p, q;
		dt_wbuf w;

		dt__tree_place_of(&tr, id, &p);
		dt__wbuf_init(&w);
		assert_int_equal(dt__msg_tree_encode(&p, &w), DT_OK);
		assert_int_equal(w.len, 16 + 12 * (size_t)p.nkids);
		assert_int_equal(
		    dt__msg_tree_decode(w.data, w.len, id, 4, 300, &q), DT_OK);
		assert_place_equal(&q, &p);
		dt__wbuf_fini(&w);
	}
	dt__tree_free(&tr);
	free(t);
}

/*
 * Every node's ASSIGN in a job with a control tree, as the scheduler
 * makes it (directory.c): the assignment, a worker's with the servers'
 * entries, then its place, then its parent's entry when the assignment
 * does not carry it. Each decodes to the place bit for bit, and the one
 * reply is all a node needs to dial its parent.
 */
static void
test_assign_tree_roundtrip(void **state)
{
	int ns = 4, nw = 300, count = 1 + ns + nw, carried = 0;
	dt_node_entry *t = make_table(ns, nw, dealt, 7);
	dt__tree tr;

	(void)state;
	for (int id = 1; id < count; id++) {
		t[id].port = 1000 + id;
		t[id].pid = 2000 + id;
	}
	assert_int_equal(dt__tree_build(t, count, 16, &tr), DT_OK);
	for (int id = 1; id < count; id++) {
		dt__msg_assign a = {.id = id,
		                    .num_servers = ns,
		                    .slots = nw,
		                    .here = 1,
		                    .sched_pid = 1},
		               b;
		int given = id > ns ? ns : 0, first, n;
		dt__tree_place p, q;
		dt_node_entry *got, parent;
		dt_wbuf w;

		dt__tree_place_of(&tr, id, &p);
		dt__wbuf_init(&w);
		assert_int_equal(dt__msg_assign_encode(&a, 1, given, t + 1, &w),
		                 DT_OK);
		assert_int_equal(
		    dt__msg_assign_tree_encode(
		        &p, p.parent > given ? &t[p.parent] : NULL, &w),
		    DT_OK);
		assert_int_equal(dt__msg_assign_tree_decode(w.data, w.len, &b,
		                                            &first, &n, &got,
		                                            &q, &parent),
		                 DT_OK);
		assert_int_equal(b.id, id);
		assert_int_equal(n, given);
		assert_place_equal(&q, &p);
		/* the parent's address: carried, or among the servers' */
		if (p.parent > given) {
			assert_true(parent.known);
			assert_int_equal(parent.id, p.parent);
			assert_int_equal(parent.port, 1000 + p.parent);
			assert_string_equal(parent.host, t[p.parent].host);
			carried++;
		} else {
			assert_false(parent.known);
			assert_true(p.parent == 0 || p.parent <= given);
		}
		/* a worker under a worker: its reply stays small */
		if (id > ns && p.parent > ns)
			assert_true(w.len < 1024);
		free(got);
		dt__wbuf_fini(&w);
	}
	assert_true(carried > 0);
	dt__tree_free(&tr);
	free(t);
}

/* An ASSIGN with a place that is not whole, or more than it, is refused
 * before anything is kept. */
static void
test_assign_tree_refuses(void **state)
{
	dt_node_entry e[2] = {{.known = 1, .port = 9, .pid = 1},
	                      {.known = 1, .port = 10, .pid = 2}};
	/* node 3 of 1 server and 4 workers, under worker 2, children 4, 5 */
	dt__tree_place p = {.parent = 2,
	                    .servers = 0,
	                    .workers = 3,
	                    .nkids = 2,
	                    .kid = {{4, 0, 1}, {5, 0, 1}}},
	               q;
	dt__msg_assign a = {.id = 3,
	                    .num_servers = 1,
	                    .slots = 4,
	                    .here = 1,
	                    .sched_pid = 1},
	               b;
	dt_node_entry *got, parent;
	int first, n;
	dt_wbuf w;

	(void)state;
	snprintf(e[0].host, sizeof(e[0].host), "s");
	snprintf(e[1].host, sizeof(e[1].host), "w");
	dt__wbuf_init(&w);
	assert_int_equal(dt__msg_assign_encode(&a, 1, 1, e, &w), DT_OK);
	assert_int_equal(dt__msg_assign_tree_encode(&p, &e[1], &w), DT_OK);
	assert_int_equal(dt__msg_assign_tree_decode(w.data, w.len, &b, &first,
	                                            &n, &got, &q, &parent),
	                 DT_OK);
	assert_true(parent.known);
	assert_string_equal(parent.host, "w");
	free(got);
	/* cut anywhere: refused, nothing to free */
	for (size_t len = 0; len < w.len; len++) {
		got = (dt_node_entry *)&w; /* (must come back NULL) */
		assert_int_equal(dt__msg_assign_tree_decode(w.data, len, &b,
		                                            &first, &n, &got,
		                                            &q, &parent),
		                 DT_EPROTO);
		assert_null(got);
	}
	/* a byte more */
	dt__wbuf_u8(&w, 0);
	assert_int_equal(dt__msg_assign_tree_decode(w.data, w.len, &b, &first,
	                                            &n, &got, &q, &parent),
	                 DT_EPROTO);
	assert_msg_has("after the tree");
	assert_null(got);
	dt__wbuf_fini(&w);
	/* an address given for the scheduler as the parent */
	p.parent = 0;
	dt__wbuf_init(&w);
	assert_int_equal(dt__msg_assign_encode(&a, 1, 1, e, &w), DT_OK);
	assert_int_equal(dt__msg_tree_encode(&p, &w), DT_OK);
	dt__wbuf_u8(&w, 1);
	dt__wbuf_str(&w, "x");
	dt__wbuf_u32(&w, 9);
	dt__wbuf_u32(&w, 1);
	dt__wbuf_str(&w, "");
	dt__wbuf_str(&w, "");
	assert_int_equal(dt__msg_assign_tree_decode(w.data, w.len, &b, &first,
	                                            &n, &got, &q, &parent),
	                 DT_EPROTO);
	assert_msg_has("scheduler");
	assert_null(got);
	dt__wbuf_fini(&w);
}

/* A TREE body from u32 words. */
static size_t
words(uint8_t *out, const uint32_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dt__put_u32(out + 4 * i, v[i]);
	return 4 * n;
}

/* Node 3 of a job of 1 server and 4 workers (ids 1..5). */
static void
refused(const uint32_t *v, size_t n, const char *word)
{
	uint8_t b[64];
	size_t len = words(b, v, n);
	dt__tree_place p;

	assert_int_equal(dt__msg_tree_decode(b, len, 3, 1, 4, &p), DT_EPROTO);
	assert_msg_has(word);
}

static void
test_codec_refuses(void **state)
{
	uint8_t b[64];
	dt__tree_place p;
	/* node 3 under 1, children 4 and 5: 0 servers, 3 workers */
	uint32_t good[] = {1, 0, 3, 2, 4, 0, 1, 5, 0, 1};

	(void)state;
	assert_int_equal(
	    dt__msg_tree_decode(b, words(b, good, 10), 3, 1, 4, &p), DT_OK);
	assert_int_equal(p.nkids, 2);
	refused((uint32_t[]){6, 0, 1, 0}, 4, "parent 6");
	refused((uint32_t[]){3, 0, 1, 0}, 4, "parent 3");
	refused((uint32_t[]){1, 0, 1}, 3, "TREE");
	refused((uint32_t[]){1, 0, 2, 1, 3, 0, 1}, 7, "child 0");
	refused((uint32_t[]){1, 0, 2, 1, 1, 0, 1}, 7, "child 0");
	refused((uint32_t[]){1, 0, 2, 1, 0, 0, 1}, 7, "child 0");
	refused((uint32_t[]){1, 0, 2, 1, 6, 0, 1}, 7, "child 0");
	refused((uint32_t[]){1, 0, 3, 2, 5, 0, 1, 4, 0, 1}, 10, "child 1");
	refused((uint32_t[]){1, 0, 3, 2, 4, 0, 1, 4, 0, 1}, 10, "child 1");
	refused((uint32_t[]){1, 0, 1, 1, 4, 0, 0}, 7, "subtree");
	refused((uint32_t[]){1, 0, 9, 1, 4, 0, 8}, 7, "subtree");
	refused((uint32_t[]){1, 0, 3, 1, 4, 0, 1}, 7, "count");
	refused((uint32_t[]){1, 1, 2, 1, 4, 0, 1}, 7, "count");
	refused((uint32_t[]){1, 0, 1, 1}, 4, "children");
	refused((uint32_t[]){1, 0, 1, 0, 7}, 5, "children");
	refused((uint32_t[]){1, 0, 1, DT_TREE_KIDS_MAX + 1}, 4, "children");
	refused((uint32_t[]){1, 0, 1, 0xffffffffu}, 4, "children");
}

/* TREE_LOST: a round trip, and each field out of bounds refused, in a job
 * of nodes 1..5. */
static void
test_lost_codec(void **state)
{
	dt__msg_tree_lost l = {5, DT_TREE_LOST_SILENT, 2100000000ull}, q;
	uint8_t b[24];
	dt_wbuf w;

	(void)state;
	dt__wbuf_init(&w);
	assert_int_equal(dt__msg_tree_lost_encode(&l, &w), DT_OK);
	assert_int_equal(w.len, 16);
	assert_int_equal(dt__msg_tree_lost_decode(w.data, w.len, 6, &q), DT_OK);
	assert_int_equal(q.lost, 5);
	assert_int_equal(q.reason, DT_TREE_LOST_SILENT);
	assert_true(q.silent_ns == l.silent_ns);
	for (size_t cut = 0; cut < w.len; cut++) {
		assert_int_equal(dt__msg_tree_lost_decode(w.data, cut, 6, &q),
		                 DT_EPROTO);
		assert_msg_has("TREE_LOST");
	}
	memcpy(b, w.data, 16);
	memset(b + 16, 0, 8);
	assert_int_equal(dt__msg_tree_lost_decode(b, 17, 6, &q), DT_EPROTO);
	assert_msg_has("17 bytes");
	/* a node past the job, node 0, another reason, a silence too long */
	assert_int_equal(dt__msg_tree_lost_decode(w.data, w.len, 5, &q),
	                 DT_EPROTO);
	assert_msg_has("node 5");
	dt__put_u32(b, 0);
	assert_int_equal(dt__msg_tree_lost_decode(b, 16, 6, &q), DT_EPROTO);
	assert_msg_has("node 0");
	dt__put_u32(b, 2);
	dt__put_u32(b + 4, 3);
	assert_int_equal(dt__msg_tree_lost_decode(b, 16, 6, &q), DT_EPROTO);
	assert_msg_has("reason 3");
	dt__put_u32(b + 4, DT_TREE_LOST_CLOSED);
	assert_int_equal(dt__msg_tree_lost_decode(b, 16, 6, &q), DT_OK);
	assert_int_equal(q.reason, DT_TREE_LOST_CLOSED);
	dt__put_u64(b + 8, DT_TREE_LOST_SILENT_MAX + 1);
	assert_int_equal(dt__msg_tree_lost_decode(b, 16, 6, &q), DT_EPROTO);
	assert_msg_has("silent");
	dt__wbuf_fini(&w);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_shape_one_host),
	    cmocka_unit_test(test_shape_hosts),
	    cmocka_unit_test(test_shape_small),
	    cmocka_unit_test(test_shape_bad_arity),
	    cmocka_unit_test(test_codec_roundtrip),
	    cmocka_unit_test(test_codec_refuses),
	    cmocka_unit_test(test_assign_tree_roundtrip),
	    cmocka_unit_test(test_assign_tree_refuses),
	    cmocka_unit_test(test_lost_codec),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
