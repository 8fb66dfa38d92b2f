/*
 * kv.c - dtrain._dtrain.KV, one dt_kv, and its Request type.
 *
 * The methods map one to one onto include/dtrain/kv.h; dtrain/kv.py gives
 * them MXNet's names and argument forms (lists of keys, string keys,
 * optimizer keywords). float32 arrays use the plain calls and float16 ones
 * the _fp16 calls (multi-precision). A Request holds the buffers of an
 * asynchronous call, and a reference to its store, until it is waited on;
 * a store with unfinished requests refuses to close.
 */
#include <string.h>

#include "dtpy.h"

typedef struct {
	PyObject_HEAD dt_kv *kv;
	Py_ssize_t pending; /* Requests not yet waited on */
} KVObject;

typedef struct {
	PyObject_HEAD KVObject *owner;
	dt_kv_req req;
	dtpy_buf val, out;
	int done;
} RequestObject;

enum kv_op { OP_INIT, OP_PUSH, OP_PULL, OP_PUSHPULL };

static PyTypeObject KVType, RequestType;

static int
need_open(KVObject *self)
{
	if (self->kv != NULL)
		return 0;
	PyErr_SetString(PyExc_ValueError, "the KVStore is closed");
	return -1;
}

static int
kv_tp_init(KVObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = {"type", NULL};
	const char *type;
	dt_kv *kv = NULL;
	dt_err err;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "s", names, &type))
		return -1;
	if (self->kv != NULL) {
		PyErr_SetString(PyExc_ValueError, "KV is already created");
		return -1;
	}
	/* A server or scheduler process serves the whole job in here and
	 * exits; a worker waits for the cluster: both without the GIL. */
	DTPY_NOGIL(err = dt_kv_create(type, &kv));
	if (err != DT_OK) {
		dtpy_raise(err);
		return -1;
	}
	self->kv = kv;
	return 0;
}

static dt_err
destroy_nogil(dt_kv *kv)
{
	dt_err err;

	DTPY_NOGIL(err = dt_kv_destroy(kv));
	return err;
}

