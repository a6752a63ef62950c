/* The compiled score_fresh_leaves (see leaf_scores.py, which documents the contract and
 * holds the Python reference this must equal).
 *
 * Design: as in _whole_leaves.c, the loop stays on the Python objects (Vertex, the
 * walk's visited set, the Scoring's Evals) and changes exactly what the Python loop
 * changes, in the same order; what it saves is the interpreter's work per leaf: the
 * tests read the vertex's slots at their offsets (_slots.h), and the EGroup and its
 * Edge are built in place (allocated, every slot set as their __init__ sets it) when
 * their classes are plain slotted classes, else by calling them. The request naming a
 * type and its `exclusive`, and the Evals of a type, are looked up once per run of
 * leaves of one type (a socket's 32 cores). Anything unexpected (an unset slot, a
 * `visited` that is not a set) raises what the Python loop raises.
 */
#include "_slots.h"

enum { V_UNIQ_ID, V_CHILDREN, V_TYPE, V_SCHEDULE, V_X_CHECKER, V_STATUS, V_SIZE, V_ID,
       V_ALLOCATIONS, V_N };
static const char *const vertex_fields[V_N] = {"uniq_id",   "children", "type",
                                               "schedule",  "x_checker", "status",
                                               "size",      "id",        "allocations"};

enum { G_SCORE, G_COUNT, G_NEEDS, G_EXCLUSIVE, G_ROOT, G_LABEL, G_EDGES, G_N };
static const char *const egroup_fields[G_N] = {"score", "count", "needs", "exclusive",
                                               "root",  "label", "edges"};

enum { D_VERTEX, D_COUNT, D_NEEDS, D_EXCLUSIVE, D_PARENT, D_N };
static const char *const edge_fields[D_N] = {"vertex", "count", "needs", "exclusive",
                                             "parent"};

enum { EV_EGROUPS, EV_QUAL, EV_TOTAL, EV_N };
static const char *const evals_fields[EV_N] = {"egroups", "qual", "total"};

static PyObject *vertex_names[V_N], *egroup_names[G_N], *edge_names[D_N],
    *evals_names[EV_N];
static PyObject *s_types, *s_evals, *s_exclusive, *s_up, *s_empty, *zero, *one, *match_unmet,
    *match_met;
static PyObject *egroup_class, *edge_class;
/* egroup_layout and edge_layout build the classes; the read layouts read any instance */
static Layout vertex_layout, evals_layout, egroup_layout, edge_layout, egroup_read_layout,
    edge_read_layout;

/* A vertex field as a new reference, or NULL with an exception. */
static inline PyObject *
vget(PyObject *c, const Layout *lay, int f)
{
    return get(c, lay, vertex_names, f);
}

/* 1 when vertex field `f` is truthy, 0 when not, -1 with an exception (_slots.h). */
#define vtrue(c, lay, f) truth(c, lay, vertex_names, f)

/* 1 when vertex field `f` is not None, 0 when it is, -1 with an exception. */
static inline int
vset(PyObject *c, const Layout *lay, int f)
{
    int none = is_none(c, lay, vertex_names, f);
    return none < 0 ? -1 : !none;
}

/* Whether `cls` can be built in place: a plain slotted class (object's __new__, the
 * generic attribute access, every field a writable slot), checked once per class. */
static int
in_place(Layout *lay, PyObject *cls, PyObject *const *names, int n)
{
    PyTypeObject *tp = (PyTypeObject *)cls;
    if (lay->type != tp) {
        layout_for(lay, tp, names, n);
        if (lay->direct && (tp->tp_new != PyBaseObject_Type.tp_new || tp->tp_alloc == NULL ||
                            tp->tp_dictoffset != 0))
            lay->direct = 0;
    }
    return lay->direct;
}

/* An instance of `cls` with `fields` (n of them, in the order of `names`): built in
 * place when `lay` allows, else by calling cls(*args) (nargs of `args`). */
