/*
 * coll.c - dtrain._dtrain.Coll, one dt_coll, and its Handle type.
 *
 * The methods map onto include/dtrain/coll.h; dtrain/torch.py gives them
 * Horovod's names. The element type of a call is the type of its arrays
 * (float32, float16, float64, int32). Every call of a collective is
 * described by one struct call, checked here with the GIL held, and run by
 * run_call without it - synchronously, or queued for the background thread
 * with a Handle that holds the arrays (and the per-rank counts of an
 * allgather) until it is waited on.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtpy.h"

/* The most tensors one allreduce_group_async takes: a model's parameter
 * count is far below; the cap bounds what one call can make C allocate. */
#define DTPY_GROUP_MAX 65536

typedef struct {
	PyObject_HEAD dt_coll *c;
	Py_ssize_t pending; /* Handles not yet waited on */
} CollObject;

enum coll_kind { K_ALLREDUCE, K_BROADCAST, K_ALLGATHERV, K_REDUCE_SCATTER };

/* One collective call: its arrays (held), the per-rank counts of an
 * allgather (malloc'd) and the scalars. */
struct call {
	enum coll_kind kind;
	dtpy_buf send, recv; /* recv.held 0 and send used in place */
	size_t *counts;
	size_t count;
	int op, root;
};

typedef struct {
	PyObject_HEAD CollObject *owner;
	dt_coll_handle *h;
	struct call call;
	int done;
} HandleObject;

/* A bucket of in-place allreduces started by one call: the tensors
 * (held) and one library handle for each, waited on together. */
typedef struct {
	PyObject_HEAD CollObject *owner;
	Py_ssize_t n;
	dtpy_buf *bufs;      /* n, held until the wait */
	dt_coll_handle **hs; /* n; NULL once waited on (the wait frees it) */
	int done;
} GroupObject;

static PyTypeObject CollType, HandleType, GroupType;

static int
need_open(CollObject *self)
{
	if (self->c != NULL)
		return 0;
	PyErr_SetString(PyExc_ValueError, "the communicator is finalized");
	return -1;
}

static void
call_release(struct call *k)
{
	dtpy_buf_release(&k->send);
	dtpy_buf_release(&k->recv);
	free(k->counts);
	k->counts = NULL;
}

static dt_err
run_call(dt_coll *c, struct call *k, dt_coll_handle **h)
{
	void *s = k->send.view.buf;
	void *r = k->recv.held ? k->recv.view.buf : s;
	dt_dtype t = k->send.dtype;

	switch (k->kind) {
	case K_ALLREDUCE:
		return h ? dt_coll_allreduce_async(c, s, r, k->count, t, k->op,
		                                   h)
		         : dt_coll_allreduce(c, s, r, k->count, t, k->op);
	case K_BROADCAST:
		return h ? dt_coll_broadcast_async(c, s, k->count, t, k->root,
		                                   h)
		         : dt_coll_broadcast(c, s, k->count, t, k->root);
	case K_ALLGATHERV:
		return h ? dt_coll_allgatherv_async(c, s, r, k->counts, t, h)
		         : dt_coll_allgatherv(c, s, r, k->counts, t);
	default:
		return h ? dt_coll_reduce_scatter_async(c, s, r, k->count, t,
		                                        k->op, h)
		         : dt_coll_reduce_scatter(c, s, r, k->count, t, k->op);
	}
}

static int
check_op(int op)
{
	if (op >= DT_COLL_SUM && op <= DT_COLL_MAX)
		return 0;
	PyErr_Format(PyExc_ValueError,
	             "argument 'op': %d is not a reduction (SUM, AVG, MIN, "
	             "MAX)",
	             op);
	return -1;
}