static void
kv_dealloc(KVObject *self)
{
	/* Requests hold a reference, so none is pending here. */
	if (self->kv != NULL)
		(void)destroy_nogil(self->kv);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
kv_close(KVObject *self, PyObject *unused)
{
	dt_kv *kv = self->kv;
	dt_err err;

	if (kv == NULL)
		Py_RETURN_NONE;
	if (self->pending > 0)
		return PyErr_Format(PyExc_ValueError,
		                    "close: %zd asynchronous requests were not "
		                    "waited on",
		                    self->pending);
	self->kv = NULL;
	if ((err = destroy_nogil(kv)) != DT_OK)
		return dtpy_raise(err);
	Py_RETURN_NONE;
}

/* The C call of op on key for the element type of the buffers; req NULL:
 * synchronous. Runs without the GIL. */
static dt_err
call_op(dt_kv *kv, enum kv_op op, dt_key key, dtpy_buf *val, dtpy_buf *out,
        dt_kv_req *req)
{
	void *v = val->view.buf, *o = out->view.buf;
	size_t n = v != NULL ? val->count : out->count;

	if ((v != NULL ? val->dtype : out->dtype) == DT_FLOAT16) {
		switch (op) {
		case OP_INIT:
			return dt_kv_init_fp16(kv, key, v, n);
		case OP_PUSH:
			return req ? dt_kv_push_fp16_async(kv, key, v, n, req)
			           : dt_kv_push_fp16(kv, key, v, n);
		case OP_PULL:
			return req ? dt_kv_pull_fp16_async(kv, key, o, n, req)
			           : dt_kv_pull_fp16(kv, key, o, n);
		default:
			return req ? dt_kv_pushpull_fp16_async(kv, key, v, o, n,
			                                       req)
			           : dt_kv_pushpull_fp16(kv, key, v, o, n);
		}
	}
	switch (op) {
	case OP_INIT:
		return dt_kv_init(kv, key, v, n);
	case OP_PUSH:
		return req ? dt_kv_push_async(kv, key, v, n, req)
		           : dt_kv_push(kv, key, v, n);
	case OP_PULL:
		return req ? dt_kv_pull_async(kv, key, o, n, req)
		           : dt_kv_pull(kv, key, o, n);
	default:
		return req ? dt_kv_pushpull_async(kv, key, v, o, n, req)
		           : dt_kv_pushpull(kv, key, v, o, n);
	}
}

/*
 * Take the arrays of op: val (read) and out (written). For a pushpull
 * without out the value is updated in place, so val is taken writable and
 * used as both. On success the buffers are held by *bv and *bo.
 */
static int
take_arrays(enum kv_op op, PyObject *val, PyObject *out, dtpy_buf *bv,
            dtpy_buf *bo)
{
	const unsigned ok = DTPY_F32 | DTPY_F16;
	int in_place = op == OP_PUSHPULL && (out == NULL || out == Py_None);

	memset(bo, 0, sizeof(*bo));
	memset(bv, 0, sizeof(*bv));
	if (op != OP_PULL &&
	    dtpy_buf_get(val, "value", in_place, ok, DT_FLOAT32, bv) < 0)
		return -1;
	if (op == OP_PULL || (op == OP_PUSHPULL && !in_place)) {
		if (dtpy_buf_get(out, "out", 1, ok, DT_FLOAT32, bo) < 0)
			goto fail;
		if (op == OP_PUSHPULL &&
		    dtpy_buf_expect(bo, "out", bv->dtype, bv->count) < 0)
			goto fail;
	}
	return 0;
fail:
	dtpy_buf_release(bv);
	dtpy_buf_release(bo);
	return -1;
}

/* A Request for req, which takes over the buffers. */
static PyObject *
request_new(KVObject *self, dt_kv_req req, dtpy_buf *bv, dtpy_buf *bo)
{
	RequestObject *r = PyObject_New(RequestObject, &RequestType);

	if (r == NULL) {
		/* The call runs on: wait for it before letting go. */
		DTPY_NOGIL((void)dt_kv_wait(self->kv, req));
		dtpy_buf_release(bv);
		dtpy_buf_release(bo);
		return NULL;
	}
	Py_INCREF(self);
	r->owner = self;
	r->req = req;
	r->val = *bv;
	r->out = *bo;
	r->done = 0;
	self->pending++;
	return (PyObject *)r;
}

/* Synchronous (want_req 0) or asynchronous form of op; the argument
 * tuple is (key, value) or (key, out) or (key, value, out=None). */
static PyObject *
kv_do(KVObject *self, enum kv_op op, int want_req, PyObject *args, PyObject *kw)
{
	static char *names_v[] = {"key", "value", "out", NULL};
	static char *names_o[] = {"key", "out", NULL};
	unsigned long long key;
	PyObject *val = NULL, *out = NULL;
	dtpy_buf bv, bo;
	dt_kv_req req = 0;
	dt_err err;
	int ok = op == OP_PULL
	             ? PyArg_ParseTupleAndKeywords(args, kw, "KO", names_o,
	                                           &key, &out)
	             : PyArg_ParseTupleAndKeywords(args, kw, "KO|O", names_v,
	                                           &key, &val, &out);

	if (!ok || need_open(self) < 0 || take_arrays(op, val, out, &bv, &bo))
		return NULL;
	if (op == OP_PUSHPULL && !bo.held) {
		bo = bv; /* in place: the same view, released once (by bv) */
		bo.held = 0;
	}
	DTPY_NOGIL(
	    err = call_op(self->kv, op, key, &bv, &bo, want_req ? &req : NULL));
	if (err == DT_OK && want_req)
		return request_new(self, req, &bv, &bo);
	dtpy_buf_release(&bv);
	dtpy_buf_release(&bo);
	if (err != DT_OK)
		return dtpy_raise(err);
	Py_RETURN_NONE;
}

#define KV_WRAP(name, op, want_req)                                            \
	static PyObject *name(KVObject *self, PyObject *args, PyObject *kw)    \
	{                                                                      \
		return kv_do(self, op, want_req, args, kw);                    \
	}
KV_WRAP(kv_init, OP_INIT, 0)
KV_WRAP(kv_push, OP_PUSH, 0)
KV_WRAP(kv_pull, OP_PULL, 0)
KV_WRAP(kv_pushpull, OP_PUSHPULL, 0)
KV_WRAP(kv_push_async, OP_PUSH, 1)
KV_WRAP(kv_pull_async, OP_PULL, 1)
KV_WRAP(kv_pushpull_async, OP_PUSHPULL, 1)

/* push_devices(key, [v0, v1, ...]): MXNet's list of one array per device,
 * summed here and pushed as one. */
static PyObject *
kv_push_devices(KVObject *self, PyObject *args)
{
	enum { MAXDEV = 64 };
	unsigned long long key;
	PyObject *list, *seq = NULL, *ret = NULL;
	dtpy_buf b[MAXDEV];
	const float *ptr[MAXDEV];
	Py_ssize_t n, i, got = 0;
	dt_err err;

	if (!PyArg_ParseTuple(args, "KO", &key, &list) || need_open(self) < 0)
		return NULL;
	if ((seq = PySequence_Fast(list, "argument 'values' must be a list "
	                                 "of arrays")) == NULL)
		return NULL;
	n = PySequence_Fast_GET_SIZE(seq);
	if (n < 1 || n > MAXDEV) {
		PyErr_Format(PyExc_ValueError,
		             "argument 'values': %zd arrays (1 to %d)", n,
		             (int)MAXDEV);
		goto fail;
	}
	for (i = 0; i < n; i++, got++) {
		PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
		if (dtpy_buf_get(o, "values", 0, DTPY_F32, DT_FLOAT32, &b[i]) <
		    0)
			goto fail;
		if (dtpy_buf_expect(&b[i], "values", DT_FLOAT32, b[0].count))
			goto fail_held;
		ptr[i] = b[i].view.buf;
	}
	DTPY_NOGIL(
	    err = dt_kv_push_devices(self->kv, key, ptr, (int)n, b[0].count));
	ret = err == DT_OK ? Py_NewRef(Py_None) : dtpy_raise(err);
	goto fail;
fail_held:
	got++;
fail:
	for (i = 0; i < got; i++)
		dtpy_buf_release(&b[i]);
	Py_XDECREF(seq);
	return ret;
}

/* A call that takes nothing and can wait: barrier, wait_all, checkpoint. */
static PyObject *
kv_simple(KVObject *self, dt_err (*fn)(dt_kv *))
{
	dt_err err;

	if (need_open(self) < 0)
		return NULL;
	DTPY_NOGIL(err = fn(self->kv));
	if (err != DT_OK)
		return dtpy_raise(err);
	Py_RETURN_NONE;
}

static PyObject *
kv_barrier(KVObject *self, PyObject *unused)
{
	return kv_simple(self, dt_kv_barrier);
}

static PyObject *
kv_checkpoint(KVObject *self, PyObject *unused)
{
	return kv_simple(self, dt_kv_checkpoint);
}

/* save_optimizer_states(path) and load_optimizer_states(path): a str,
 * bytes or os.PathLike file name; the file is read or written without the
 * GIL. */
static PyObject *
kv_path_call(KVObject *self, PyObject *args,
             dt_err (*fn)(dt_kv *, const char *))
{
	PyObject *path = NULL;
	dt_err err;

	if (!PyArg_ParseTuple(args, "O&", PyUnicode_FSConverter, &path))
		return NULL;
	if (need_open(self) < 0) {
		Py_DECREF(path);
		return NULL;
	}
	DTPY_NOGIL(err = fn(self->kv, PyBytes_AS_STRING(path)));
	Py_DECREF(path);
	return err == DT_OK ? Py_NewRef(Py_None) : dtpy_raise(err);
}

static PyObject *
kv_save_optimizer_states(KVObject *self, PyObject *args)
{
	return kv_path_call(self, args, dt_kv_save_optimizer_states);
}

static PyObject *
kv_load_optimizer_states(KVObject *self, PyObject *args)
{
	return kv_path_call(self, args, dt_kv_load_optimizer_states);
}

static PyObject *
kv_wait_all(KVObject *self, PyObject *unused)
{
	return kv_simple(self, dt_kv_wait_all);
}

static PyObject *
kv_set_optimizer(KVObject *self, PyObject *args)
{
	const char *name, *params;
	dt_err err;

	if (!PyArg_ParseTuple(args, "ss", &name, &params) ||
	    need_open(self) < 0)
		return NULL;
	DTPY_NOGIL(err = dt_kv_set_optimizer(self->kv, name, params));
	return err == DT_OK ? Py_NewRef(Py_None) : dtpy_raise(err);
}

/* set_gradient_compression(spec) and set_pull_precision(p): strings. */
static PyObject *
kv_set_string(KVObject *self, PyObject *args,
              dt_err (*fn)(dt_kv *, const char *))
{
	const char *s;
	dt_err err;

	if (!PyArg_ParseTuple(args, "s", &s) || need_open(self) < 0)
		return NULL;
	DTPY_NOGIL(err = fn(self->kv, s));
	return err == DT_OK ? Py_NewRef(Py_None) : dtpy_raise(err);
}

static PyObject *
kv_set_gradient_compression(KVObject *self, PyObject *args)
{
	return kv_set_string(self, args, dt_kv_set_gradient_compression);
}

static PyObject *
kv_set_pull_precision(KVObject *self, PyObject *args)
{
	return kv_set_string(self, args, dt_kv_set_pull_precision);
}

/* init_row_sparse(key, rows, width, value=None): value None is zeros. */
static PyObject *
kv_init_row_sparse(KVObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = {"key", "rows", "width", "value", NULL};
	unsigned long long key, rows;
	Py_ssize_t width;
	PyObject *val = Py_None;
	dtpy_buf b = {0};
	dt_err err;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "KKn|O", names, &key, &rows,
	                                 &width, &val) ||
	    need_open(self) < 0)
		return NULL;
	if (width < 1)
		return PyErr_Format(PyExc_ValueError,
		                    "argument 'width' must be >= 1, not %zd",
		                    width);
	if (val != Py_None) {
		if (dtpy_buf_get(val, "value", 0, DTPY_F32, DT_FLOAT32, &b) < 0)
			return NULL;
		if (rows > SIZE_MAX / (size_t)width ||
		    dtpy_buf_expect(&b, "value", DT_FLOAT32,
		                    (size_t)rows * (size_t)width) < 0) {
			if (!PyErr_Occurred())
				PyErr_SetString(PyExc_ValueError,
				                "argument 'rows' x 'width' is "
				                "too large");
			dtpy_buf_release(&b);
			return NULL;
		}
	}
	DTPY_NOGIL(err = dt_kv_init_row_sparse(self->kv, key, rows,
	                                       (size_t)width, b.view.buf));
	dtpy_buf_release(&b);
	return err == DT_OK ? Py_NewRef(Py_None) : dtpy_raise(err);
}

