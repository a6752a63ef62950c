/* The compiled leaf_fields (see leaf_shapes.py, which documents the contract and holds
 * the Python reference this must equal).
 *
 * Design: a template lookup (dfu_fast) names each untouched leaf parent by what the walk
 * reads of it and its children. On a fresh graph every vertex is met once, so the
 * fields are read once per socket: 4 tuples of 34 children, built in Python from 136
 * attribute reads. Here the reads go to the slots at their offsets (_slots.h) and the
 * tuples are filled in place; the result is the same tuple, compared and hashed by
 * the caller as before.
 *
 * leaf_number goes one step further for the lookup itself: building, hashing and
 * comparing those tuples (about 4 us a socket) was most of what a fresh node cost the
 * first-match walk. It hashes the fields where they are and compares them with the
 * tuples of the shapes already numbered whose hash is the same (a bucket), so a shape
 * met before costs 136 reads and no object; only a new shape builds its tuple.
 */
#include "_slots.h"

enum { L_CHILDREN, L_TYPE, L_ID, L_SIZE, L_STATUS, L_UNIQ_ID, L_N };
static const char *const leaf_field_names[L_N] = {"children", "type",   "id",
                                                  "size",     "status", "uniq_id"};
static PyObject *names[L_N];
static Layout parent_layout, kid_layout;

/* Field `f` of child `k`: borrowed from its slot, or else a new reference in *own
 * (released by the caller); NULL with an exception. */
static inline PyObject *
kid_field(PyObject *k, const Layout *lk, int f, PyObject **own)
{
    PyObject *v = borrow(k, lk, f);
    if (v != NULL)
        return v;
    return *own = get(k, lk, names, f);
}

/* The hash of a field: a string's is kept in it; others are asked. (An int's value
 * read with PyLong_AsLongAndOverflow was no cheaper than asking: 2.5 against 2.8 M
 * instructions of a 500-node gang's 140,000 ints.) */
static inline Py_hash_t
field_hash(PyObject *v)
{
    if (PyUnicode_CheckExact(v)) {
        Py_hash_t h = ((PyASCIIObject *)v)->hash;
        if (h != -1)
            return h;
    }
    return PyObject_Hash(v);
}

/* 1 when child `k` has children, 0 when not, -1 with an exception. */
static inline int
has_children(PyObject *k, const Layout *lk)
{
    PyObject *own = NULL, *ch = kid_field(k, lk, L_CHILDREN, &own);
    if (ch == NULL)
        return -1;
    int r = PyList_CheckExact(ch)    ? PyList_GET_SIZE(ch) > 0
            : PyTuple_CheckExact(ch) ? PyTuple_GET_SIZE(ch) > 0
                                     : PyObject_IsTrue(ch);
    Py_XDECREF(own);
    return r;
}

/* A parent as leaf_fields, number_of and deep_number read it: its layout, and its
 * children as a fast sequence (`seq`, a reference the caller releases) of `n`
 * `items`. */
typedef struct {
    const Layout *lay;
    PyObject *seq, **items;
    Py_ssize_t n;
} Parent;

/* Fill `p` for `u`: 0, or -1 with an exception (`what` names the caller). */
static int
open_parent(Parent *p, PyObject *u, const char *what)
{
    p->lay = layout_of(&parent_layout, u, names, L_N);
    PyObject *kids = get(u, p->lay, names, L_CHILDREN);
    if (kids == NULL)
        return -1;
    p->seq = PySequence_Fast(kids, what);
    Py_DECREF(kids);
    if (p->seq == NULL)
        return -1;
    p->n = PySequence_Fast_GET_SIZE(p->seq);
    p->items = PySequence_Fast_ITEMS(p->seq);
    return 0;
}

/* `o`'s type, id, size and status into `out` (new references): 0, or -1 with an
 * exception (what was read stays in `out` for the caller to release). */
