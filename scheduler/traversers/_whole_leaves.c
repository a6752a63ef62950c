/* The compiled take_fresh_leaves (see whole_leaves.py, which documents the contract
 * and holds the Python reference this must equal).
 *
 * Design: the loop stays on Python objects (Vertex, the kit's planners, the job's
 * dicts) and changes exactly what the Python loop changes, in the same order; what
 * it saves is the interpreter's work per leaf. Going through PyObject_GetAttr and
 * PyObject_SetAttr saves little (measured: 0.8x the Python loop's time), since a
 * slot access there costs a type lookup as it does in the interpreter. So, for a
 * class whose attributes are plain __slots__ (Vertex, and Emit, which a slotted
 * dataclass is), the loop reads and writes the slots at their offsets (_slots.h). A
 * class that is not laid out so (a property or a __setattr__ in the way, a slot
 * missing) takes the generic calls, and an Emit that is not such a plain dataclass
 * is built by calling it. The kit of the previous leaf is kept: the leaves of a
 * subtree are almost always of one type and size, so the (size, size, type) key is
 * built once per run. Anything unexpected (a kit that does not unpack to three, an
 * unset slot) raises what the Python loop raises.
 *
 * apply_recipe, the same technique for the update walk of a gang's node, is
 * _update_recipes.c; the slots both write are _update_slots.h's.
 */

#include "_update_slots.h"

static PyObject *s_allocated;

/* ------------------------------------------------------------ the kit */

/* The kit of the previous leaf, and what take_one reads of it, kept across leaves. */
typedef struct {
    PyObject *type; /* the leaves' type (compared by identity) */
    Py_ssize_t size;
    PyObject *schedule, *x_checker; /* borrowed from kit */
    PyObject *kit, *tags, *spans;
    int allocated, tracked;
} Kit;

static void
kit_clear(Kit *k)
{
    Py_CLEAR(k->type);
    Py_CLEAR(k->kit);
    Py_CLEAR(k->tags);
    Py_CLEAR(k->spans);
    k->size = -1;
}

/* Make `found` (kits[(size, size, type)]) the current kit. 0, or -1 with an exception. */
static int
kit_set(Kit *k, PyObject *found, PyObject *type, Py_ssize_t size, PyObject *prune_types)
{
    /* the errors of `schedule, x_checker, held = kit` */
    PyObject *t = PySequence_Tuple(found);
    if (t == NULL) {
        PyErr_Format(PyExc_TypeError, "cannot unpack non-iterable %.200s object",
                     Py_TYPE(found)->tp_name);
        return -1;
    }
    Py_ssize_t len = PyTuple_GET_SIZE(t);
    if (len != 3) {
        if (len < 3)
            PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected 3, got %zd)",
                         len);
        else
            PyErr_SetString(PyExc_ValueError, "too many values to unpack (expected 3)");
        Py_DECREF(t);
        return -1;
    }
    found = t; /* kept below as k->kit */
    PyObject *held = PyTuple_GET_ITEM(found, 2);
    PyObject *tags = PyObject_GetAttr(held, vertex_names[V_TAGS]);
    PyObject *spans = tags ? PyObject_GetAttr(held, vertex_names[V_SPANS]) : NULL;
    PyObject *allocated = spans ? PyObject_GetAttr(held, s_allocated) : NULL;
    int alloc = allocated ? PyObject_IsTrue(allocated) : -1;
    Py_XDECREF(allocated);
    int tracked = alloc >= 0 ? PySequence_Contains(prune_types, type) : -1;
    if (tracked < 0) {
        Py_XDECREF(tags);
        Py_XDECREF(spans);
        Py_DECREF(found);
        return -1;
    }
    kit_clear(k);
    k->type = Py_NewRef(type);
    k->size = size;
    k->kit = found;
    k->schedule = PyTuple_GET_ITEM(found, 0);
    k->x_checker = PyTuple_GET_ITEM(found, 1);
    k->tags = tags;
    k->spans = spans;
    k->allocated = alloc;
    k->tracked = tracked;
    return 0;
}