/*
 * push_row_sparse(key, row_ids, values, width), row_sparse_pull(key,
 * row_ids, out, width) and pushpull_row_sparse(key, row_ids, values, out,
 * width): values and out hold len(row_ids) x width floats.
 */
enum rs_op { RS_PUSH, RS_PULL, RS_PUSHPULL };

static dt_err
rs_call(dt_kv *kv, enum rs_op op, dt_key key, const dtpy_buf *ids,
        const dtpy_buf *v, const dtpy_buf *o, size_t width)
{
	if (op == RS_PUSH)
		return dt_kv_push_row_sparse(kv, key, ids->count, ids->view.buf,
		                             v->view.buf, width);
	if (op == RS_PULL)
		return dt_kv_row_sparse_pull(kv, key, ids->count, ids->view.buf,
		                             o->view.buf, width);
	return dt_kv_pushpull_row_sparse(kv, key, ids->count, ids->view.buf,
	                                 v->view.buf, o->view.buf, width);
}

static PyObject *
kv_rows(KVObject *self, enum rs_op op, PyObject *args)
{
	unsigned long long key;
	PyObject *ids, *a, *c = NULL, *ret = NULL;
	Py_ssize_t width;
	dtpy_buf bi = {0}, bv = {0}, bo = {0};
	dt_err err;
	int ok =
	    op == RS_PUSHPULL
	        ? PyArg_ParseTuple(args, "KOOOn", &key, &ids, &a, &c, &width)
	        : PyArg_ParseTuple(args, "KOOn", &key, &ids, &a, &width);

	if (!ok || need_open(self) < 0)
		return NULL;
	if (width < 1)
		return PyErr_Format(PyExc_ValueError,
		                    "argument 'width' must be >= 1, not %zd",
		                    width);
	if (dtpy_ids_get(ids, "row_ids", &bi) < 0)
		return NULL;
	if (op != RS_PULL &&
	    (dtpy_buf_get(a, "values", 0, DTPY_F32, DT_FLOAT32, &bv) < 0 ||
	     dtpy_buf_expect(&bv, "values", DT_FLOAT32,
	                     bi.count * (size_t)width) < 0))
		goto out;
	if (op != RS_PUSH && (dtpy_buf_get(op == RS_PULL ? a : c, "out", 1,
	                                   DTPY_F32, DT_FLOAT32, &bo) < 0 ||
	                      dtpy_buf_expect(&bo, "out", DT_FLOAT32,
	                                      bi.count * (size_t)width) < 0))
		goto out;
	DTPY_NOGIL(
	    err = rs_call(self->kv, op, key, &bi, &bv, &bo, (size_t)width));
	ret = err == DT_OK ? Py_NewRef(Py_None) : dtpy_raise(err);
out:
	dtpy_buf_release(&bi);
	dtpy_buf_release(&bv);
	dtpy_buf_release(&bo);
	return ret;
}