static int
read_fields(PyObject *o, const Layout *lay, PyObject **out)
{
    for (int f = 0; f < 4; f++)
        if ((out[f] = get(o, lay, names, L_TYPE + f)) == NULL)
            return -1;
    return 0;
}

/* 1 when a child in `items` has children, 0 when none has, -1 with an exception. */
static int
any_has_children(PyObject *const *items, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = has_children(items[i], layout_of(&kid_layout, items[i], names, L_N));
        if (r != 0)
            return r;
    }
    return 0;
}

static PyObject *
leaf_fields(PyObject *Py_UNUSED(self), PyObject *u)
{
    Parent p;
    if (open_parent(&p, u, "leaf_fields: children must be a sequence") < 0)
        return NULL;
    PyObject *result = NULL, *cols[4] = {NULL, NULL, NULL, NULL}, *own[4] = {NULL, NULL,
                                                                             NULL, NULL};
    /* what `any(map(attrgetter("children"), kids))` answers */
    int r = any_has_children(p.items, p.n);
    if (r != 0) {
        result = r < 0 ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    if (read_fields(u, p.lay, own) < 0)
        goto done;
    for (int f = 0; f < 4; f++)
        if ((cols[f] = PyTuple_New(p.n)) == NULL)
            goto done;
    for (Py_ssize_t i = 0; i < p.n; i++) {
        PyObject *kf[4] = {NULL, NULL, NULL, NULL};
        r = read_fields(p.items[i], layout_of(&kid_layout, p.items[i], names, L_N), kf);
        for (int f = 0; f < 4; f++)
            if (kf[f] != NULL)
                PyTuple_SET_ITEM(cols[f], i, kf[f]); /* steals */
        if (r < 0)
            goto done;
    }
    result = PyTuple_Pack(8, own[0], own[1], own[2], own[3], cols[0], cols[1], cols[2],
                          cols[3]);
done:
    for (int f = 0; f < 4; f++) {
        Py_XDECREF(own[f]);
        Py_XDECREF(cols[f]);
    }
    Py_DECREF(p.seq);
    return result;
}

/* 1 when the fields of `u` and its children equal `whole` (a leaf_fields tuple),
 * 0 when not, -1 with an exception. */
static int
same_fields(PyObject *const *own, PyObject *const *items, Py_ssize_t n, PyObject *whole)
{
    if (!PyTuple_CheckExact(whole) || PyTuple_GET_SIZE(whole) != 8)
        return 0;
    for (int f = 0; f < 4; f++) {
        PyObject *w = PyTuple_GET_ITEM(whole, f);
        if (w != own[f]) {
            int r = PyObject_RichCompareBool(own[f], w, Py_EQ);
            if (r <= 0)
                return r;
        }
    }
    for (int f = 0; f < 4; f++) {
        PyObject *col = PyTuple_GET_ITEM(whole, 4 + f);
        if (!PyTuple_CheckExact(col) || PyTuple_GET_SIZE(col) != n)
            return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const Layout *lk = layout_of(&kid_layout, items[i], names, L_N);
        for (int f = 0; f < 4; f++) {
            PyObject *own_v = NULL, *v = kid_field(items[i], lk, L_TYPE + f, &own_v);
            if (v == NULL)
                return -1;
            PyObject *w = PyTuple_GET_ITEM(PyTuple_GET_ITEM(whole, 4 + f), i);
            int r = v == w ? 1 : PyObject_RichCompareBool(v, w, Py_EQ);
            Py_XDECREF(own_v);
            if (r <= 0)
                return r;
        }
    }
    return 1;
}

/* leaf_number's answer for `u` (a new reference), or NULL with an exception. */
static PyObject *
number_of(PyObject *u, PyObject *buckets)
{
    Parent p;
    if (open_parent(&p, u, "leaf_number: children must be a sequence") < 0)
        return NULL;
    Py_ssize_t n = p.n;
    PyObject **items = p.items;
    PyObject *result = NULL, *own[4] = {NULL, NULL, NULL, NULL}, *key = NULL;
    /* first whether a child has children (None), then the fields, as leaf_fields */
    int r = any_has_children(items, n);
    if (r != 0) {
        result = r < 0 ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    if (read_fields(u, p.lay, own) < 0)
        goto done;
    /* the hash of the fields in leaf_fields' order */
    Py_uhash_t acc = 0x345678UL;
    for (int f = 0; f < 4; f++) {
        Py_hash_t h = field_hash(own[f]);
        if (h == -1)
            goto done;
        acc = (acc ^ (Py_uhash_t)h) * 1000003UL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const Layout *lk = layout_of(&kid_layout, items[i], names, L_N);
        for (int f = 0; f < 4; f++) {
            PyObject *own_v = NULL, *v = kid_field(items[i], lk, L_TYPE + f, &own_v);
            if (v == NULL)
                goto done;
            Py_hash_t h = field_hash(v);
            Py_XDECREF(own_v);
            if (h == -1)
                goto done;
            acc = (acc ^ (Py_uhash_t)h) * 1000003UL;
        }
    }
    acc ^= (Py_uhash_t)n;
    if ((key = PyLong_FromSsize_t((Py_ssize_t)(Py_hash_t)acc)) == NULL)
        goto done;
    PyObject *bucket = PyDict_GetItemWithError(buckets, key); /* borrowed */
    if (bucket == NULL && PyErr_Occurred())
        goto done;
    if (bucket != NULL) {
        if (!PyList_CheckExact(bucket)) {
            PyErr_SetString(PyExc_TypeError, "leaf_number: a bucket must be a list");
            goto done;
        }
        for (Py_ssize_t b = 0; b < PyList_GET_SIZE(bucket); b++) {
            PyObject *entry = PyList_GET_ITEM(bucket, b);
            if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2) {
                PyErr_SetString(PyExc_TypeError,
                                "leaf_number: a bucket holds (fields, number) pairs");
                goto done;
            }
            int r = same_fields(own, items, n, PyTuple_GET_ITEM(entry, 0));
            if (r < 0)
                goto done;
            if (r) {
                result = Py_NewRef(PyTuple_GET_ITEM(entry, 1));
                goto done;
            }
        }
    }
    /* a shape not numbered yet: its fields, for the caller to number and keep */
    PyObject *whole = leaf_fields(NULL, u);
    if (whole != NULL) {
        result = PyTuple_Pack(2, key, whole);
        Py_DECREF(whole);
    }
done:
    for (int f = 0; f < 4; f++)
        Py_XDECREF(own[f]);
    Py_XDECREF(key);
    Py_DECREF(p.seq);
    return result;
}

static PyObject *
leaf_number(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "leaf_number(u, buckets: dict)");
        return NULL;
    }
    return number_of(args[0], args[1]);
}

