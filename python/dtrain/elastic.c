/*
 * elastic.c - dtrain._dtrain.Elastic, one dt_elastic over a Coll.
 *
 * The methods map onto include/dtrain/elastic.h; dtrain/elastic.py builds
 * Horovod Elastic's State, ObjectState and run() on top, and
 * dtrain/torch.py's elastic part TorchState. The library keeps the
 * address of every registered range and copies from and into it at each
 * commit and restore, so register() holds the array (its buffer view, or
 * a reference to the tensor) until close(): the array must keep its
 * memory - a tensor updated in place, never given new storage.
 *
 * An Elastic holds a reference to its Coll, so the communicator outlives
 * it unless the program finalizes it first; every call checks that it has
 * not (ValueError). Every call that can wait for other ranks or the
 * scheduler releases the GIL.
 */
#include <stdlib.h>
#include <string.h>

#include "dtpy.h"

typedef struct {
	PyObject_HEAD PyObject *coll; /* the Coll (a reference) */
	dt_elastic *e;
	dtpy_buf *bufs; /* the registered arrays, held until close() */
	Py_ssize_t nbufs, cap;
	int committed; /* a commit was made */
	int busy;      /* a call runs without the GIL */
} ElasticObject;

static PyTypeObject ElasticType;

/* The communicator of an open Elastic that no other thread is using, or
 * NULL with ValueError set. The library's state is one thread's (a call
 * runs without the GIL, so another thread could otherwise come in). */
static dt_coll *
need_open(ElasticObject *self)
{
	if (self->e == NULL) {
		PyErr_SetString(PyExc_ValueError,
		                "the Elastic state is closed");
		return NULL;
	}
	if (self->busy) {
		PyErr_SetString(PyExc_ValueError,
		                "the Elastic state is in use by another thread "
		                "(one thread per state)");
		return NULL;
	}
	return dtpy_coll_get(self->coll, "coll");
}

/* Run stmt without the GIL, the state marked busy meanwhile. */
#define ELASTIC_CALL(self, stmt)                                               \
	do {                                                                   \
		(self)->busy = 1;                                              \
		DTPY_NOGIL(stmt);                                              \
		(self)->busy = 0;                                              \
	} while (0)

static int
elastic_tp_init(ElasticObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = {"coll", NULL};
	PyObject *coll;
	dt_coll *c;
	dt_err err;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O", names, &coll))
		return -1;
	if (self->e != NULL) {
		PyErr_SetString(PyExc_ValueError, "Elastic is already created");
		return -1;
	}
	if ((c = dtpy_coll_get(coll, "coll")) == NULL)
		return -1;
	if ((err = dt_elastic_create(c, &self->e)) != DT_OK) {
		dtpy_raise(err);
		return -1;
	}
	Py_INCREF(coll);
	self->coll = coll;
	return 0;
}

/* A byte buffer (format B, b or c) of any length, or NULL format. */
static int
is_bytes_format(PyObject *obj)
{
	Py_buffer v;
	const char *f;
	int bytes;

	if (!PyObject_CheckBuffer(obj) ||
	    PyObject_GetBuffer(obj, &v, PyBUF_FULL_RO) < 0) {
		PyErr_Clear();
		return 0;
	}
	f = v.format ? v.format : "B";
	if (*f == '@' || *f == '=' || *f == '<')
		f++;
	bytes = v.itemsize == 1 && f[0] != '\0' && f[1] == '\0' &&
	        strchr("Bbc", f[0]) != NULL;
	PyBuffer_Release(&v);
	return bytes;
}

/*
 * The writable contiguous memory of obj for argument 'buffer': bytes of
 * any length (a bytearray, a uint8 array: any state, e.g. a pickle) or an
 * array of float32, float16, float64 or int32 (a numpy array, a CPU
 * tensor), refused by name otherwise (dtpy_buf_get's messages).
 */
static int
take_buffer(PyObject *obj, dtpy_buf *b)
{
	if (is_bytes_format(obj)) {
		memset(b, 0, sizeof(*b));
		if (PyObject_GetBuffer(obj, &b->view,
		                       PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) ==
		    0) {
			b->held = 1;
			b->count = (size_t)b->view.len;
			return 0;
		}
		/* (refused: the typed path says why, naming the argument) */
		PyErr_Clear();
	}
	if (dtpy_buf_get(obj, "buffer", 1, DTPY_ALL, DT_FLOAT32, b) < 0)
		return -1;
	return 0;
}

/* register(name, buffer): before the first commit, the same on every
 * rank in the same order. */
static PyObject *
elastic_register(ElasticObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = {"name", "buffer", NULL};
	const char *name;
	PyObject *obj;
	dtpy_buf b;
	dt_err err;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "sO", names, &name, &obj) ||
	    need_open(self) == NULL)
		return NULL;
	if (self->committed)
		return PyErr_Format(PyExc_ValueError,
		                    "register('%s'): after the first commit "
		                    "(register every array first)",
		                    name);
	if (self->nbufs == self->cap) {
		Py_ssize_t cap = self->cap ? 2 * self->cap : 8;
		dtpy_buf *n = realloc(self->bufs, (size_t)cap * sizeof(*n));

		if (n == NULL)
			return PyErr_NoMemory();
		self->bufs = n;
		self->cap = cap;
	}
	if (take_buffer(obj, &b) < 0)
		return NULL;
	err =
	    dt_elastic_register(self->e, name, b.view.buf, (size_t)b.view.len);
	if (err != DT_OK) {
		dtpy_buf_release(&b);
		return dtpy_raise(err);
	}
	self->bufs[self->nbufs++] = b;
	Py_RETURN_NONE;
}