/* ------------------------------------------------------------ the loop */

typedef struct {
    PyObject *kits, *emit, *level, *job_vertices, *out, *prune_types, *agg, *marks,
        *parent_uid;
    int whole;
} Walk;

/* Is `c` a fresh leaf? 1 yes, 0 no, -1 error. */
static int
fresh_leaf(PyObject *c, const Layout *lay)
{
    int r = vtrue(c, lay, V_CHILDREN);
    if (r != 0)
        return r < 0 ? -1 : 0;
    r = vnone(c, lay, V_SCHEDULE);
    if (r != 1)
        return r;
    r = vnone(c, lay, V_X_CHECKER);
    if (r != 1)
        return r;
    r = vtrue(c, lay, V_TAGS);
    if (r != 0)
        return r < 0 ? -1 : 0;
    return 1;
}

/* Is the fresh leaf `c` (`size` units, uniq_id `uid`) taken whole? Its mark asks for
 * all its units, exclusively, or the parent is taken whole and the mark asks for all
 * its units or there is none. 1 yes, 0 no, -1 error. */
static int
taken_whole(PyObject *uid, PyObject *size, const Walk *w)
{
    PyObject *mark = NULL;
    if (w->marks != Py_None) {
        PyObject *edge = PyTuple_Pack(2, w->parent_uid, uid);
        if (edge == NULL)
            return -1;
        mark = PyDict_GetItemWithError(w->marks, edge); /* borrowed */
        Py_DECREF(edge);
        if (mark == NULL && PyErr_Occurred())
            return -1;
    }
    if (mark == NULL)
        return w->whole;
    PyObject *needs = PySequence_GetItem(mark, 0);
    if (needs == NULL)
        return -1;
    int differ = PyObject_RichCompareBool(needs, size, Py_NE);
    Py_DECREF(needs);
    if (differ != 0)
        return differ < 0 ? -1 : 0;
    if (w->whole)
        return 1;
    PyObject *x = PySequence_GetItem(mark, 1);
    if (x == NULL)
        return -1;
    int r = PyObject_IsTrue(x);
    Py_DECREF(x);
    return r;
}

/* Take the fresh leaf `c` if it is taken whole and its kit is there: 1 taken, 0 not
 * (another mark, or no kit yet), -1 error. */