/* allreduce(tensor, output=None, op=SUM): output None is in place. */
static int
parse_allreduce(CollObject *self, PyObject *args, PyObject *kw, struct call *k)
{
	static char *names[] = {"tensor", "output", "op", NULL};
	PyObject *s, *r = Py_None;

	k->op = DT_COLL_SUM;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Oi", names, &s, &r,
	                                 &k->op) ||
	    check_op(k->op) < 0)
		return -1;
	if (dtpy_buf_get(s, "tensor", r == Py_None, DTPY_ALL, DT_FLOAT32,
	                 &k->send) < 0)
		return -1;
	k->count = k->send.count;
	if (r == Py_None)
		return 0;
	if (dtpy_buf_get(r, "output", 1, DTPY_ALL, k->send.dtype, &k->recv) < 0)
		return -1;
	return dtpy_buf_expect(&k->recv, "output", k->send.dtype, k->count);
}

/* broadcast(tensor, root=0): tensor is written on every rank but root. */
static int
parse_broadcast(CollObject *self, PyObject *args, PyObject *kw, struct call *k)
{
	static char *names[] = {"tensor", "root", NULL};
	PyObject *b;

	k->root = 0;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|i", names, &b, &k->root))
		return -1;
	if (dtpy_buf_get(b, "tensor", 1, DTPY_ALL, DT_FLOAT32, &k->send) < 0)
		return -1;
	k->count = k->send.count;
	return 0;
}

/* The per-rank counts of allgatherv from a sequence, or every rank
 * count when seq is NULL (allgather). */
static int
take_counts(CollObject *self, PyObject *seq, size_t count, struct call *k)
{
	int size = dt_coll_size(self->c);
	PyObject *fast = NULL;

	k->counts = calloc((size_t)size, sizeof(size_t));
	if (k->counts == NULL) {
		PyErr_NoMemory();
		return -1;
	}
	if (seq != NULL) {
		fast = PySequence_Fast(seq, "argument 'counts' must be a list");
		if (fast == NULL)
			return -1;
		if (PySequence_Fast_GET_SIZE(fast) != size) {
			PyErr_Format(PyExc_ValueError,
			             "argument 'counts': %zd entries, one per "
			             "rank (%d) expected",
			             PySequence_Fast_GET_SIZE(fast), size);
			Py_DECREF(fast);
			return -1;
		}
	}
	for (int i = 0; i < size; i++) {
		k->counts[i] = count;
		if (fast != NULL) {
			k->counts[i] =
			    PyLong_AsSize_t(PySequence_Fast_GET_ITEM(fast, i));
			if (PyErr_Occurred()) {
				Py_DECREF(fast);
				return -1;
			}
		}
	}
	Py_XDECREF(fast);
	return 0;
}

/* allgather(tensor, output, counts=None): counts per rank, or all equal. */
static int
parse_allgather(CollObject *self, PyObject *args, PyObject *kw, struct call *k)
{
	static char *names[] = {"tensor", "output", "counts", NULL};
	PyObject *s, *r, *counts = NULL;
	int size = dt_coll_size(self->c), rank = dt_coll_rank(self->c);
	size_t total = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O", names, &s, &r,
	                                 &counts))
		return -1;
	if (dtpy_buf_get(s, "tensor", 0, DTPY_ALL, DT_FLOAT32, &k->send) < 0 ||
	    dtpy_buf_get(r, "output", 1, DTPY_ALL, k->send.dtype, &k->recv) <
	        0 ||
	    take_counts(self, counts, k->send.count, k) < 0)
		return -1;
	if (k->counts[rank] != k->send.count) {
		PyErr_Format(
		    PyExc_ValueError,
		    "argument 'tensor': %zu elements, but counts[%d] is "
		    "%zu",
		    k->send.count, rank, k->counts[rank]);
		return -1;
	}
	for (int i = 0; i < size; i++)
		total += k->counts[i];
	return dtpy_buf_expect(&k->recv, "output", k->send.dtype, total);
}

/* reduce_scatter(tensor, output, op=SUM): tensor holds size x len(output). */
static int
parse_reduce_scatter(CollObject *self, PyObject *args, PyObject *kw,
                     struct call *k)
{
	static char *names[] = {"tensor", "output", "op", NULL};
	PyObject *s, *r;
	size_t size = (size_t)dt_coll_size(self->c);

