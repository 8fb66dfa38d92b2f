/*
 * err.c - dt_err as Python exceptions.
 *
 * dtrain.Error is the base class; each code of the C library's error table
 * has a subclass (dtrain.TimedOut for DT_ETIMEDOUT, ...), so a program can
 * catch one kind of failure or all of them. An exception carries the
 * detailed message of dt_errmsg() - the text the C programs print - and
 * the code as its attributes `code` and `name`.
 */
#include "dtpy.h"

/* The Python name of each code's class. The table is indexed by code; a
 * code the table does not know (a newer library) raises the base class,
 * so no C error is ever lost. */
static const char *const class_names[] = {
    [DT_EINVAL] = "InvalidArgument",
    [DT_ENOMEM] = "OutOfMemory",
    [DT_ECONFIG] = "ConfigError",
    [DT_EIO] = "IOFailure",
    [DT_ETIMEDOUT] = "TimedOut",
    [DT_ECONNREFUSED] = "ConnectionRefused",
    [DT_ECLOSED] = "ConnectionClosed",
    [DT_EPROTO] = "ProtocolError",
    [DT_ETOOBIG] = "TooBig",
    [DT_ENOKEY] = "UnknownKey",
    [DT_ESIZE] = "SizeMismatch",
    [DT_EEXIST] = "AlreadyExists",
    [DT_ESTATE] = "WrongState",
    [DT_EPEER] = "PeerFailed",
    [DT_EFORMAT] = "BadFormat",
    [DT_ENOTSUP] = "NotSupported",
    [DT_EMISMATCH] = "RanksDisagree",
    [DT_ESYS] = "SystemError",
    [DT_ESHUTDOWN] = "ShuttingDown",
    [DT_EAUTH] = "AuthFailed",
    [DT_EMEMBERSHIP] = "MembershipChanged",
};
#define NCLASSES (sizeof(class_names) / sizeof(class_names[0]))

static PyObject *error_base;
static PyObject *error_class[NCLASSES];

int
dtpy_err_add(PyObject *module)
{
	char qual[64];

	error_base = PyErr_NewExceptionWithDoc(
	    "dtrain.Error",
	    "A dtrain call failed; str() is the library's detailed message, "
	    "code and name its dt_err.",
	    NULL, NULL);
	if (error_base == NULL)
		return -1;
	Py_INCREF(error_base);
	if (PyModule_AddObject(module, "Error", error_base) < 0) {
		Py_DECREF(error_base);
		return -1;
	}
	for (size_t i = 1; i < NCLASSES; i++) {
		if (class_names[i] == NULL)
			continue;
		snprintf(qual, sizeof(qual), "dtrain.%s", class_names[i]);
		error_class[i] = PyErr_NewException(qual, error_base, NULL);
		if (error_class[i] == NULL)
			return -1;
		Py_INCREF(error_class[i]);
		if (PyModule_AddObject(module, class_names[i], error_class[i]) <
		    0) {
			Py_DECREF(error_class[i]);
			return -1;
		}
	}
	return 0;
}

/* Set code and name on exc; -1 with an exception set on failure. */
static int
set_code(PyObject *exc, dt_err err)
{
	PyObject *code = PyLong_FromLong((long)err);
	PyObject *name = PyUnicode_FromString(dt_errname(err));
	int rc = -1;

	if (code != NULL && name != NULL &&
	    PyObject_SetAttrString(exc, "code", code) == 0 &&
	    PyObject_SetAttrString(exc, "name", name) == 0)
		rc = 0;
	Py_XDECREF(code);
	Py_XDECREF(name);
	return rc;
}

PyObject *
dtpy_raise(dt_err err)
{
	const char *msg = dt_errmsg();
	PyObject *cls = error_base, *exc;

	if ((size_t)err < NCLASSES && error_class[err] != NULL)
		cls = error_class[err];
	if (msg == NULL || msg[0] == '\0')
		msg = dt_strerror(err);
	exc = PyObject_CallFunction(cls, "s", msg);
	if (exc == NULL)
		return NULL;
	if (set_code(exc, err) == 0)
		PyErr_SetObject(cls, exc);
	Py_DECREF(exc);
	return NULL;
}
