/* The compiled skip_pruned (see pruned_skip.py, which documents the contract and holds
 * the Python reference this must equal).
 *
 * Design: a loop over Fluxion's child order of one vertex (a list of (weight, uniq_id,
 * position) tuples) that reads each child's uniq_id, looks it up in the walk's
 * visited set and in the remembered prunes, and stops at the first child that is not
 * a remembered prune for this request level and window. Nothing is changed: the
 * caller adds the visits and sets the errno. Anything unexpected (an order entry that
 * is not a 3-tuple, a position out of range) raises what the Python loop raises.
 * The uniq_id is read at its slot's offset (_slots.h), as the other loops read theirs.
 */
#include "_slots.h"

static PyObject *names[1]; /* "uniq_id" */
static Layout vertex_layout; /* read at its slot's offset (_slots.h) */

static PyObject *
skip_pruned(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs(nargs, 7, "skip_pruned: 7 arguments expected") < 0)
        return NULL;
    PyObject *kids = args[0], *order = args[1], *pruned = args[3], *here = args[4],
             *visited = args[5], *unset = args[6];
    Py_ssize_t pos;
    if (index_arg(args[2], "skip_pruned: pos must be >= 0", &pos) < 0)
        return NULL;
    if (!PyList_Check(kids) || !PyList_Check(order) || !PyDict_Check(pruned) ||
        !PyAnySet_Check(visited)) {
        PyErr_SetString(PyExc_TypeError,
                        "skip_pruned: kids and order must be lists, pruned a dict, "
                        "visited a set");
        return NULL;
    }
    Py_ssize_t count = 0;
    PyObject *err = unset; /* borrowed while the dict holds it; a new reference at the end */
    Py_INCREF(err);
    for (; pos < PyList_GET_SIZE(order); pos++) {
        PyObject *entry = PyList_GET_ITEM(order, pos);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3) {
            PyErr_SetString(PyExc_TypeError, "skip_pruned: order entries must be 3-tuples");
            goto fail;
        }
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 2));
        if (i == -1 && PyErr_Occurred())
            goto fail;
        if (i < 0 || i >= PyList_GET_SIZE(kids)) {
            PyErr_SetString(PyExc_IndexError, "list index out of range");
            goto fail;
        }
        PyObject *c = PyList_GET_ITEM(kids, i);
        PyObject *uid = get(c, layout_of(&vertex_layout, c, names, 1), names, 0);
        if (uid == NULL)
            goto fail;
        int seen = PySet_Contains(visited, uid);
        PyObject *hit = seen == 0 ? PyDict_GetItemWithError(pruned, uid) : NULL; /* borrowed */
        Py_DECREF(uid);
        if (seen < 0 || (hit == NULL && PyErr_Occurred()))
            goto fail;
        if (seen || hit == NULL)
            break;
        if (!PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 2) {
            PyErr_SetString(PyExc_TypeError, "skip_pruned: pruned values must be pairs");
            goto fail;
        }
        if (PyTuple_GET_ITEM(hit, 0) != here)
            break;
        PyObject *e = PyTuple_GET_ITEM(hit, 1);
        int same = e == unset ? 1 : PyObject_RichCompareBool(e, unset, Py_EQ);
        if (same < 0)
            goto fail;
        if (!same)
            Py_SETREF(err, Py_NewRef(e));
        count++;
    }
    PyObject *out = Py_BuildValue("(nnO)", pos, count, err);
    Py_DECREF(err);
    return out;
fail:
    Py_DECREF(err);
    return NULL;
}

static PyMethodDef methods[] = {
    {"skip_pruned", (PyCFunction)(void (*)(void))skip_pruned, METH_FASTCALL,
     "skip_pruned(kids, order, pos, pruned, here, visited, unset) -> (stopped at, "
     "skipped, last errno); see fluxnode.scheduler.traversers.pruned_skip."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pruned_skip",
    "The compiled skip over remembered prunes (fluxnode.scheduler.traversers.pruned_skip).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__pruned_skip(void)
{
    static const char *const fields[1] = {"uniq_id"};
    if (intern_names(names, fields, 1) < 0)
        return NULL;
    return PyModule_Create(&module);
}