	k->op = DT_COLL_SUM;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|i", names, &s, &r,
	                                 &k->op) ||
	    check_op(k->op) < 0)
		return -1;
	if (dtpy_buf_get(s, "tensor", 0, DTPY_ALL, DT_FLOAT32, &k->send) < 0 ||
	    dtpy_buf_get(r, "output", 1, DTPY_ALL, k->send.dtype, &k->recv) < 0)
		return -1;
	k->count = k->recv.count;
	return dtpy_buf_expect(&k->send, "tensor", k->recv.dtype,
	                       k->count * size);
}

typedef int (*parse_fn)(CollObject *, PyObject *, PyObject *, struct call *);

static const struct {
	enum coll_kind kind;
	parse_fn parse;
} parsers[] = {
    {K_ALLREDUCE, parse_allreduce},
    {K_BROADCAST, parse_broadcast},
    {K_ALLGATHERV, parse_allgather},
    {K_REDUCE_SCATTER, parse_reduce_scatter},
};

static PyObject *handle_new(CollObject *self, dt_coll_handle *h,
                            struct call *k);

/* Parse a call of kind, run it (want_handle: queue it) without the GIL. */
static PyObject *
coll_do(CollObject *self, enum coll_kind kind, int want_handle, PyObject *args,
        PyObject *kw)
{
	struct call k;
	dt_coll_handle *h = NULL;
	dt_err err;

	memset(&k, 0, sizeof(k));
	k.kind = kind;
	if (need_open(self) < 0)
		return NULL;
	if (parsers[kind].parse(self, args, kw, &k) < 0) {
		call_release(&k);
		return NULL;
	}
	DTPY_NOGIL(err = run_call(self->c, &k, want_handle ? &h : NULL));
	if (err == DT_OK && want_handle)
		return handle_new(self, h, &k);
	call_release(&k);
	if (err != DT_OK)
		return dtpy_raise(err);
	Py_RETURN_NONE;
}

#define COLL_WRAP(name, kind, want_handle)                                     \
	static PyObject *name(CollObject *self, PyObject *args, PyObject *kw)  \
	{                                                                      \
		return coll_do(self, kind, want_handle, args, kw);             \
	}
COLL_WRAP(coll_allreduce, K_ALLREDUCE, 0)
COLL_WRAP(coll_allreduce_async, K_ALLREDUCE, 1)
COLL_WRAP(coll_broadcast, K_BROADCAST, 0)
COLL_WRAP(coll_broadcast_async, K_BROADCAST, 1)
COLL_WRAP(coll_allgather, K_ALLGATHERV, 0)
COLL_WRAP(coll_allgather_async, K_ALLGATHERV, 1)
COLL_WRAP(coll_reduce_scatter, K_REDUCE_SCATTER, 0)
COLL_WRAP(coll_reduce_scatter_async, K_REDUCE_SCATTER, 1)

/*
 * _time_allreduce(tensor, iters, op=SUM): the seconds that iters in-place
 * allreduces of tensor take when C makes them back to back, without the
 * GIL. bench/py_bench.py times the same call from Python in the same
 * processes, in turns with this, so that the binding's own cost is set
 * against the C call's at the same moment of a busy machine.
 */
