/* The compiled apply_recipe (see update_recipes.py, which documents the contract and
 * holds the _apply_recipe_py reference this must equal).
 *
 * Design: the update walk keeps what it did below a node of a gang as a recipe and
 * does it again to the next node entered the same way. A recipe is checked entry by
 * entry first against the node's vertices (a recipe that does not fit changes
 * nothing), then done entry by entry: the state, the filing among the job's vertices,
 * the emit, the subtree-cache entry and the edge weight, as the walk would. It reads
 * and writes the Vertex and Emit slots at their offsets (_update_slots.h, _slots.h),
 * as take_fresh_leaves does (_whole_leaves.c); the same Python reference rule holds:
 * one C file per Python reference.
 */
#include "_update_slots.h"

static PyObject *s_pop;

/* The update state a recipe gives a vertex, in update_recipes.STATE's order. */
static const int state_fields[9] = {V_SCHEDULE, V_X_CHECKER, V_SUBPLAN,     V_TAGS,
                                    V_XSPANS,   V_SPANS,     V_AGSPANS,     V_ALLOCATIONS,
                                    V_RESERVATIONS};

enum { R_PATH, R_NEEDS, R_X, R_DLEVEL, R_STATE, R_W, R_TYPE, R_SIZE, R_TOT, R_NKIDS, R_GOT,
       R_N };

/* The vertex at child positions `path` below `root` (a new reference), Py_None (a new
 * reference) when a vertex on the way has too few children, or NULL with an exception:
 * what update_recipes._at reads. */
static PyObject *
at_path(PyObject *root, PyObject *path)
{
    if (!PyTuple_Check(path)) {
        PyErr_SetString(PyExc_TypeError, "apply_recipe: a path must be a tuple");
        return NULL;
    }
    PyObject *v = Py_NewRef(root);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(path); i++) {
        PyObject *kids = get(v, vertex_layout_of(v), vertex_names, V_CHILDREN);
        Py_DECREF(v);
        if (kids == NULL)
            return NULL;
        Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(path, i));
        if (pos == -1 && PyErr_Occurred()) {
            v = NULL;
        } else {
            Py_ssize_t nkids = PySequence_Size(kids);
            if (nkids < 0)
                v = NULL;
            else if (pos >= nkids) {
                Py_DECREF(kids);
                Py_RETURN_NONE;
            } else
                v = PySequence_GetItem(kids, pos);
        }
        Py_DECREF(kids);
        if (v == NULL)
            return NULL;
    }
    return v;
}

typedef struct {
    PyObject *root, *emit, *out, *job_vertices, *marks, *marked, *totals, *cache, *weights,
        *order, *moves;
    Py_ssize_t level;
    int tracked;
} Recipe;

/* A borrowed dict value, or `dflt` when the key is not there; NULL on error. */
static PyObject *
dict_get(PyObject *d, PyObject *key, PyObject *dflt)
{
    PyObject *v = PyDict_GetItemWithError(d, key);
    return v != NULL ? v : PyErr_Occurred() ? NULL : dflt;
}