static PyObject *
kv_push_row_sparse(KVObject *self, PyObject *args)
{
	return kv_rows(self, RS_PUSH, args);
}

static PyObject *
kv_row_sparse_pull(KVObject *self, PyObject *args)
{
	return kv_rows(self, RS_PULL, args);
}

static PyObject *
kv_pushpull_row_sparse(KVObject *self, PyObject *args)
{
	return kv_rows(self, RS_PUSHPULL, args);
}

static PyObject *
kv_get_int(KVObject *self, void *which)
{
	if (need_open(self) < 0)
		return NULL;
	switch ((int)(intptr_t)which) {
	case 0:
		return PyLong_FromLong(dt_kv_rank(self->kv));
	case 1:
		return PyLong_FromLong(dt_kv_num_workers(self->kv));
	case 2:
		return PyBool_FromLong(dt_kv_is_dist(self->kv));
	case 3:
		return PyBool_FromLong(dt_kv_rejoined(self->kv));
	default:
		return PyUnicode_FromString(dt_kv_type(self->kv));
	}
}

static PyGetSetDef kv_getset[] = {
    {"rank", (getter)kv_get_int, NULL, "this worker's rank", (void *)0},
    {"num_workers", (getter)kv_get_int, NULL, "number of workers", (void *)1},
    {"is_dist", (getter)kv_get_int, NULL, "a dist_* store", (void *)2},
    {"rejoined", (getter)kv_get_int, NULL,
     "this worker took a lost worker's place", (void *)3},
    {"type", (getter)kv_get_int, NULL, "the store's type", (void *)4},
    {NULL},
};