static PyObject *
coll_time_allreduce(CollObject *self, PyObject *args)
{
	PyObject *obj;
	long iters;
	struct call k;
	struct timespec t0, t1;
	dt_err err = DT_OK;

	memset(&k, 0, sizeof(k));
	k.kind = K_ALLREDUCE;
	k.op = DT_COLL_SUM;
	if (!PyArg_ParseTuple(args, "Ol|i", &obj, &iters, &k.op) ||
	    need_open(self) < 0 || check_op(k.op) < 0)
		return NULL;
	if (iters < 1 || iters > 100000000) {
		PyErr_Format(PyExc_ValueError,
		             "argument 'iters': %ld is not in 1..100000000",
		             iters);
		return NULL;
	}
	if (dtpy_buf_get(obj, "tensor", 1, DTPY_ALL, DT_FLOAT32, &k.send) < 0)
		return NULL;
	k.count = k.send.count;
	Py_BEGIN_ALLOW_THREADS;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < iters && err == DT_OK; i++)
		err = run_call(self->c, &k, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	Py_END_ALLOW_THREADS;
	call_release(&k);
	if (err != DT_OK)
		return dtpy_raise(err);
	return PyFloat_FromDouble((double)(t1.tv_sec - t0.tv_sec) +
	                          (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
}

/* ---- a bucket of allreduces: one call to start, one to wait ---- */

/* Take every tensor of seq (in place, so writable) into g->bufs. */
static int
group_take(GroupObject *g, PyObject *seq)
{
	PyObject *fast = PySequence_Fast(
	    seq, "argument 'tensors' must be a list of tensors");
	Py_ssize_t n;

	if (fast == NULL)
		return -1;
	n = PySequence_Fast_GET_SIZE(fast);
	if (n < 1 || n > DTPY_GROUP_MAX) {
		PyErr_Format(
		    PyExc_ValueError,
		    "argument 'tensors': %zd tensors, 1 to %d expected", n,
		    DTPY_GROUP_MAX);
		goto fail;
	}
	g->bufs = PyMem_Calloc((size_t)n, sizeof(dtpy_buf));
	g->hs = PyMem_Calloc((size_t)n, sizeof(dt_coll_handle *));
	if (g->bufs == NULL || g->hs == NULL) {
		PyErr_NoMemory();
		goto fail;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		char arg[32];

		snprintf(arg, sizeof(arg), "tensors[%zd]", i);
		if (dtpy_buf_get(PySequence_Fast_GET_ITEM(fast, i), arg, 1,
		                 DTPY_ALL, DT_FLOAT32, &g->bufs[i]) < 0)
			goto fail;
		g->n = i + 1; /* bufs[0..n) are held */
	}
	Py_DECREF(fast);
	return 0;
fail:
	Py_DECREF(fast);
	return -1;
}

/* Without the GIL: wait for every handle still open; the first error. */
static dt_err
group_wait_all(GroupObject *g)
{
	dt_err first = DT_OK, err;

	for (Py_ssize_t i = 0; i < g->n; i++) {
		if (g->hs[i] == NULL)
			continue;
		err = dt_coll_wait(g->hs[i]);
		g->hs[i] = NULL;
		if (err != DT_OK && first == DT_OK)
			first = err;
	}
	return first;
}

/* Without the GIL: record every allreduce in one group, so that the
 * library queues them as fused operations and its thread is woken once
 * rather than once a tensor. On an error the calls recorded so far are
 * still queued (group_end) and the caller waits for them. */
static dt_err
group_start_all(dt_coll *c, GroupObject *g, int op)
{
	dt_err err, end;

	if ((err = dt_coll_group_start(c)) != DT_OK)
		return err;
	for (Py_ssize_t i = 0; i < g->n && err == DT_OK; i++) {
		dtpy_buf *b = &g->bufs[i];
		err =
		    dt_coll_allreduce_async(c, b->view.buf, b->view.buf,
		                            b->count, b->dtype, op, &g->hs[i]);
	}
	end = dt_coll_group_end(c);
	return err != DT_OK ? err : end;
}

static void
group_release(GroupObject *g)
{
	for (Py_ssize_t i = 0; i < g->n; i++)
		dtpy_buf_release(&g->bufs[i]);
	g->n = 0;
}

/*
 * allreduce_group_async(tensors, op=SUM) -> Group: start the in-place
 * allreduce of every tensor of the list, in its order, as one group (the
 * library fuses them), with the GIL released once. The Group holds the
 * tensors until its wait().
 */
static PyObject *
coll_allreduce_group_async(CollObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = {"tensors", "op", NULL};
	PyObject *seq;
	GroupObject *g;
	int op = DT_COLL_SUM;
	dt_err err;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|i", names, &seq, &op) ||
	    check_op(op) < 0 || need_open(self) < 0)
		return NULL;
	if ((g = PyObject_New(GroupObject, &GroupType)) == NULL)
		return NULL;
	Py_INCREF(self);
	g->owner = self;
	g->n = 0;
	g->bufs = NULL;
	g->hs = NULL;
	g->done = 1; /* nothing to wait for until started */
	if (group_take(g, seq) < 0) {
		Py_DECREF(g);
		return NULL;
	}
	DTPY_NOGIL(err = group_start_all(self->c, g, op));
	if (err != DT_OK) {
		/* Whatever was queued runs on: wait before letting go. */
		DTPY_NOGIL((void)group_wait_all(g));
		Py_DECREF(g);
		return dtpy_raise(err);
	}
	g->done = 0;
	self->pending++;
	return (PyObject *)g;
}

/* Group.wait(): wait for every allreduce of the group (GIL released
 * once); raises the first error after all have finished. */
static PyObject *
group_wait(GroupObject *g, PyObject *unused)
{
	dt_err err;

	if (g->done)
		Py_RETURN_NONE;
	DTPY_NOGIL(err = group_wait_all(g));
	g->done = 1;
	g->owner->pending--;
	group_release(g);
	if (err != DT_OK)
		return dtpy_raise(err);
	Py_RETURN_NONE;
}

/* Group.poll(): True once every allreduce has finished. */
static PyObject *
group_poll(GroupObject *g, PyObject *unused)
{
	for (Py_ssize_t i = 0; !g->done && i < g->n; i++) {
		int done = 1;
		dt_err err = dt_coll_test(g->hs[i], &done);

		if (err != DT_OK)
			return dtpy_raise(err);
		if (!done)
			Py_RETURN_FALSE;
	}
	Py_RETURN_TRUE;
}

static void
group_dealloc(GroupObject *g)
{
	/* As a Handle: the library may still write the tensors. */
	if (!g->done) {
		PyObject *t, *v, *tb, *res;

		PyErr_Fetch(&t, &v, &tb);
		res = group_wait(g, NULL);
		Py_XDECREF(res);
		PyErr_Clear();
		PyErr_Restore(t, v, tb);
	}
	group_release(g);
	PyMem_Free(g->bufs);
	PyMem_Free(g->hs);
	Py_DECREF(g->owner);
	PyObject_Free(g);
}

static PyMethodDef group_methods[] = {
    {"wait", (PyCFunction)group_wait, METH_NOARGS,
     "wait for every allreduce of the group; raises the first error"},
    {"poll", (PyCFunction)group_poll, METH_NOARGS,
     "True once every allreduce of the group has finished"},
    {NULL},
};

static PyTypeObject GroupType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dtrain._dtrain.Group",
    .tp_basicsize = sizeof(GroupObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "in-place allreduces started together; wait() before "
              "reusing their tensors",
    .tp_dealloc = (destructor)group_dealloc,
    .tp_methods = group_methods,
};

static int
coll_tp_init(CollObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = {NULL};
	dt_coll *c = NULL;
	dt_err err;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "", names))
		return -1;
	if (self->c != NULL) {
		PyErr_SetString(PyExc_ValueError, "Coll is already created");
		return -1;
	}
	/* A scheduler (or server) process serves the job in here and exits;
	 * a worker waits for every rank: both without the GIL. */
	DTPY_NOGIL(err = dt_coll_init(&c));
	if (err != DT_OK) {
		dtpy_raise(err);
		return -1;
	}
	self->c = c;
	return 0;
}