static PyObject *s_deep;

/* deep_number (see leaf_shapes._deep_number_py): `u`'s deep shape number when every
 * part of it is numbered already, else None. */
static PyObject *
deep_number(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyDict_Check(args[1]) || !PyDict_Check(args[2]) ||
        !PyDict_Check(args[3]) || !PyDict_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "deep_number(u, shapes, buckets, weights, shape_ids: dicts)");
        return NULL;
    }
    PyObject *u = args[0], *shapes = args[1], *buckets = args[2], *weights = args[3],
             *shape_ids = args[4];
    Parent p;
    if (open_parent(&p, u, "deep_number: children must be a sequence") < 0)
        return NULL;
    const Layout *lu = p.lay;
    Py_ssize_t n = p.n;
    PyObject **items = p.items;
    PyObject *result = NULL, *parts = NULL, *order = NULL, *key = NULL, *zero = NULL;
    PyObject *own[4] = {NULL, NULL, NULL, NULL}; /* type, size, status (own[1]: unused) */
    if ((parts = PyTuple_New(n)) == NULL || (order = PyTuple_New(n)) == NULL ||
        (zero = PyLong_FromLong(0)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = items[i], *part = NULL;
        const Layout *lk = layout_of(&kid_layout, k, names, L_N);
        int inner = has_children(k, lk);
        PyObject *kuid = inner < 0 ? NULL : get(k, lk, names, L_UNIQ_ID);
        if (kuid == NULL)
            goto done;
        if (inner) {
            /* _leaf_shape(k): kept in shapes, or found by number_of; any other answer
             * (a new shape, or None) is left to the Python walk */
            part = PyDict_GetItemWithError(shapes, kuid); /* borrowed */
            if (part != NULL)
                Py_INCREF(part);
            else if (!PyErr_Occurred()) {
                part = number_of(k, buckets);
                if (part != NULL && PyLong_CheckExact(part) &&
                    PyDict_SetItem(shapes, kuid, part) < 0)
                    Py_CLEAR(part);
            }
            if (part != NULL && !PyLong_CheckExact(part)) {
                Py_DECREF(part);
                Py_DECREF(kuid);
                result = Py_NewRef(Py_None);
                goto done;
            }
        }
        else {
            PyObject *f[4] = {NULL, NULL, NULL, NULL};
            if (read_fields(k, lk, f) == 0)
                part = PyTuple_Pack(4, f[0], f[1], f[2], f[3]);
            for (int j = 0; j < 4; j++)
                Py_XDECREF(f[j]);
        }
        if (part == NULL) {
            Py_DECREF(kuid);
            goto done;
        }
        PyTuple_SET_ITEM(parts, i, part);
        PyObject *w = PyDict_GetItemWithError(weights, kuid); /* borrowed */
        Py_DECREF(kuid);
        if (w == NULL && PyErr_Occurred())
            goto done;
        PyTuple_SET_ITEM(order, i, Py_NewRef(w != NULL ? w : zero));
    }
    if ((own[0] = get(u, lu, names, L_TYPE)) == NULL ||
        (own[2] = get(u, lu, names, L_SIZE)) == NULL ||
        (own[3] = get(u, lu, names, L_STATUS)) == NULL)
        goto done;
    if ((key = PyTuple_Pack(6, s_deep, own[0], own[2], own[3], parts, order)) == NULL)
        goto done;
    PyObject *got = PyDict_GetItemWithError(shape_ids, key); /* borrowed */
    if (got == NULL && PyErr_Occurred())
        goto done;
    result = Py_NewRef(got != NULL && PyLong_CheckExact(got) ? got : Py_None);
done:
    for (int f = 0; f < 4; f++)
        Py_XDECREF(own[f]);
    Py_XDECREF(key);
    Py_XDECREF(zero);
    Py_XDECREF(order);
    Py_XDECREF(parts);
    Py_DECREF(p.seq);
    return result;
}

static PyMethodDef methods[] = {
    {"leaf_fields", leaf_fields, METH_O,
     "leaf_fields(u) -> (type, id, size, status, kids' types, ids, sizes, statuses) or"
     " None; see fluxnode.scheduler.traversers.leaf_shapes."},
    {"leaf_number", (PyCFunction)(void (*)(void))leaf_number, METH_FASTCALL,
     "leaf_number(u, buckets) -> the number buckets hold for u's leaf_fields, None,"
     " or (hash, leaf_fields) for a new shape; see"
     " fluxnode.scheduler.traversers.leaf_shapes."},
    {"deep_number", (PyCFunction)(void (*)(void))deep_number, METH_FASTCALL,
     "deep_number(u, shapes, buckets, weights, shape_ids) -> u's deep shape number when"
     " every part of it is numbered, else None; see"
     " fluxnode.scheduler.traversers.leaf_shapes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_leaf_shapes",
    "Compiled leaf_fields and leaf_number (see fluxnode.scheduler.traversers.leaf_shapes).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__leaf_shapes(void)
{
    if (intern_names(names, leaf_field_names, L_N) < 0 ||
        (s_deep = PyUnicode_InternFromString("deep")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