static PyMethodDef kv_methods[] = {
    {"init", DTPY_KW(kv_init), METH_VARARGS | METH_KEYWORDS,
     "init(key, value): initialise key (collective; rank 0's value wins)"},
    {"push", DTPY_KW(kv_push), METH_VARARGS | METH_KEYWORDS,
     "push(key, value)"},
    {"pull", DTPY_KW(kv_pull), METH_VARARGS | METH_KEYWORDS, "pull(key, out)"},
    {"pushpull", DTPY_KW(kv_pushpull), METH_VARARGS | METH_KEYWORDS,
     "pushpull(key, value, out=None): out None updates value in place"},
    {"push_async", DTPY_KW(kv_push_async), METH_VARARGS | METH_KEYWORDS,
     "push_async(key, value) -> Request"},
    {"pull_async", DTPY_KW(kv_pull_async), METH_VARARGS | METH_KEYWORDS,
     "pull_async(key, out) -> Request"},
    {"pushpull_async", DTPY_KW(kv_pushpull_async), METH_VARARGS | METH_KEYWORDS,
     "pushpull_async(key, value, out=None) -> Request"},
    {"push_devices", (PyCFunction)kv_push_devices, METH_VARARGS,
     "push_devices(key, [values]): sum one array per device, push once"},
    {"wait_all", (PyCFunction)kv_wait_all, METH_NOARGS,
     "wait for every request"},
    {"barrier", (PyCFunction)kv_barrier, METH_NOARGS, "barrier of workers"},
    {"checkpoint", (PyCFunction)kv_checkpoint, METH_NOARGS,
     "checkpoint the servers now (collective)"},
    {"save_optimizer_states", (PyCFunction)kv_save_optimizer_states,
     METH_VARARGS,
     "save_optimizer_states(path): a local store's optimizer "
     "state into a file"},
    {"load_optimizer_states", (PyCFunction)kv_load_optimizer_states,
     METH_VARARGS,
     "load_optimizer_states(path): read it back (checked "
     "whole first)"},
    {"set_optimizer", (PyCFunction)kv_set_optimizer, METH_VARARGS,
     "set_optimizer(name, 'lr=...,momentum=...')"},
    {"set_gradient_compression", (PyCFunction)kv_set_gradient_compression,
     METH_VARARGS, "set_gradient_compression(spec)"},
    {"set_pull_precision", (PyCFunction)kv_set_pull_precision, METH_VARARGS,
     "set_pull_precision('fp32' or 'fp16')"},
    {"init_row_sparse", DTPY_KW(kv_init_row_sparse),
     METH_VARARGS | METH_KEYWORDS,
     "init_row_sparse(key, rows, width, value=None)"},
    {"push_row_sparse", (PyCFunction)kv_push_row_sparse, METH_VARARGS,
     "push_row_sparse(key, row_ids, values, width)"},
    {"row_sparse_pull", (PyCFunction)kv_row_sparse_pull, METH_VARARGS,
     "row_sparse_pull(key, row_ids, out, width)"},
    {"pushpull_row_sparse", (PyCFunction)kv_pushpull_row_sparse, METH_VARARGS,
     "pushpull_row_sparse(key, row_ids, values, out, width)"},
    {"close", (PyCFunction)kv_close, METH_NOARGS,
     "leave the cluster and free the store"},
    {NULL},
};