static PyObject *
build(PyObject *cls, Layout *lay, PyObject *const *names, int n, PyObject *const *fields,
      PyObject *const *args, Py_ssize_t nargs)
{
    if (in_place(lay, cls, names, n)) {
        PyTypeObject *tp = (PyTypeObject *)cls;
        PyObject *o = tp->tp_alloc(tp, 0);
        if (o == NULL)
            return NULL;
        for (int i = 0; i < n; i++)
            *(PyObject **)((char *)o + lay->offset[i]) = Py_NewRef(fields[i]);
        return o;
    }
    return PyObject_Vectorcall(cls, args, nargs, NULL);
}

/* EGroup(score, count, x, False, label, [edge]): a new reference (`edge` borrowed). */
static PyObject *
one_edge_group(PyObject *score, PyObject *count, PyObject *x, PyObject *label, PyObject *edge)
{
    PyObject *edges = PyList_New(1);
    if (edges == NULL)
        return NULL;
    PyList_SET_ITEM(edges, 0, Py_NewRef(edge));
    PyObject *fields[G_N] = {score, count, zero, x, Py_False, label, edges};
    PyObject *args[6] = {score, count, x, Py_False, label, edges};
    PyObject *g = build(egroup_class, &egroup_layout, egroup_names, G_N, fields, args, 6);
    Py_DECREF(edges);
    return g;
}

/* EGroup(score, avail, x, False, "", [Edge(c, avail, avail, x, u)]): a new reference. */
static PyObject *
leaf_group(PyObject *score, PyObject *avail, PyObject *x, PyObject *c, PyObject *u)
{
    PyObject *edge_fields_v[D_N] = {c, avail, avail, x, u};
    PyObject *edge = build(edge_class, &edge_layout, edge_names, D_N, edge_fields_v,
                           edge_fields_v, D_N);
    if (edge == NULL)
        return NULL;
    PyObject *g = one_edge_group(score, avail, x, s_empty, edge);
    Py_DECREF(edge);
    return g;
}

/* ev.<field f> += avail: 0, or -1 with an exception. */
static int
add_to(PyObject *ev, const Layout *lay, int f, PyObject *avail)
{
    PyObject *old = get(ev, lay, evals_names, f);
    if (old == NULL)
        return -1;
    PyObject *sum = PyNumber_Add(old, avail);
    Py_DECREF(old);
    if (sum == NULL)
        return -1;
    int r = set(ev, lay, evals_names, f, sum);
    Py_DECREF(sum);
    return r;
}

/* What a run of leaves of one type reads once: its type, the request naming it and
 * that request's `exclusive`, whether the type is taken exclusively, the type's Evals
 * and their egroups list (all owned but `r`, which leaf_r holds). */
typedef struct {
    PyObject *type, *r, *r_excl, *ev, *egroups;
    int x_in;
} Run;

static void
run_clear(Run *run)
{
    Py_CLEAR(run->type);
    run->r = NULL;
    Py_CLEAR(run->r_excl);
    Py_CLEAR(run->ev);
    Py_CLEAR(run->egroups);
}

/* Start a run of `ctype`: 1, 0 when no request of leaf_r names it (the caller stops),
 * -1 with an exception. */