static PyObject *
coll_finalize(CollObject *self, PyObject *unused)
{
	dt_coll *c = self->c;
	dt_err err;

	if (c == NULL)
		Py_RETURN_NONE;
	if (self->pending > 0)
		return PyErr_Format(PyExc_ValueError,
		                    "finalize: %zd asynchronous calls were not "
		                    "waited on",
		                    self->pending);
	self->c = NULL;
	DTPY_NOGIL(err = dt_coll_finalize(c));
	if (err != DT_OK)
		return dtpy_raise(err);
	Py_RETURN_NONE;
}

static void
coll_dealloc(CollObject *self)
{
	/* Handles hold a reference: none is pending here. finalize is
	 * collective; a program that forgets it still leaves cleanly. */
	if (self->c != NULL) {
		dt_coll *c = self->c;
		DTPY_NOGIL((void)dt_coll_finalize(c));
	}
	Py_TYPE(self)->tp_free((PyObject *)self);
}

/* barrier, group_start, group_end: no arguments. */
static PyObject *
coll_simple(CollObject *self, dt_err (*fn)(dt_coll *))
{
	dt_err err;

	if (need_open(self) < 0)
		return NULL;
	DTPY_NOGIL(err = fn(self->c));
	return err == DT_OK ? Py_NewRef(Py_None) : dtpy_raise(err);
}

