/* ZMQ_EVENTS of a ZeroMQ socket, asked of libzmq directly (see zevents.py for why).
 *
 * pyzmq's Socket.get costs about 8,900 instructions for this one int option (a deep
 * closed check, the option's type looked up among enums), and a broker asks it about
 * 15 times per ping at depth 4. Here: the socket's own `closed` and `underlying`
 * attributes (pyzmq's), then zmq_getsockopt from the libzmq pyzmq loaded, found once
 * among the loaded objects (dl_iterate_phdr) and opened without loading anything
 * (RTLD_NOLOAD). Any doubt -- a closed socket, a non-zero return -- is left to pyzmq's
 * own `socket.get(ZMQ_EVENTS)`, which answers or raises as it always did.
 */
#define PY_SSIZE_T_CLEAN
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <Python.h>
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#define OPT_ZMQ_EVENTS 15 /* zmq.h's ZMQ_EVENTS */

typedef int (*getsockopt_fn)(void *socket, int option, void *value, size_t *size);
static getsockopt_fn zmq_getsockopt_p = NULL;
static PyObject *str_closed, *str_underlying, *str_get, *opt_events;

static int find_libzmq(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    const char *name = info->dlpi_name;
    const char *base = name ? strrchr(name, '/') : NULL;
    base = base ? base + 1 : name;
    if (base && strncmp(base, "libzmq", 6) == 0) {
        *(const char **)data = name;
        return 1;
    }
    return 0;
}

/* bind() -> bool: look zmq_getsockopt up in the libzmq already loaded. */
static PyObject *zevents_bind(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    const char *path = NULL;
    dl_iterate_phdr(find_libzmq, &path);
    if (path == NULL)
        Py_RETURN_FALSE;
    void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL)
        Py_RETURN_FALSE;
    void *fn = dlsym(lib, "zmq_getsockopt");
    if (fn == NULL) {
        dlclose(lib);
        Py_RETURN_FALSE;
    }
    zmq_getsockopt_p = (getsockopt_fn)fn; /* `lib` stays open: pyzmq holds it anyway */
    Py_RETURN_TRUE;
}

/* What pyzmq answers: socket.get(ZMQ_EVENTS), or what it raises. */
static PyObject *asked_of_pyzmq(PyObject *sock)
{
    return PyObject_CallMethodOneArg(sock, str_get, opt_events);
}

/* events(socket) -> int: its ZMQ_EVENTS bits, as pyzmq's get gives them. */
static PyObject *zevents_events(PyObject *self, PyObject *sock)
{
    (void)self;
    if (zmq_getsockopt_p == NULL)
        return asked_of_pyzmq(sock);
    PyObject *closed = PyObject_GetAttr(sock, str_closed);
    if (closed == NULL)
        return NULL;
    int is_closed = PyObject_IsTrue(closed);
    Py_DECREF(closed);
    if (is_closed != 0) {
        if (is_closed < 0)
            return NULL;
        return asked_of_pyzmq(sock);
    }
    PyObject *address = PyObject_GetAttr(sock, str_underlying);
    if (address == NULL)
        return NULL;
    void *handle = PyLong_AsVoidPtr(address);
    Py_DECREF(address);
    if (handle == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return asked_of_pyzmq(sock);
    }
    int value = 0;
    size_t size = sizeof value;
    if (zmq_getsockopt_p(handle, OPT_ZMQ_EVENTS, &value, &size) != 0)
        return asked_of_pyzmq(sock);
    return PyLong_FromLong(value);
}

static PyMethodDef methods[] = {
    {"bind", zevents_bind, METH_NOARGS, "Find zmq_getsockopt in the loaded libzmq."},
    {"events", zevents_events, METH_O, "A socket's ZMQ_EVENTS, as socket.get gives it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_zevents", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__zevents(void)
{
    str_closed = PyUnicode_InternFromString("closed");
    str_underlying = PyUnicode_InternFromString("underlying");
    str_get = PyUnicode_InternFromString("get");
    opt_events = PyLong_FromLong(OPT_ZMQ_EVENTS);
    if (str_closed == NULL || str_underlying == NULL || str_get == NULL || opt_events == NULL)
        return NULL;
    return PyModule_Create(&module);
}
