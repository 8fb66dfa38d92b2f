/*
 * _dtrain.c - the module dtrain._dtrain: the exception classes (err.c),
 * KV (kv.c), Coll (coll.c), Elastic (elastic.c), the reduction constants, and
 * serve_role(), the MXNet contract at import time.
 */
#include <stdlib.h>
#include <string.h>

#include "dtpy.h"

/* sys.<name>.flush(), if the stream exists; -1 with an exception set. */
static int
flush_std(const char *name)
{
	PyObject *f = PySys_GetObject(name), *r; /* borrowed */

	if (f == NULL || f == Py_None)
		return 0;
	r = PyObject_CallMethod(f, "flush", NULL);
	Py_XDECREF(r);
	return r == NULL ? -1 : 0;
}

/*
 * serve_role(): in a process started with DMLC_ROLE=server or scheduler,
 * serve that role for the whole job and exit 0 (1 after printing the
 * error), as MXNet does at import; in a worker, or with no DMLC_ROLE,
 * return None at once. `import dtrain` calls it, so the same command can
 * be started for every role.
 */
static PyObject *
serve_role(PyObject *mod, PyObject *unused)
{
	const char *role = getenv("DMLC_ROLE");
	dt_node *node = NULL;
	dt_err err;

	if (role == NULL ||
	    (strcmp(role, "server") != 0 && strcmp(role, "scheduler") != 0))
		Py_RETURN_NONE;
	/* Python's buffered output must reach its file before the C
	 * library ends the process. */
	if (flush_std("stdout") < 0 || flush_std("stderr") < 0)
		return NULL;
	DTPY_NOGIL(err = dt_node_init_from_env(&node));
	/* Returns only if the environment is wrong. */
	if (err != DT_OK)
		return dtpy_raise(err);
	if (node != NULL) {
		DTPY_NOGIL((void)dt_node_stop(node));
	}
	Py_RETURN_NONE;
}

static PyObject *
dtype_size(PyObject *mod, PyObject *arg)
{
	long t = PyLong_AsLong(arg);

	if (t == -1 && PyErr_Occurred())
		return NULL;
	return PyLong_FromSize_t(dt_dtype_size((dt_dtype)t));
}

static PyMethodDef module_methods[] = {
    {"serve_role", serve_role, METH_NOARGS,
     "serve DMLC_ROLE=server|scheduler and exit; no-op in a worker"},
    {"dtype_size", dtype_size, METH_O, "bytes of one element of a DT_ type"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "dtrain._dtrain",
    .m_doc = "dtrain's C library for Python (use dtrain.kv, dtrain.torch)",
    .m_size = -1,
    .m_methods = module_methods,
};

/* The C library's enums by name: reductions and element types. */
static int
add_constants(PyObject *m)
{
	static const struct {
		const char *name;
		long value;
	} k[] = {
	    {"SUM", DT_COLL_SUM},    {"AVG", DT_COLL_AVG},
	    {"MIN", DT_COLL_MIN},    {"MAX", DT_COLL_MAX},
	    {"FLOAT32", DT_FLOAT32}, {"FLOAT64", DT_FLOAT64},
	    {"INT32", DT_INT32},     {"FLOAT16", DT_FLOAT16},
	};

	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		if (PyModule_AddIntConstant(m, k[i].name, k[i].value) < 0)
			return -1;
	return 0;
}

PyMODINIT_FUNC
PyInit__dtrain(void)
{
	PyObject *m = PyModule_Create(&module_def);

	if (m == NULL)
		return NULL;
	if (dtpy_err_add(m) < 0 || dtpy_kv_add(m) < 0 || dtpy_coll_add(m) < 0 ||
	    dtpy_elastic_add(m) < 0 || add_constants(m) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