static int
run_start(Run *run, PyObject *ctype, PyObject *leaf_r, PyObject *xtypes, int excl)
{
    run_clear(run);
    PyObject *req = PyDict_GetItemWithError(leaf_r, ctype); /* borrowed */
    if (req == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if ((run->r_excl = PyObject_GetAttr(req, s_exclusive)) == NULL)
        return -1;
    int x = excl;
    if (!x && (x = PySequence_Contains(xtypes, ctype)) < 0)
        return -1;
    run->type = Py_NewRef(ctype);
    run->r = req;
    run->x_in = x;
    return 1;
}

/* 1 when the fresh leaf `c` of the current run fails a test (the caller stops there),
 * 0 when it passes (its size in *size, a new reference), -1 with an exception. */
static int
fails(PyObject *c, const Layout *lay, const Run *run, int centric, int checking,
      int allocating, PyObject **size)
{
    int r;
    if (centric && PyUnicode_Check(run->type) &&
        PyUnicode_CompareWithASCIIString(run->type, "node") == 0)
        return 1;
    if ((r = vset(c, lay, V_SCHEDULE)) != 0 || (r = vset(c, lay, V_X_CHECKER)) != 0)
        return r;
    if (checking) {
        PyObject *status = vget(c, lay, V_STATUS);
        if (status == NULL)
            return -1;
        int up = status == s_up ? 1 : PyObject_RichCompareBool(status, s_up, Py_EQ);
        Py_DECREF(status);
        if (up <= 0)
            return up < 0 ? -1 : 1;
    }
    if ((*size = vget(c, lay, V_SIZE)) == NULL)
        return -1;
    int none = PyObject_RichCompareBool(*size, zero, Py_EQ);
    if (none == 0 && run->x_in && run->r_excl == Py_False)
        none = 1;
    if (none == 0 && (run->x_in || run->r_excl == Py_True) && allocating)
        none = vtrue(c, lay, V_ALLOCATIONS);
    if (none != 0)
        Py_CLEAR(*size);
    return none;
}

/* Score the leaf `c` (passed): visited, its group in the run's evals. 0, or -1. */
static int
score(PyObject *c, const Layout *lay, PyObject *uid, PyObject *u, PyObject *visited,
      PyObject *dfu, PyObject *types, PyObject *base, int by_id, Run *run, PyObject *avail,
      PyObject **overall)
{
    if (PySet_Add(visited, uid) < 0)
        return -1;
    if (by_id) {
        PyObject *id = vget(c, lay, V_ID);
        if (id == NULL)
            return -1;
        Py_SETREF(*overall, PyNumber_Add(base, id));
        Py_DECREF(id);
        if (*overall == NULL)
            return -1;
    } else {
        Py_SETREF(*overall, Py_NewRef(base));
    }
    if (run->ev == NULL) {
        PyObject *ev = PyDict_GetItemWithError(types, run->type); /* borrowed */
        if (ev != NULL)
            run->ev = Py_NewRef(ev);
        else if (PyErr_Occurred() ||
                 (run->ev = PyObject_CallMethodOneArg(dfu, s_evals, run->type)) == NULL)
            return -1;
        const Layout *el = layout_of(&evals_layout, run->ev, evals_names, EV_N);
        if ((run->egroups = get(run->ev, el, evals_names, EV_EGROUPS)) == NULL)
            return -1;
        if (!PyList_Check(run->egroups)) {
            PyErr_SetString(PyExc_TypeError, "score_fresh_leaves: egroups must be a list");
            return -1;
        }
    }
    const Layout *el = layout_of(&evals_layout, run->ev, evals_names, EV_N);
    if (add_to(run->ev, el, EV_TOTAL, avail) < 0)
        return -1;
    int qualifies = PyObject_RichCompareBool(*overall, match_unmet, Py_GT);
    if (qualifies < 0 || (qualifies && add_to(run->ev, el, EV_QUAL, avail) < 0))
        return -1;
    PyObject *g = leaf_group(*overall, avail, run->x_in ? Py_True : Py_False, c, u);
    if (g == NULL)
        return -1;
    int r = PyList_Append(run->egroups, g);
    Py_DECREF(g);
    return r;
}

static PyObject *
score_fresh_leaves(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs(nargs, 13, "score_fresh_leaves: 13 arguments expected") < 0)
        return NULL;
    PyObject *kids = args[0], *u = args[2], *leaf_r = args[3], *visited = args[4],
             *dfu = args[5], *xtypes = args[6], *base = args[11];
    Py_ssize_t i;
    if (index_arg(args[1], "score_fresh_leaves: i must be >= 0", &i) < 0)
        return NULL;
    if (!PyDict_Check(leaf_r) || !PySet_Check(visited)) {
        PyErr_SetString(PyExc_TypeError,
                        "score_fresh_leaves: leaf_r must be a dict and visited a set");
        return NULL;
    }
    int excl = PyObject_IsTrue(args[7]), checking = PyObject_IsTrue(args[8]),
        allocating = PyObject_IsTrue(args[9]), centric = PyObject_IsTrue(args[10]),
        by_id = PyObject_IsTrue(args[12]);
    if (excl < 0 || checking < 0 || allocating < 0 || centric < 0 || by_id < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(kids, "score_fresh_leaves: kids must be a sequence");
    if (seq == NULL)
        return NULL;
    PyObject *types = PyObject_GetAttr(dfu, s_types);
    if (types == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    if (!PyDict_Check(types)) {
        PyErr_SetString(PyExc_TypeError, "score_fresh_leaves: dfu.types must be a dict");
        Py_DECREF(types);
        Py_DECREF(seq);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), scored = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *avail = Py_NewRef(zero), *overall = Py_NewRef(zero), *result = NULL;
    Run run = {NULL, NULL, NULL, NULL, NULL, 0};
    for (; i < n; i++) {
        PyObject *c = items[i], *ctype = NULL, *size = NULL;
        const Layout *lay = layout_of(&vertex_layout, c, vertex_names, V_N);
        PyObject *uid = vget(c, lay, V_UNIQ_ID);
        if (uid == NULL)
            goto done;
        int r = PySet_Contains(visited, uid);
        if (r == 0)
            r = vtrue(c, lay, V_CHILDREN) ? 2 : 0; /* 2: stop (or an error, below) */
        if (r == 1) { /* visited: skipped, as the walk skips it */
            Py_DECREF(uid);
            continue;
        }
        if (r == 0 && (ctype = vget(c, lay, V_TYPE)) == NULL)
            r = -1;
        if (r == 0 && ctype != run.type) {
            int got = run_start(&run, ctype, leaf_r, xtypes, excl);
            r = got < 0 ? -1 : got == 0 ? 2 : 0;
        }
        if (r == 0) {
            int f = fails(c, lay, &run, centric, checking, allocating, &size);
            r = f < 0 ? -1 : f ? 2 : 0;
        }
        if (r == 0 && score(c, lay, uid, u, visited, dfu, types, base, by_id, &run, size,
                               &overall) < 0)
            r = -1;
        Py_DECREF(uid);
        Py_XDECREF(ctype);
        if (r == 0) {
            Py_SETREF(avail, size);
            scored++;
            continue;
        }
        Py_XDECREF(size);
        if (r < 0 || PyErr_Occurred())
            goto done;
        break;
    }
    result = Py_BuildValue("nnOO", i, scored, avail, overall);
done:
    run_clear(&run);
    Py_DECREF(avail);
    Py_DECREF(overall);
    Py_DECREF(types);
    Py_DECREF(seq);
    return result;
}

/* A slot of one unit made of group `eg` (see unit_slots): a new reference. */
static PyObject *
unit_slot(PyObject *eg, PyObject *label)
{
    const Layout *gl = layout_of(&egroup_read_layout, eg, egroup_names, G_N);
    PyObject *edges = get(eg, gl, egroup_names, G_EDGES), *e0 = NULL, *score = NULL,
             *slot = NULL;
    if (edges == NULL)
        return NULL;
    e0 = PySequence_GetItem(edges, 0);
    Py_DECREF(edges);
    if (e0 == NULL)
        return NULL;
    const Layout *dl = layout_of(&edge_read_layout, e0, edge_names, D_N);
    PyObject *f[D_N] = {NULL, NULL, NULL, NULL, NULL};
    for (int i = 0; i < D_N; i++)
        if ((f[i] = get(e0, dl, edge_names, i)) == NULL)
            goto done;
    int differs = f[D_EXCLUSIVE] != Py_True;
    if (!differs && (differs = PyObject_RichCompareBool(f[D_NEEDS], f[D_COUNT], Py_NE)) < 0)
        goto done;
    if (differs) { /* Edge(vertex, count, count, True, parent) */
        PyObject *fields[D_N] = {f[D_VERTEX], f[D_COUNT], f[D_COUNT], Py_True, f[D_PARENT]};
        PyObject *edge = build(edge_class, &edge_layout, edge_names, D_N, fields, fields, D_N);
        if (edge == NULL)
            goto done;
        Py_SETREF(e0, edge);
    }
    PyObject *own = get(eg, gl, egroup_names, G_SCORE);
    if (own == NULL)
        goto done;
    score = PyNumber_Add(match_met, own);
    Py_DECREF(own);
    if (score == NULL)
        goto done;
    slot = one_edge_group(score, one, Py_True, label, e0);
done:
    for (int i = 0; i < D_N; i++)
        Py_XDECREF(f[i]);
    Py_XDECREF(score);
    Py_DECREF(e0);
    return slot;
}

static PyObject *
unit_slots(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs(nargs, 4, "unit_slots: 4 arguments expected") < 0)
        return NULL;
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), n = PyLong_AsSsize_t(args[2]);
    if ((start == -1 || n == -1) && PyErr_Occurred())
        return NULL;
    if (start < 0 || n < 0) {
        PyErr_SetString(PyExc_ValueError, "unit_slots: start and n must be >= 0");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "unit_slots: egroups must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    Py_ssize_t end = start > len ? len : (n > len - start ? len : start + n);
    PyObject *out = PyList_New(end > start ? end - start : 0);
    for (Py_ssize_t i = start; out != NULL && i < end; i++) {
        PyObject *slot = unit_slot(PySequence_Fast_GET_ITEM(seq, i), args[3]);
        if (slot == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i - start, slot); /* steals */
    }
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"score_fresh_leaves", (PyCFunction)(void (*)(void))score_fresh_leaves, METH_FASTCALL,
     "score_fresh_leaves(kids, i, u, leaf_r, visited, dfu, xtypes, excl, checking,"
     " allocating, centric, base, by_id) -> (stopped at, scored, last units, last score); see"
     " fluxnode.scheduler.traversers.leaf_scores."},
    {"unit_slots", (PyCFunction)(void (*)(void))unit_slots, METH_FASTCALL,
     "unit_slots(egroups, start, n, label) -> a slot of one unit per group; see"
     " fluxnode.scheduler.traversers.leaf_scores."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_leaf_scores",
    "Compiled score_fresh_leaves and unit_slots (see"
    " fluxnode.scheduler.traversers.leaf_scores).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__leaf_scores(void)
{
    if (intern_names(vertex_names, vertex_fields, V_N) < 0 ||
        intern_names(egroup_names, egroup_fields, G_N) < 0 ||
        intern_names(edge_names, edge_fields, D_N) < 0 ||
        intern_names(evals_names, evals_fields, EV_N) < 0)
        return NULL;
    if ((s_types = PyUnicode_InternFromString("types")) == NULL ||
        (s_evals = PyUnicode_InternFromString("evals")) == NULL ||
        (s_exclusive = PyUnicode_InternFromString("exclusive")) == NULL ||
        (s_up = PyUnicode_InternFromString("up")) == NULL ||
        (s_empty = PyUnicode_InternFromString("")) == NULL ||
        (zero = PyLong_FromLong(0)) == NULL || (one = PyLong_FromLong(1)) == NULL)
        return NULL;
    PyObject *scoring = PyImport_ImportModule("fluxnode.scheduler.policies.scoring");
    if (scoring == NULL)
        return NULL;
    egroup_class = PyObject_GetAttrString(scoring, "EGroup");
    edge_class = egroup_class ? PyObject_GetAttrString(scoring, "Edge") : NULL;
    match_unmet = edge_class ? PyObject_GetAttrString(scoring, "MATCH_UNMET") : NULL;
    match_met = match_unmet ? PyObject_GetAttrString(scoring, "MATCH_MET") : NULL;
    Py_DECREF(scoring);
    if (match_met == NULL)
        return NULL;
    if (!PyType_Check(egroup_class) || !PyType_Check(edge_class)) {
        PyErr_SetString(PyExc_TypeError, "_leaf_scores: EGroup and Edge must be classes");
        return NULL;
    }
    return PyModule_Create(&module);
}
