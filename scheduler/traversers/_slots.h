/* Reading and writing a class's __slots__ at their offsets, and checking a loop's
 * arguments, for the compiled loops (_whole_leaves.c, _update_recipes.c,
 * _leaf_shapes.c, _leaf_scores.c, _pruned_skip.c).
 *
 * Design: PyObject_GetAttr on a slotted object looks the member descriptor up in the
 * type each time (a dict probe through the MRO, behind the method cache), which is
 * most of what the interpreter's own attribute access costs; a compiled loop that goes
 * through it saves little. A member descriptor names the slot's offset in the object,
 * so a loop that checks the class first (Layout, per class) can read and write there
 * directly. Only for plain slots: every name must be a writable object member found by
 * the ordinary lookup (no property or other descriptor in the way) and the class must
 * get and set attributes the generic way; otherwise the generic calls are used. An
 * unset slot (NULL) is read through PyObject_GetAttr, which raises AttributeError.
 */
#ifndef FLUXNODE_SLOTS_H
#define FLUXNODE_SLOTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "structmember.h" /* T_OBJECT_EX, READONLY */

#define LAYOUT_MAX 16

/* Where a class keeps the named attributes: their slot offsets, or (direct == 0)
 * nowhere a loop may reach directly, and it calls PyObject_GetAttr/SetAttr. */
typedef struct {
    PyTypeObject *type; /* strong reference, NULL before the first use */
    int direct;
    Py_ssize_t offset[LAYOUT_MAX];
} Layout;

/* Fill `lay` for `tp` and the `n` (<= LAYOUT_MAX) attribute names. */
static void
layout_for(Layout *lay, PyTypeObject *tp, PyObject *const *names, int n)
{
    Py_XSETREF(lay->type, (PyTypeObject *)Py_NewRef(tp));
    lay->direct = n <= LAYOUT_MAX && tp->tp_getattro == PyObject_GenericGetAttr &&
                  tp->tp_setattro == PyObject_GenericSetAttr;
    for (int i = 0; i < n && lay->direct; i++) {
        PyObject *d = _PyType_Lookup(tp, names[i]); /* borrowed */
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            lay->direct = 0;
            break;
        }
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY)) {
            lay->direct = 0;
            break;
        }
        lay->offset[i] = m->offset;
    }
}

/* The layout of `o`'s class in `lay` (made again when the class changes). */
static inline const Layout *
layout_of(Layout *lay, PyObject *o, PyObject *const *names, int n)
{
    if (Py_TYPE(o) != lay->type)
        layout_for(lay, Py_TYPE(o), names, n);
    return lay;
}

/* Attribute `i` of `o` (a new reference), or NULL with an exception. */
static inline PyObject *
get(PyObject *o, const Layout *lay, PyObject *const *names, int i)
{
    if (lay->direct) {
        PyObject *v = *(PyObject **)((char *)o + lay->offset[i]);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(o, names[i]); /* an unset slot raises AttributeError here */
}

/* Attribute `i` of `o` as a borrowed reference, or NULL when it is not in a slot a
 * loop may read directly (or unset): then the caller uses get(). Borrowed: valid
 * while `o` holds it, that is while the caller runs no Python code. */
static inline PyObject *
borrow(PyObject *o, const Layout *lay, int i)
{
    return lay->direct ? *(PyObject **)((char *)o + lay->offset[i]) : NULL;
}

/* o.<attribute i> = v: 0, or -1 with an exception. */
static inline int
set(PyObject *o, const Layout *lay, PyObject *const *names, int i, PyObject *v)
{
    if (lay->direct) {
        PyObject **slot = (PyObject **)((char *)o + lay->offset[i]);
        PyObject *old = *slot;
        *slot = Py_NewRef(v);
        Py_XDECREF(old);
        return 0;
    }
    return PyObject_SetAttr(o, names[i], v);
}

/* A truth test of attribute `i` of `o`: 1, 0, or -1 with an exception. */
static inline int
truth(PyObject *o, const Layout *lay, PyObject *const *names, int i)
{
    PyObject *v = get(o, lay, names, i);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* 1 when attribute `i` of `o` is None, 0 when not, -1 with an exception. */
static inline int
is_none(PyObject *o, const Layout *lay, PyObject *const *names, int i)
{
    PyObject *v = get(o, lay, names, i);
    if (v == NULL)
        return -1;
    int r = v == Py_None;
    Py_DECREF(v);
    return r;
}

/* Interned attribute names, for a Layout: 0, or -1 with an exception. */
static int
intern_names(PyObject **out, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if ((out[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return -1;
    return 0;
}

/* ------------------------------------------------------------ arguments */
/* Every loop is a METH_FASTCALL function that checks its arguments the same way, and
 * raises what its Python reference's caller would see: these say it once. */

/* nargs == want: 0; else -1 with a TypeError saying `usage` (the call's signature). */
static int
check_nargs(Py_ssize_t nargs, Py_ssize_t want, const char *usage)
{
    if (nargs == want)
        return 0;
    PyErr_SetString(PyExc_TypeError, usage);
    return -1;
}

/* `o` as an index >= 0 in *out: 0; else -1 with the int conversion's exception, or a
 * ValueError saying `negative` (what must be >= 0). */
static int
index_arg(PyObject *o, const char *negative, Py_ssize_t *out)
{
    Py_ssize_t i = PyLong_AsSsize_t(o);
    if (i == -1 && PyErr_Occurred())
        return -1;
    if (i < 0) {
        PyErr_SetString(PyExc_ValueError, negative);
        return -1;
    }
    *out = i;
    return 0;
}

#endif
