/*
 * buf.c - arrays in, without copies.
 *
 * Every array argument comes through the buffer protocol: numpy arrays,
 * memoryview, bytearray, array.array - or is a PyTorch CPU tensor, which
 * has no buffer protocol and is read here through its own accessors
 * (is_cpu, dtype, is_contiguous, data_ptr, numel): the library then works
 * in the tensor's memory, and the call holds a reference to the tensor
 * until it is done with it. A tensor is not passed as tensor.numpy(),
 * which shares the memory too but builds a numpy array at every call: on
 * a small allreduce between two processes that was 4 us of the call's
 * 15, most of the binding's cost. The C library reads and writes the
 * caller's memory directly, so an argument it cannot use as it is - not
 * C-contiguous, read-only where the call writes, big-endian, on another
 * device, of a type the call does not take - is refused with the
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

static const char *
accept_list(unsigned accept)
{
	return accept == DTPY_ALL                ? type_list
	       : accept == (DTPY_F32 | DTPY_F16) ? "float32, float16"
	                                         : "float32";
}

/* PyTorch's Tensor class and its dtypes (indexed by dt_dtype), looked up
 * once the program has imported torch (the binding never imports it),
 * and the accessors' names, interned. Kept for the process's life. */
static PyObject *torch_tensor;
static PyObject *torch_dtype[4];
static PyObject *s_is_cpu, *s_dtype, *s_is_contiguous, *s_data_ptr, *s_numel;

/* 1 when torch is imported and its types are known; 0 when it is not
 * imported; -1 with an exception set. */
static int
torch_found(void)
{
	/* by dt_dtype: DT_FLOAT32, DT_FLOAT64, DT_INT32, DT_FLOAT16 */
	static const char *const names[4] = {"float32", "float64", "int32",
	                                     "float16"};
	PyObject *name, *torch;

	if (torch_tensor != NULL)
		return 1;
	if ((name = PyUnicode_FromString("torch")) == NULL)
		return -1;
	torch = PyImport_GetModule(name);
	Py_DECREF(name);
	if (torch == NULL)
		return PyErr_Occurred() ? -1 : 0;
	for (int i = 0; i < 4; i++)
		if (torch_dtype[i] == NULL &&
		    (torch_dtype[i] =
		         PyObject_GetAttrString(torch, names[i])) == NULL)
			goto fail;
	if ((s_is_cpu = PyUnicode_InternFromString("is_cpu")) == NULL ||
	    (s_dtype = PyUnicode_InternFromString("dtype")) == NULL ||
	    (s_is_contiguous = PyUnicode_InternFromString("is_contiguous")) ==
	        NULL ||
	    (s_data_ptr = PyUnicode_InternFromString("data_ptr")) == NULL ||
	    (s_numel = PyUnicode_InternFromString("numel")) == NULL ||
	    (torch_tensor = PyObject_GetAttrString(torch, "Tensor")) == NULL)
		goto fail;
	Py_DECREF(torch);
	return 1;
fail:
	Py_DECREF(torch);
	return -1;
}

/* An attribute of t as a truth value (attr) or a method's result (call):
 * 0 or 1, or -1 with an exception set. */
static int
tensor_flag(PyObject *t, PyObject *name, int call)
{
	PyObject *r = call ? PyObject_CallMethodNoArgs(t, name)
	                   : PyObject_GetAttr(t, name);
	int v;

	if (r == NULL)
		return -1;
	v = PyObject_IsTrue(r);
	Py_DECREF(r);
	return v;
}

/* A CPU tensor t taken for argument arg: its memory, its element type
 * and count, and a reference to t until dtpy_buf_release. */
static int
tensor_get(PyObject *t, const char *arg, unsigned accept, dtpy_buf *b)
{
	PyObject *dtype, *r;
	void *ptr;
	Py_ssize_t n;
	int dt = -1, v;

	if ((v = tensor_flag(t, s_is_cpu, 0)) <= 0) {
		if (v == 0 && (r = PyObject_GetAttrString(t, "device"))) {
			PyErr_Format(PyExc_TypeError,
			             "argument '%s': a tensor on %S; dtrain "
			             "takes CPU tensors (move it with .cpu(), "
			             "a copy dtrain does not make for you)",
			             arg, r);
			Py_DECREF(r);
		}
		return -1;
	}
	if ((dtype = PyObject_GetAttr(t, s_dtype)) == NULL)
		return -1;
	for (int i = 0; i < 4; i++)
		if (dtype == torch_dtype[i])
			dt = i;
	if (dt < 0 || !(accept & (1u << dt))) {
		PyErr_Format(PyExc_TypeError,
		             "argument '%s': element type '%S' is not "
		             "supported here (this call takes %s)",
		             arg, dtype, accept_list(accept));
		Py_DECREF(dtype);
		return -1;
	}
	Py_DECREF(dtype);
	if ((v = tensor_flag(t, s_is_contiguous, 1)) <= 0) {
		if (v == 0)
			PyErr_Format(
			    PyExc_ValueError,
			    "argument '%s' is not C-contiguous; dtrain "
			    "works in place and does not copy (pass a "
			    "contiguous array, e.g. "
			    "tensor.contiguous())",
			    arg);
		return -1;
	}
	if ((r = PyObject_CallMethodNoArgs(t, s_data_ptr)) == NULL)
		return -1;
	ptr = PyLong_AsVoidPtr(r);
	Py_DECREF(r);
	if ((r = PyObject_CallMethodNoArgs(t, s_numel)) == NULL)
		return -1;
	n = PyLong_AsSsize_t(r);
	Py_DECREF(r);
	if (PyErr_Occurred())
		return -1;
	/* An empty tensor may have no memory at all: the calls still want
	 * an address. */
	static char none;
	if (ptr == NULL)
		ptr = &none;
	/* A Py_buffer over the tensor's memory that owns a reference to it
	 * (released as any other by PyBuffer_Release). */
	if (PyBuffer_FillInfo(&b->view, t, ptr,
	                      n * (Py_ssize_t)dt_dtype_size((dt_dtype)dt), 0,
	                      PyBUF_SIMPLE) < 0)
		return -1;
	b->held = 1;
	b->dtype = (dt_dtype)dt;
	b->count = (size_t)n;
	return 0;
}

int
dtpy_buf_get(PyObject *obj, const char *arg, int writable, unsigned accept,
             dt_dtype bytes_as, dtpy_buf *b)
{
	int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
	int dt;

	memset(b, 0, sizeof(*b));
	/* A tensor has no buffer protocol: it is read through its own
	 * accessors (it is always writable). */
	if (!PyObject_CheckBuffer(obj)) {
		int found = torch_found();

		if (found < 0)
			return -1;
		if (found &&
		    PyObject_TypeCheck(obj, (PyTypeObject *)torch_tensor))
			return tensor_get(obj, arg, accept, b);
	}
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
		             accept_list(accept));
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