static int
parse_step(PyObject *args, const char *call, unsigned long long *step,
           ElasticObject *self)
{
	if (!PyArg_ParseTuple(args, "K", step))
		return -1;
	if (self->nbufs == 0) {
		PyErr_Format(PyExc_ValueError,
		             "%s at step %llu: nothing is registered (call "
		             "register(name, buffer) first)",
		             call, *step);
		return -1;
	}
	return 0;
}

/* commit(step): None, or raises (MembershipChanged: call restore()). */
static PyObject *
elastic_commit(ElasticObject *self, PyObject *args)
{
	unsigned long long step;
	dt_err err;

	if (need_open(self) == NULL ||
	    parse_step(args, "commit", &step, self) < 0)
		return NULL;
	ELASTIC_CALL(self, err = dt_elastic_commit(self->e, (uint64_t)step));
	self->committed = 1;
	return err == DT_OK ? Py_NewRef(Py_None) : dtpy_raise(err);
}

/* poll(step) -> True if it committed step (a change was taken). */
static PyObject *
elastic_poll(ElasticObject *self, PyObject *args)
{
	unsigned long long step;
	int committed = 0;
	dt_err err;

	if (need_open(self) == NULL ||
	    parse_step(args, "poll", &step, self) < 0)
		return NULL;
	ELASTIC_CALL(
	    self, err = dt_elastic_poll(self->e, (uint64_t)step, &committed));
	if (committed)
		self->committed = 1;
	return err == DT_OK ? PyBool_FromLong(committed) : dtpy_raise(err);
}

/* restore() -> the step of the commit the state was put back to. */
static PyObject *
elastic_restore(ElasticObject *self, PyObject *unused)
{
	uint64_t step = 0;
	dt_err err;

	if (need_open(self) == NULL)
		return NULL;
	ELASTIC_CALL(self, err = dt_elastic_restore(self->e, &step));
	if (err != DT_OK)
		return dtpy_raise(err);
	return PyLong_FromUnsignedLongLong((unsigned long long)step);
}

/* last_change() -> a dict of dt_elastic_change's fields. */
static PyObject *
elastic_last_change(ElasticObject *self, PyObject *unused)
{
	dt_elastic_change ch;

	if (need_open(self) == NULL)
		return NULL;
	dt_elastic_last_change(self->e, &ch);
	return Py_BuildValue("{s:K,s:i,s:i,s:K,s:i,s:i,s:s}", "epoch",
	                     (unsigned long long)ch.epoch, "old_size",
	                     ch.old_size, "new_size", ch.new_size, "step",
	                     (unsigned long long)ch.step, "removed", ch.removed,
	                     "added", ch.added, "replay", ch.replay);
}

static PyObject *
elastic_get_flag(ElasticObject *self, void *which)
{
	if (need_open(self) == NULL)
		return NULL;
	return PyBool_FromLong(which ? dt_elastic_joining(self->e)
	                             : dt_elastic_left(self->e));
}

/* Let go of the library's state, then of the arrays it pointed at. */
static void
elastic_release(ElasticObject *self)
{
	dt_elastic_destroy(self->e);
	self->e = NULL;
	for (Py_ssize_t i = 0; i < self->nbufs; i++)
		dtpy_buf_release(&self->bufs[i]);
	free(self->bufs);
	self->bufs = NULL;
	self->nbufs = self->cap = 0;
	Py_CLEAR(self->coll);
}

static PyObject *
elastic_close(ElasticObject *self, PyObject *unused)
{
	if (self->busy)
		return PyErr_Format(PyExc_ValueError,
		                    "close: the Elastic state is in use by "
		                    "another thread");
	elastic_release(self);
	Py_RETURN_NONE;
}

static void
elastic_dealloc(ElasticObject *self)
{
	elastic_release(self);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyGetSetDef elastic_getset[] = {
    {"left", (getter)elastic_get_flag, NULL,
     "True once this worker left the job on its schedule", (void *)0},
    {"joining", (getter)elastic_get_flag, NULL,
     "True while this worker joins and has not taken the members' state",
     (void *)1},
    {NULL},
};

static PyMethodDef elastic_methods[] = {
    {"register", DTPY_KW(elastic_register), METH_VARARGS | METH_KEYWORDS,
     "register(name, buffer): writable contiguous memory, kept in place"},
    {"commit", (PyCFunction)elastic_commit, METH_VARARGS,
     "commit(step): copy the registered state; may take a change"},
    {"poll", (PyCFunction)elastic_poll, METH_VARARGS,
     "poll(step) -> True if it committed step to take a change"},
    {"restore", (PyCFunction)elastic_restore, METH_NOARGS,
     "restore() -> step: take the new membership and the last commit"},
    {"last_change", (PyCFunction)elastic_last_change, METH_NOARGS,
     "last_change() -> dict: epoch, old_size, new_size, step, removed, "
     "added, replay"},
    {"close", (PyCFunction)elastic_close, METH_NOARGS,
     "let go of the state and the registered arrays"},
    {NULL},
};

static PyTypeObject ElasticType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dtrain._dtrain.Elastic",
    .tp_basicsize = sizeof(ElasticObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Elastic(coll): one dt_elastic (include/dtrain/elastic.h)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)elastic_tp_init,
    .tp_dealloc = (destructor)elastic_dealloc,
    .tp_methods = elastic_methods,
    .tp_getset = elastic_getset,
};

int
dtpy_elastic_add(PyObject *module)
{
	if (PyType_Ready(&ElasticType) < 0)
		return -1;
	Py_INCREF(&ElasticType);
	if (PyModule_AddObject(module, "Elastic", (PyObject *)&ElasticType) <
	    0) {
		Py_DECREF(&ElasticType);
		return -1;
	}
	return 0;
}