/* Does `v` fit the recipe's `entry`? 1, 0, or -1 with an exception. */
static int
entry_fits(PyObject *v, PyObject *const *entry, const Recipe *r)
{
    const Layout *lay = vertex_layout_of(v);
    int fits = 0;
    PyObject *f = NULL, *kids = NULL, *uid = NULL;
    for (int i = 0; i < 3; i++) { /* schedule, x_checker, subplan: None */
        int none = vnone(v, lay, state_fields[i]);
        if (none != 1)
            return none;
    }
    int held = vtrue(v, lay, V_TAGS);
    if (held != 0)
        return held < 0 ? -1 : 0;
    if ((f = get(v, lay, vertex_names, V_TYPE)) == NULL)
        return -1;
    int ne = PyObject_RichCompareBool(f, entry[R_TYPE], Py_NE);
    Py_CLEAR(f);
    if (ne != 0)
        return ne < 0 ? -1 : 0;
    if ((f = get(v, lay, vertex_names, V_SIZE)) == NULL)
        return -1;
    ne = PyObject_RichCompareBool(f, entry[R_SIZE], Py_NE);
    Py_CLEAR(f);
    if (ne != 0)
        return ne < 0 ? -1 : 0;
    fits = -1;
    if ((kids = get(v, lay, vertex_names, V_CHILDREN)) == NULL ||
        (uid = get(v, lay, vertex_names, V_UNIQ_ID)) == NULL)
        goto done;
    Py_ssize_t nkids = PyObject_Size(kids), want = PyLong_AsSsize_t(entry[R_NKIDS]);
    if (nkids < 0 || (want == -1 && PyErr_Occurred()))
        goto done;
    PyObject *tot = dict_get(r->totals, uid, Py_None);
    PyObject *mk = tot ? dict_get(r->marked, uid, NULL) : NULL;
    if (tot == NULL || (mk == NULL && PyErr_Occurred()))
        goto done;
    Py_ssize_t nmarked = mk == NULL ? 0 : PyObject_Size(mk);
    PyObject *got = entry[R_GOT];
    if (nmarked < 0 || !PyTuple_Check(got)) {
        if (nmarked >= 0)
            PyErr_SetString(PyExc_TypeError, "apply_recipe: marked children must be a tuple");
        goto done;
    }
    fits = 0;
    if (nkids != want || tot != entry[R_TOT] || nmarked != PyTuple_GET_SIZE(got))
        goto done;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(got); i++) {
        PyObject *pm = PyTuple_GET_ITEM(got, i);
        fits = -1;
        if (!PyTuple_Check(pm) || PyTuple_GET_SIZE(pm) != 2) {
            PyErr_SetString(PyExc_TypeError, "apply_recipe: a marked child is (position, mark)");
            goto done;
        }
        Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(pm, 0));
        PyObject *kid = pos == -1 && PyErr_Occurred() ? NULL : PySequence_GetItem(kids, pos);
        if (kid == NULL)
            goto done;
        PyObject *kuid = get(kid, vertex_layout_of(kid), vertex_names, V_UNIQ_ID);
        Py_DECREF(kid);
        PyObject *edge = kuid ? PyTuple_Pack(2, uid, kuid) : NULL;
        Py_XDECREF(kuid);
        PyObject *mark = edge ? dict_get(r->marks, edge, Py_None) : NULL;
        Py_XDECREF(edge);
        if (mark == NULL)
            goto done;
        ne = PyObject_RichCompareBool(mark, PyTuple_GET_ITEM(pm, 1), Py_NE);
        if (ne != 0) {
            fits = ne < 0 ? -1 : 0;
            goto done;
        }
    }
    fits = 1;
done:
    Py_XDECREF(kids);
    Py_XDECREF(uid);
    return fits;
}

/* The edge weight of `v` (uniq_id `uid`) under its parent becomes `w`, as
 * DfuUpdate._set_weight sets it for a containment parent (the move as
 * dfu_impl.note_move files it). 0, or -1. */
static int
set_weight(PyObject *v, const Layout *lay, PyObject *uid, PyObject *w, const Recipe *r)
{
    PyObject *zero = PyLong_FromLong(0);
    PyObject *old = zero ? dict_get(r->weights, uid, zero) : NULL;
    int ret = -1;
    PyObject *via = NULL, *via_uid = NULL, *fresh = NULL, *pair = NULL;
    if (old == NULL)
        goto done;
    Py_INCREF(old);
    if (PyDict_SetItem(r->weights, uid, w) < 0)
        goto done_old;
    int same = PyObject_RichCompareBool(old, w, Py_EQ);
    if (same != 0) {
        ret = same < 0 ? -1 : 0;
        goto done_old;
    }
    if ((via = get(v, lay, vertex_names, V_PARENT)) == NULL ||
        (via_uid = get(via, vertex_layout_of(via), vertex_names, V_UNIQ_ID)) == NULL)
        goto done_old;
    int sorted = PyDict_Contains(r->order, via_uid);
    if (sorted != 1) {
        ret = sorted < 0 ? -1 : 0;
        goto done_old;
    }
    if ((fresh = PyDict_New()) == NULL)
        goto done_old;
    PyObject *got = PyDict_SetDefault(r->moves, via_uid, fresh); /* borrowed */
    PyObject *first = got ? dict_get(got, uid, Py_None) : NULL;
    if (first == NULL)
        goto done_old;
    PyObject *was = old;
    if (first != Py_None) {
        if (!PyTuple_Check(first) || PyTuple_GET_SIZE(first) < 1) {
            PyErr_SetString(PyExc_TypeError, "apply_recipe: a move is (old, new)");
            goto done_old;
        }
        was = PyTuple_GET_ITEM(first, 0);
    }
    if ((pair = PyTuple_Pack(2, was, w)) == NULL || PyDict_SetItem(got, uid, pair) < 0)
        goto done_old;
    ret = 0;
done_old:
    Py_DECREF(old);
done:
    Py_XDECREF(pair);
    Py_XDECREF(fresh);
    Py_XDECREF(via_uid);
    Py_XDECREF(via);
    Py_XDECREF(zero);
    return ret;
}

