/*
 * dtpy.h - what the files of the Python extension share.
 *
 * The extension (dtrain._dtrain) is a thin layer over the public C API in
 * include/dtrain/: err.c turns a dt_err into a Python exception, buf.c takes
 * arrays through the buffer protocol without copying them, kv.c wraps a
 * dt_kv and coll.c a dt_coll. The Python modules beside it (kv.py,
 * torch.py) give MXNet's and Horovod's names on top. Nothing in the library
 * depends on this directory.
 *
 * Every call that can wait releases the GIL; the buffers of a call stay
 * held (PyObject_GetBuffer) until the call, or for an asynchronous call the
 * wait on its request, has returned.
 */
#ifndef DTPY_H
#define DTPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "dtrain/dtrain.h"

/* Cast a METH_VARARGS | METH_KEYWORDS function for a PyMethodDef. */
#define DTPY_KW(f) ((PyCFunction)(void (*)(void))(f))

/* Run stmt without the GIL (Py_BEGIN_ALLOW_THREADS as one statement): for
 * every call that can wait on the network or another rank. */
#define DTPY_NOGIL(stmt)                                                       \
	do {                                                                   \
		PyThreadState *dtpy_ts_ = PyEval_SaveThread();                 \
		stmt;                                                          \
		PyEval_RestoreThread(dtpy_ts_);                                \
	} while (0)

/* err.c: the exception classes, dtrain.Error and one subclass per code. */
int dtpy_err_add(PyObject *module);
/* Raise the exception of err with dt_errmsg() (or dt_strerror() when the
 * thread has no message); returns NULL for `return dtpy_raise(err);`. */
PyObject *dtpy_raise(dt_err err);

/* buf.c: one array argument held for the length of a call. */
typedef struct dtpy_buf {
	Py_buffer view;
	int held;       /* view must be released */
	dt_dtype dtype; /* element type, from the format or the caller */
	size_t count;   /* elements */
} dtpy_buf;

/* Bits of the element types a call accepts (1u << dt_dtype). */
#define DTPY_F32 (1u << DT_FLOAT32)
#define DTPY_F64 (1u << DT_FLOAT64)
#define DTPY_I32 (1u << DT_INT32)
#define DTPY_F16 (1u << DT_FLOAT16)
#define DTPY_ALL (DTPY_F32 | DTPY_F64 | DTPY_I32 | DTPY_F16)

/*
 * Take obj (argument arg of the call) as a C-contiguous array of one of the
 * types in accept, writable if asked. A buffer of bytes (format B, b or c:
 * a bytearray, a plain memoryview) is read as elements of bytes_as. On
 * failure raises TypeError or ValueError naming arg and returns -1; never
 * copies.
 */
int dtpy_buf_get(PyObject *obj, const char *arg, int writable, unsigned accept,
                 dt_dtype bytes_as, dtpy_buf *b);
/* Row ids: a contiguous array of 64-bit integers (uint64 or int64). */
int dtpy_ids_get(PyObject *obj, const char *arg, dtpy_buf *b);
void dtpy_buf_release(dtpy_buf *b);
/* Raise ValueError naming arg unless b holds n elements of dtype; -1 when
 * raised. */
int dtpy_buf_expect(const dtpy_buf *b, const char *arg, dt_dtype dtype,
                    size_t n);

/* kv.c and coll.c: add the types to the module. */
int dtpy_kv_add(PyObject *module);
int dtpy_coll_add(PyObject *module);
/* elastic.c: the Elastic type. */
int dtpy_elastic_add(PyObject *module);
/* The dt_coll of a Coll object (argument arg), or NULL with TypeError
 * (not a Coll) or ValueError (finalized) set. */
dt_coll *dtpy_coll_get(PyObject *obj, const char *arg);

#endif