static int
take_one(PyObject *c, const Layout *lay, const Walk *w, Kit *k)
{
    int ret = -1;
    PyObject *uid = NULL, *type = NULL, *e = NULL, *sum = NULL;
    PyObject *size = get(c, lay, vertex_names, V_SIZE);
    if (size == NULL)
        return -1;
    Py_ssize_t sz = PyLong_AsSsize_t(size);
    if (sz == -1 && PyErr_Occurred())
        goto done;
    if ((uid = get(c, lay, vertex_names, V_UNIQ_ID)) == NULL)
        goto done;
    int r = taken_whole(uid, size, w);
    if (r != 1) {
        ret = r;
        goto done;
    }
    if ((type = get(c, lay, vertex_names, V_TYPE)) == NULL)
        goto done;
    if (type != k->type || sz != k->size) {
        PyObject *key = PyTuple_Pack(3, size, size, type);
        if (key == NULL)
            goto done;
        PyObject *found = PyDict_GetItemWithError(w->kits, key); /* borrowed */
        Py_DECREF(key);
        if (found == NULL) {
            ret = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
        if (kit_set(k, found, type, sz, w->prune_types) < 0)
            goto done;
    }
    /* what `c.schedule, c.x_checker, held = kit; c.hold_whole(held)` does */
    if (set(c, lay, vertex_names, V_SCHEDULE, k->schedule) < 0 ||
        set(c, lay, vertex_names, V_X_CHECKER, k->x_checker) < 0 ||
        set(c, lay, vertex_names, V_TAGS, k->tags) < 0 ||
        set(c, lay, vertex_names, V_XSPANS, k->spans) < 0 ||
        set(c, lay, vertex_names, V_SPANS, k->spans) < 0 ||
        set(c, lay, vertex_names, k->allocated ? V_ALLOCATIONS : V_RESERVATIONS, k->tags) < 0)
        goto done;
    if (PyDict_SetItem(w->job_vertices, uid, c) < 0)
        goto done;
    if ((e = make_emit(w->emit, c, size, Py_True, w->level)) == NULL ||
        PyList_Append(w->out, e) < 0)
        goto done;
    if (k->tracked) {
        PyObject *had = PyDict_GetItemWithError(w->agg, type); /* borrowed */
        if (had == NULL && PyErr_Occurred())
            goto done;
        sum = had == NULL ? Py_NewRef(size) : PyNumber_Add(had, size);
        if (sum == NULL || PyDict_SetItem(w->agg, type, sum) < 0)
            goto done;
    }
    ret = 1;
done:
    Py_XDECREF(sum);
    Py_XDECREF(e);
    Py_XDECREF(type);
    Py_XDECREF(uid);
    Py_DECREF(size);
    return ret;
}

static PyObject *
take_fresh_leaves(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs(nargs, 12, "take_fresh_leaves(kids, i, kits, emit, level, job_vertices, "
                                "out, prune_types, agg, marks, uid, whole) takes 12 "
                                "arguments") < 0)
        return NULL;
    int whole = PyObject_IsTrue(args[11]);
    if (whole < 0)
        return NULL;
    Walk w = {args[2], args[3], args[4], args[5], args[6], args[7],
              args[8], args[9], args[10], whole};
    Py_ssize_t i;
    if (index_arg(args[1], "take_fresh_leaves: i must be >= 0", &i) < 0)
        return NULL;
    if (!PyDict_Check(w.kits) || !PyDict_Check(w.job_vertices) || !PyList_Check(w.out) ||
        !PyDict_Check(w.agg) || (w.marks != Py_None && !PyDict_Check(w.marks))) {
        PyErr_SetString(PyExc_TypeError, "take_fresh_leaves: kits, job_vertices, agg and "
                                         "marks (or None) must be dicts, out a list");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "take_fresh_leaves: kids must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t start = i;
    Kit k = {NULL, -1, NULL, NULL, NULL, NULL, NULL, 0, 0};
    int r = 1;
    for (; i < n; i++) {
        PyObject *c = items[i];
        const Layout *lay = vertex_layout_of(c);
        r = fresh_leaf(c, lay);
        if (r == 1)
            r = take_one(c, lay, &w, &k);
        if (r != 1)
            break;
    }
    kit_clear(&k);
    Py_DECREF(seq);
    if (r < 0)
        return NULL;
    /* (a format string would be parsed on each call: ~500 instructions of 3 calls per
     * node of a gang) */
    PyObject *next = PyLong_FromSsize_t(i), *taken = next ? PyLong_FromSsize_t(i - start)
                                                          : NULL;
    PyObject *result = taken ? PyTuple_Pack(2, next, taken) : NULL;
    Py_XDECREF(next);
    Py_XDECREF(taken);
    return result;
}

static PyMethodDef methods[] = {
    {"take_fresh_leaves", (PyCFunction)(void (*)(void))take_fresh_leaves, METH_FASTCALL,
     "take_fresh_leaves(kids, i, kits, emit, level, job_vertices, out, prune_types, agg,"
     " marks, uid, whole) -> (stopped at, taken); see"
     " fluxnode.scheduler.traversers.whole_leaves."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_whole_leaves",
    "Compiled take_fresh_leaves (see fluxnode.scheduler.traversers.whole_leaves).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__whole_leaves(void)
{
    if (update_slots_init() < 0 ||
        (s_allocated = PyUnicode_InternFromString("allocated")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