static PyObject *
coll_barrier(CollObject *self, PyObject *unused)
{
	return coll_simple(self, dt_coll_barrier);
}

static PyObject *
coll_group_start(CollObject *self, PyObject *unused)
{
	return coll_simple(self, dt_coll_group_start);
}

static PyObject *
coll_group_end(CollObject *self, PyObject *unused)
{
	return coll_simple(self, dt_coll_group_end);
}

static PyObject *
coll_set_compression(CollObject *self, PyObject *args)
{
	const char *spec;
	dt_err err;

	if (!PyArg_ParseTuple(args, "s", &spec) || need_open(self) < 0)
		return NULL;
	DTPY_NOGIL(err = dt_coll_set_compression(self->c, spec));
	return err == DT_OK ? Py_NewRef(Py_None) : dtpy_raise(err);
}

static PyObject *
coll_get_int(CollObject *self, void *which)
{
	if (need_open(self) < 0)
		return NULL;
	switch ((int)(intptr_t)which) {
	case 0:
		return PyLong_FromLong(dt_coll_rank(self->c));
	case 1:
		return PyLong_FromLong(dt_coll_size(self->c));
	case 2:
		return PyLong_FromLong(dt_coll_local_rank(self->c));
	default:
		return PyLong_FromLong(dt_coll_local_size(self->c));
	}
}

static PyGetSetDef coll_getset[] = {
    {"rank", (getter)coll_get_int, NULL, "this rank", (void *)0},
    {"size", (getter)coll_get_int, NULL, "number of ranks", (void *)1},
    {"local_rank", (getter)coll_get_int, NULL, "rank on this host", (void *)2},
    {"local_size", (getter)coll_get_int, NULL, "ranks on this host", (void *)3},
    {NULL},
};

#define KWM METH_VARARGS | METH_KEYWORDS
static PyMethodDef coll_methods[] = {
    {"allreduce", DTPY_KW(coll_allreduce), KWM,
     "allreduce(tensor, output=None, op=SUM): output None is in place"},
    {"allreduce_async", DTPY_KW(coll_allreduce_async), KWM,
     "allreduce_async(tensor, output=None, op=SUM) -> Handle"},
    {"allreduce_group_async", DTPY_KW(coll_allreduce_group_async), KWM,
     "allreduce_group_async(tensors, op=SUM) -> Group: in place, fused"},
    {"broadcast", DTPY_KW(coll_broadcast), KWM, "broadcast(tensor, root=0)"},
    {"broadcast_async", DTPY_KW(coll_broadcast_async), KWM,
     "broadcast_async(tensor, root=0) -> Handle"},
    {"allgather", DTPY_KW(coll_allgather), KWM,
     "allgather(tensor, output, counts=None): counts per rank or equal"},
    {"allgather_async", DTPY_KW(coll_allgather_async), KWM,
     "allgather_async(tensor, output, counts=None) -> Handle"},
    {"reduce_scatter", DTPY_KW(coll_reduce_scatter), KWM,
     "reduce_scatter(tensor, output, op=SUM): size x len(output) in"},
    {"reduce_scatter_async", DTPY_KW(coll_reduce_scatter_async), KWM,
     "reduce_scatter_async(tensor, output, op=SUM) -> Handle"},
    {"barrier", (PyCFunction)coll_barrier, METH_NOARGS, "barrier"},
    {"group_start", (PyCFunction)coll_group_start, METH_NOARGS,
     "record the asynchronous calls until group_end (fused allreduces)"},
    {"group_end", (PyCFunction)coll_group_end, METH_NOARGS,
     "queue the recorded calls"},
    {"set_compression", (PyCFunction)coll_set_compression, METH_VARARGS,
     "set_compression(spec) of the distributed optimizer's reductions"},
    {"_time_allreduce", (PyCFunction)coll_time_allreduce, METH_VARARGS,
     "_time_allreduce(tensor, iters, op=SUM) -> seconds of iters calls "
     "made from C (for bench/py_bench.py)"},
    {"finalize", (PyCFunction)coll_finalize, METH_NOARGS,
     "leave the job (collective)"},
    {NULL},
};