/* Do the recipe's `entry` to `v`. 0, or -1 with an exception. */
static int
entry_apply(PyObject *v, PyObject *const *entry, const Recipe *r)
{
    const Layout *lay = vertex_layout_of(v);
    PyObject *state = entry[R_STATE];
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != 9) {
        PyErr_SetString(PyExc_TypeError, "apply_recipe: a state is a 9-tuple");
        return -1;
    }
    for (int i = 0; i < 9; i++)
        if (set(v, lay, vertex_names, state_fields[i], PyTuple_GET_ITEM(state, i)) < 0)
            return -1;
    int ret = -1;
    PyObject *uid = NULL, *lvl = NULL, *e = NULL, *gone = NULL;
    if ((uid = get(v, lay, vertex_names, V_UNIQ_ID)) == NULL ||
        PyDict_SetItem(r->job_vertices, uid, v) < 0)
        goto done;
    Py_ssize_t dl = PyLong_AsSsize_t(entry[R_DLEVEL]);
    if ((dl == -1 && PyErr_Occurred()) || (lvl = PyLong_FromSsize_t(r->level + dl)) == NULL ||
        (e = make_emit(r->emit, v, entry[R_NEEDS], entry[R_X], lvl)) == NULL ||
        PyList_Append(r->out, e) < 0)
        goto done;
    int inner = vtrue(v, lay, V_CHILDREN);
    if (inner <= 0) {
        ret = inner;
        goto done;
    }
    if (r->tracked) {
        PyObject *args[3] = {r->cache, uid, Py_None};
        if ((gone = PyObject_VectorcallMethod(s_pop, args,
                                              3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL)) == NULL)
            goto done;
    }
    else {
        int in = PyDict_Contains(r->cache, uid);
        if (in < 0 || (in == 1 && PyDict_DelItem(r->cache, uid) < 0))
            goto done;
    }
    if (entry[R_W] != Py_None && r->weights != Py_None &&
        set_weight(v, lay, uid, entry[R_W], r) < 0)
        goto done;
    ret = 0;
done:
    Py_XDECREF(gone);
    Py_XDECREF(e);
    Py_XDECREF(lvl);
    Py_XDECREF(uid);
    return ret;
}

static PyObject *
apply_recipe(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs(nargs, 14, "apply_recipe(entries, root, level, emit, out, job_vertices, "
                                "marks, marked, totals, cache, tracked, weights, order, "
                                "moves) takes 14 arguments") < 0)
        return NULL;
    Recipe r = {args[1], args[3], args[4], args[5], args[6], args[7], args[8], args[9],
                args[11], args[12], args[13], 0, 0};
    r.level = PyLong_AsSsize_t(args[2]);
    if (r.level == -1 && PyErr_Occurred())
        return NULL;
    if ((r.tracked = PyObject_IsTrue(args[10])) < 0)
        return NULL;
    if (!PyList_Check(args[0]) || !PyList_Check(r.out) || !PyDict_Check(r.job_vertices) ||
        !PyDict_Check(r.marks) || !PyDict_Check(r.marked) || !PyDict_Check(r.totals) ||
        !PyDict_Check(r.cache) || (r.weights != Py_None && !PyDict_Check(r.weights)) ||
        !PyDict_Check(r.order) || !PyDict_Check(r.moves)) {
        PyErr_SetString(PyExc_TypeError, "apply_recipe: entries and out must be lists; "
                                         "job_vertices, marks, marked, totals, cache, weights "
                                         "(or None), order and moves dicts");
        return NULL;
    }
    PyObject *entries = args[0];
    Py_ssize_t n = PyList_GET_SIZE(entries);
    for (int pass = 0; pass < 2; pass++) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *entry = PyList_GET_ITEM(entries, i);
            if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != R_N) {
                PyErr_SetString(PyExc_TypeError, "apply_recipe: an entry is an 11-tuple");
                return NULL;
            }
            PyObject *v = at_path(r.root, PyTuple_GET_ITEM(entry, R_PATH));
            if (v == NULL)
                return NULL;
            if (v == Py_None) {  /* not there: the recipe does not fit (pass 0 only) */
                Py_DECREF(v);
                Py_RETURN_FALSE;
            }
            PyObject *const *fields = &PyTuple_GET_ITEM(entry, 0);
            int rc = pass == 0 ? entry_fits(v, fields, &r) : entry_apply(v, fields, &r);
            Py_DECREF(v);
            if (rc < 0)
                return NULL;
            if (pass == 0 && rc == 0)
                Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"apply_recipe", (PyCFunction)(void (*)(void))apply_recipe, METH_FASTCALL,
     "apply_recipe(entries, root, level, emit, out, job_vertices, marks, marked, totals,"
     " cache, tracked, weights, order, moves) -> whether it fitted; see"
     " fluxnode.scheduler.traversers.update_recipes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_update_recipes",
    "Compiled apply_recipe (see fluxnode.scheduler.traversers.update_recipes).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__update_recipes(void)
{
    if (update_slots_init() < 0 || (s_pop = PyUnicode_InternFromString("pop")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
