/* The compiled leaf_fields (see leaf_shapes.py, which documents the contract and holds
 * the Python reference this must equal).
 *
 * Design: a template lookup (dfu_fast) names each untouched leaf parent by what the walk
 * reads of it and its children. On a fresh graph every vertex is met once, so the
 * fields are read once per socket: 4 tuples of 34 children, built in Python from 136
 * attribute reads. Here the reads go to the slots at their offsets (_slots.h) and the
 * tuples are filled in place; the result is the same tuple, compared and hashed by
 * the caller as before.
 */
#include "_slots.h"

enum { L_CHILDREN, L_TYPE, L_ID, L_SIZE, L_STATUS, L_N };
static const char *const leaf_field_names[L_N] = {"children", "type", "id", "size", "status"};
static PyObject *names[L_N];
static Layout parent_layout, kid_layout;

static PyObject *
leaf_fields(PyObject *Py_UNUSED(self), PyObject *u)
{
    const Layout *lu = layout_of(&parent_layout, u, names, L_N);
    PyObject *kids = get(u, lu, names, L_CHILDREN);
    if (kids == NULL)
        return NULL;
    PyObject *seq = PySequence_Fast(kids, "leaf_fields: children must be a sequence");
    Py_DECREF(kids);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *result = NULL, *cols[4] = {NULL, NULL, NULL, NULL}, *own[4] = {NULL, NULL,
                                                                             NULL, NULL};
    /* what `any(map(attrgetter("children"), kids))` answers */
    for (Py_ssize_t i = 0; i < n; i++) {
        const Layout *lk = layout_of(&kid_layout, items[i], names, L_N);
        PyObject *ch = get(items[i], lk, names, L_CHILDREN);
        if (ch == NULL)
            goto done;
        int r = PyObject_IsTrue(ch);
        Py_DECREF(ch);
        if (r < 0)
            goto done;
        if (r) {
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    for (int f = 0; f < 4; f++)
        if ((own[f] = get(u, lu, names, L_TYPE + f)) == NULL)
            goto done;
    for (int f = 0; f < 4; f++)
        if ((cols[f] = PyTuple_New(n)) == NULL)
            goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Layout *lk = layout_of(&kid_layout, items[i], names, L_N);
        for (int f = 0; f < 4; f++) {
            PyObject *v = get(items[i], lk, names, L_TYPE + f);
            if (v == NULL)
                goto done;
            PyTuple_SET_ITEM(cols[f], i, v);
        }
    }
    result = PyTuple_Pack(8, own[0], own[1], own[2], own[3], cols[0], cols[1], cols[2],
                          cols[3]);
done:
    for (int f = 0; f < 4; f++) {
        Py_XDECREF(own[f]);
        Py_XDECREF(cols[f]);
    }
    Py_DECREF(seq);
    return result;
}

static PyMethodDef methods[] = {
    {"leaf_fields", leaf_fields, METH_O,
     "leaf_fields(u) -> (type, id, size, status, kids' types, ids, sizes, statuses) or"
     " None; see fluxnode.scheduler.traversers.leaf_shapes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_leaf_shapes",
    "Compiled leaf_fields (see fluxnode.scheduler.traversers.leaf_shapes).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__leaf_shapes(void)
{
    if (intern_names(names, leaf_field_names, L_N) < 0)
        return NULL;
    return PyModule_Create(&module);
}