static PyTypeObject CollType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dtrain._dtrain.Coll",
    .tp_basicsize = sizeof(CollObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Coll(): one dt_coll (include/dtrain/coll.h)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)coll_tp_init,
    .tp_dealloc = (destructor)coll_dealloc,
    .tp_methods = coll_methods,
    .tp_getset = coll_getset,
};

static PyObject *
handle_new(CollObject *self, dt_coll_handle *h, struct call *k)
{
	HandleObject *o = PyObject_New(HandleObject, &HandleType);

	if (o == NULL) {
		/* The call runs on: wait for it before letting go. */
		DTPY_NOGIL((void)dt_coll_wait(h));
		call_release(k);
		return NULL;
	}
	Py_INCREF(self);
	o->owner = self;
	o->h = h;
	o->call = *k;
	o->done = 0;
	self->pending++;
	return (PyObject *)o;
}

/* Handle.wait(): the call's result; then its arrays are let go. */
static PyObject *
handle_wait(HandleObject *o, PyObject *unused)
{
	dt_coll_handle *h = o->h;
	dt_err err;

	if (o->done)
		Py_RETURN_NONE;
	DTPY_NOGIL(err = dt_coll_wait(h));
	o->done = 1;
	o->owner->pending--;
	call_release(&o->call);
	if (err != DT_OK)
		return dtpy_raise(err);
	Py_RETURN_NONE;
}

/* Handle.poll(): True once the call has finished (wait() still needed). */
static PyObject *
handle_poll(HandleObject *o, PyObject *unused)
{
	int done = 1;
	dt_err err;

	if (o->done)
		Py_RETURN_TRUE;
	err = dt_coll_test(o->h, &done);
	if (err != DT_OK)
		return dtpy_raise(err);
	return PyBool_FromLong(done);
}

static void
handle_dealloc(HandleObject *o)
{
	/* The library uses the arrays until the wait: wait here rather than
	 * free memory it may still touch. */
	if (!o->done) {
		PyObject *t, *v, *tb, *res;

		PyErr_Fetch(&t, &v, &tb);
		res = handle_wait(o, NULL);
		Py_XDECREF(res);
		PyErr_Clear();
		PyErr_Restore(t, v, tb);
	}
	Py_DECREF(o->owner);
	PyObject_Free(o);
}

static PyMethodDef handle_methods[] = {
    {"wait", (PyCFunction)handle_wait, METH_NOARGS,
     "wait for the call; raises its error"},
    {"poll", (PyCFunction)handle_poll, METH_NOARGS,
     "True once the call has finished"},
    {NULL},
};

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dtrain._dtrain.Handle",
    .tp_basicsize = sizeof(HandleObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "an asynchronous collective; wait() before reusing its "
              "arrays",
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_methods = handle_methods,
};

dt_coll *
dtpy_coll_get(PyObject *obj, const char *arg)
{
	if (!PyObject_TypeCheck(obj, &CollType)) {
		PyErr_Format(
		    PyExc_TypeError,
		    "argument '%s': expected a dtrain Coll, got %.100s", arg,
		    Py_TYPE(obj)->tp_name);
		return NULL;
	}
	if (need_open((CollObject *)obj) < 0)
		return NULL;
	return ((CollObject *)obj)->c;
}

int
dtpy_coll_add(PyObject *module)
{
	if (PyType_Ready(&CollType) < 0 || PyType_Ready(&HandleType) < 0 ||
	    PyType_Ready(&GroupType) < 0)
		return -1;
	Py_INCREF(&CollType);
	if (PyModule_AddObject(module, "Coll", (PyObject *)&CollType) < 0) {
		Py_DECREF(&CollType);
		return -1;
	}
	return 0;
}
