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
 * apply_recipe (see update_recipes.py and its _apply_recipe_py reference) is the same
 * technique for the update walk of a gang's node: checked entry by entry first (a
 * recipe that does not fit changes nothing), then done entry by entry.
 */
#include "_slots.h"

/* ------------------------------------------------------------ slot layouts */

enum { V_CHILDREN, V_SCHEDULE, V_X_CHECKER, V_TAGS, V_SIZE, V_TYPE, V_UNIQ_ID, V_XSPANS,
       V_SPANS, V_ALLOCATIONS, V_RESERVATIONS, V_SUBPLAN, V_AGSPANS, V_PARENT, V_N };
static const char *const vertex_fields[V_N] = {
    "children", "schedule", "x_checker", "tags", "size", "type", "uniq_id", "xspans",
    "spans", "allocations", "reservations", "subplan", "agspans", "parent"};

enum { E_VERTEX, E_NEEDS, E_EXCLUSIVE, E_LEVEL, E_AGFILTER, E_N };
static const char *const emit_fields[E_N] = {"vertex", "needs", "exclusive", "level",
                                             "agfilter"};

static PyObject *vertex_names[V_N], *emit_names[E_N], *s_allocated, *s_post_init, *s_pop;

static Layout vertex_layout, emit_layout;

static inline const Layout *
vertex_layout_of(PyObject *o)
{
    return layout_of(&vertex_layout, o, vertex_names, V_N);
}

/* A truth test of vertex attribute `i` (1, 0, -1 with an exception), and whether it is
 * None (the same answers); see _slots.h. */
#define vtrue(o, lay, i) truth(o, lay, vertex_names, i)
#define vnone(o, lay, i) is_none(o, lay, vertex_names, i)

/* emit(c, needs, exclusive, level): built in place for a plain slotted dataclass
 * (object's __new__, no __post_init__, every field a slot), else by calling `emit`. */
static PyObject *
make_emit(PyObject *emit, PyObject *c, PyObject *needs, PyObject *exclusive, PyObject *level)
{
    if (PyType_Check(emit)) {
        PyTypeObject *tp = (PyTypeObject *)emit;
        if (tp != emit_layout.type) {
            layout_for(&emit_layout, tp, emit_names, E_N);
            if (emit_layout.direct &&
                (tp->tp_new != PyBaseObject_Type.tp_new || tp->tp_alloc == NULL ||
                 PyObject_HasAttr(emit, s_post_init)))
                emit_layout.direct = 0;
        }
        if (emit_layout.direct) {
            PyObject *e = tp->tp_alloc(tp, 0);
            if (e == NULL)
                return NULL;
            PyObject *fields[E_N] = {c, needs, exclusive, level, Py_None};
            for (int i = 0; i < E_N; i++)
                *(PyObject **)((char *)e + emit_layout.offset[i]) = Py_NewRef(fields[i]);
            return e;
        }
    }
    PyObject *args[4] = {c, needs, exclusive, level};
    return PyObject_Vectorcall(emit, args, 4, NULL);
}

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
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError,
                        "take_fresh_leaves(kids, i, kits, emit, level, job_vertices, out, "
                        "prune_types, agg, marks, uid, whole) takes 12 arguments");
        return NULL;
    }
    int whole = PyObject_IsTrue(args[11]);
    if (whole < 0)
        return NULL;
    Walk w = {args[2], args[3], args[4], args[5], args[6], args[7],
              args[8], args[9], args[10], whole};
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0) {
        PyErr_SetString(PyExc_ValueError, "take_fresh_leaves: i must be >= 0");
        return NULL;
    }
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

/* ------------------------------------------------------------ recipes */

/* The update state a recipe gives a vertex, in update_recipes.STATE's order. */
static const int state_fields[9] = {V_SCHEDULE, V_X_CHECKER, V_SUBPLAN,     V_TAGS,
                                    V_XSPANS,   V_SPANS,     V_AGSPANS,     V_ALLOCATIONS,
                                    V_RESERVATIONS};

enum { R_PATH, R_NEEDS, R_X, R_DLEVEL, R_STATE, R_W, R_TYPE, R_SIZE, R_TOT, R_NKIDS, R_GOT,
       R_N };

/* The vertex at child positions `path` below `root` (a new reference), or NULL with
 * an exception: what update_recipes._at reads. */
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
        v = pos == -1 && PyErr_Occurred() ? NULL : PySequence_GetItem(kids, pos);
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
    if (nargs != 14) {
        PyErr_SetString(PyExc_TypeError,
                        "apply_recipe(entries, root, level, emit, out, job_vertices, marks, "
                        "marked, totals, cache, tracked, weights, order, moves) takes 14 "
                        "arguments");
        return NULL;
    }
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
    {"take_fresh_leaves", (PyCFunction)(void (*)(void))take_fresh_leaves, METH_FASTCALL,
     "take_fresh_leaves(kids, i, kits, emit, level, job_vertices, out, prune_types, agg,"
     " marks, uid, whole) -> (stopped at, taken); see"
     " fluxnode.scheduler.traversers.whole_leaves."},
    {"apply_recipe", (PyCFunction)(void (*)(void))apply_recipe, METH_FASTCALL,
     "apply_recipe(entries, root, level, emit, out, job_vertices, marks, marked, totals,"
     " cache, tracked, weights, order, moves) -> whether it fitted; see"
     " fluxnode.scheduler.traversers.update_recipes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_whole_leaves",
    "Compiled take_fresh_leaves (see fluxnode.scheduler.traversers.whole_leaves) and"
    " apply_recipe (see fluxnode.scheduler.traversers.update_recipes).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__whole_leaves(void)
{
    if (intern_names(vertex_names, vertex_fields, V_N) < 0 ||
        intern_names(emit_names, emit_fields, E_N) < 0)
        return NULL;
    if ((s_allocated = PyUnicode_InternFromString("allocated")) == NULL ||
        (s_post_init = PyUnicode_InternFromString("__post_init__")) == NULL ||
        (s_pop = PyUnicode_InternFromString("pop")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
