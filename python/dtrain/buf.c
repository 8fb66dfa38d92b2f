/*
 * buf.c - arrays in, without copies.
 *
 * Every array argument comes through the buffer protocol: numpy arrays,
 * memoryview, bytearray, array.array, and PyTorch CPU tensors (the Python
 * layer passes tensor.numpy(), which shares the tensor's memory). The C
 * library reads and writes the caller's memory directly, so an argument it
 * cannot use as it is - not C-contiguous, read-only where the call writes,
 * big-endian, of a type the call does not take - is refused with the
 * argument's name; the binding never makes a hidden copy.
 */
#include <string.h>

#include "dtpy.h"

static const char *const type_list = "float32, float16, float64, int32";

/*
 * The element type of a buffer format (struct module syntax); -1 for a
 * byte buffer, -2 for a type the library does not have. '@', '=' and '<'
 * all mean native little-endian data on the machines dtrain runs on.
 */
static int
format_dtype(const char *fmt, Py_ssize_t itemsize)
{
	if (fmt == NULL)
		return -1; /* PyBUF_FORMAT not honoured: plain bytes */
	if (*fmt == '@' || *fmt == '=' || *fmt == '<')
		fmt++;
	if (fmt[0] == '\0' || fmt[1] != '\0')
		return -2;
	switch (fmt[0]) {
	case 'f':
		return itemsize == 4 ? DT_FLOAT32 : -2;
	case 'd':
		return itemsize == 8 ? DT_FLOAT64 : -2;
	case 'e':
		return itemsize == 2 ? DT_FLOAT16 : -2;
	case 'i':
	case 'l':
		return itemsize == 4 ? DT_INT32 : -2;
	case 'B':
	case 'b':
	case 'c':
		return -1;
	default:
		return -2;
	}
}

/* The view could not be taken as asked: say why, naming the argument. */
static void
explain_refusal(PyObject *obj, const char *arg, int writable)
{
	Py_buffer v;

	PyErr_Clear();
	if (!PyObject_CheckBuffer(obj)) {
		PyErr_Format(PyExc_TypeError,
		             "argument '%s': expected a contiguous CPU array "
		             "(numpy array, memoryview, bytearray or CPU "
		             "tensor), got %.100s",
		             arg, Py_TYPE(obj)->tp_name);
		return;
	}
	if (PyObject_GetBuffer(obj, &v, PyBUF_FULL_RO) < 0) {
		PyErr_Clear();
		PyErr_Format(PyExc_TypeError,
		             "argument '%s': its buffer cannot be read "
		             "(%.100s)",
		             arg, Py_TYPE(obj)->tp_name);
		return;
	}
	if (writable && v.readonly)
		PyErr_Format(PyExc_ValueError,
		             "argument '%s' is read-only, but the call writes "
		             "its result there",
		             arg);
	else
		PyErr_Format(PyExc_ValueError,
		             "argument '%s' is not C-contiguous; dtrain works "
		             "in place and does not copy (pass a contiguous "
		             "array, e.g. numpy.ascontiguousarray or "
		             "tensor.contiguous())",
		             arg);
	PyBuffer_Release(&v);
}

int
dtpy_buf_get(PyObject *obj, const char *arg, int writable, unsigned accept,
             dt_dtype bytes_as, dtpy_buf *b)
{
	int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
	int dt;

	memset(b, 0, sizeof(*b));
	if (writable)
		flags |= PyBUF_WRITABLE;
	if (PyObject_GetBuffer(obj, &b->view, flags) < 0) {
		explain_refusal(obj, arg, writable);
		return -1;
	}
	b->held = 1;
	dt = format_dtype(b->view.format, b->view.itemsize);
	if (dt == -1) {
		size_t sz = dt_dtype_size(bytes_as);

		if ((size_t)b->view.len % sz != 0) {
			PyErr_Format(PyExc_ValueError,
			             "argument '%s': %zd bytes are not a whole "
			             "number of %s elements",
			             arg, b->view.len, dt_dtype_name(bytes_as));
			goto fail;
		}
		dt = (int)bytes_as;
	}
	if (dt < 0 || !(accept & (1u << dt))) {
		PyErr_Format(PyExc_TypeError,
		             "argument '%s': element type '%s' is not "
		             "supported here (this call takes %s)",
		             arg, b->view.format ? b->view.format : "?",
		             accept == DTPY_ALL ? type_list
		             : accept == (DTPY_F32 | DTPY_F16)
		                 ? "float32, float16"
		                 : "float32");
		goto fail;
	}
	b->dtype = (dt_dtype)dt;
	b->count = (size_t)b->view.len / dt_dtype_size(b->dtype);
	return 0;
fail:
	dtpy_buf_release(b);
	return -1;
}

int
dtpy_ids_get(PyObject *obj, const char *arg, dtpy_buf *b)
{
	const char *f;

	memset(b, 0, sizeof(*b));
	if (PyObject_GetBuffer(obj, &b->view,
	                       PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
		explain_refusal(obj, arg, 0);
		return -1;
	}
	b->held = 1;
	f = b->view.format ? b->view.format : "B";
	if (*f == '@' || *f == '=' || *f == '<')
		f++;
	if (b->view.itemsize != 8 || strlen(f) != 1 || !strchr("QqLl", *f)) {
		PyErr_Format(PyExc_TypeError,
		             "argument '%s': row ids must be 64-bit integers "
		             "(uint64 or int64), got format '%s'",
		             arg, b->view.format ? b->view.format : "?");
		dtpy_buf_release(b);
		return -1;
	}
	b->count = (size_t)b->view.len / 8;
	return 0;
}

void
dtpy_buf_release(dtpy_buf *b)
{
	if (b->held)
		PyBuffer_Release(&b->view);
	b->held = 0;
}

int
dtpy_buf_expect(const dtpy_buf *b, const char *arg, dt_dtype dtype, size_t n)
{
	if (b->dtype == dtype && b->count == n)
		return 0;
	PyErr_Format(
	    PyExc_ValueError, "argument '%s': %zu %s elements, expected %zu %s",
	    arg, b->count, dt_dtype_name(b->dtype), n, dt_dtype_name(dtype));
	return -1;
}