static PyTypeObject KVType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dtrain._dtrain.KV",
    .tp_basicsize = sizeof(KVObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "KV(type): one dt_kv (include/dtrain/kv.h)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)kv_tp_init,
    .tp_dealloc = (destructor)kv_dealloc,
    .tp_methods = kv_methods,
    .tp_getset = kv_getset,
};

/* Request.wait(): the result of the asynchronous call; then its buffers
 * are let go. A second wait returns at once. */
static PyObject *
req_wait(RequestObject *r, PyObject *unused)
{
	dt_err err;

	if (r->done)
		Py_RETURN_NONE;
	DTPY_NOGIL(err = dt_kv_wait(r->owner->kv, r->req));
	r->done = 1;
	r->owner->pending--;
	dtpy_buf_release(&r->val);
	dtpy_buf_release(&r->out);
	if (err != DT_OK)
		return dtpy_raise(err);
	Py_RETURN_NONE;
}

static void
req_dealloc(RequestObject *r)
{
	/* The library writes into the buffers until the wait: wait here
	 * rather than free memory it may still touch. */
	if (!r->done) {
		PyObject *t, *v, *tb, *res;

		PyErr_Fetch(&t, &v, &tb);
		res = req_wait(r, NULL);
		Py_XDECREF(res);
		PyErr_Clear();
		PyErr_Restore(t, v, tb);
	}
	Py_DECREF(r->owner);
	PyObject_Free(r);
}

static PyMethodDef req_methods[] = {
    {"wait", (PyCFunction)req_wait, METH_NOARGS,
     "wait for the request; raises its error"},
    {NULL},
};

static PyTypeObject RequestType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dtrain._dtrain.Request",
    .tp_basicsize = sizeof(RequestObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "an asynchronous KVStore call; wait() before reusing its "
              "arrays",
    .tp_dealloc = (destructor)req_dealloc,
    .tp_methods = req_methods,
};

int
dtpy_kv_add(PyObject *module)
{
	if (PyType_Ready(&KVType) < 0 || PyType_Ready(&RequestType) < 0)
		return -1;
	Py_INCREF(&KVType);
	if (PyModule_AddObject(module, "KV", (PyObject *)&KVType) < 0) {
		Py_DECREF(&KVType);
		return -1;
	}
	return 0;
}
