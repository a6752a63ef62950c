/* The Vertex and Emit slots the update walk's compiled loops read and write
 * (_whole_leaves.c: take_fresh_leaves; _update_recipes.c: apply_recipe).
 *
 * Design: both loops change a vertex as the update walk does (its planners, its
 * containers, its job's emit), so both name the same Vertex slots and build the same
 * Emit. Each compiled module includes this once and gets its own copy of the names
 * and layouts (static), filled by update_slots_init() from its PyInit. Slot access at
 * offsets and argument checking are _slots.h's.
 */
#ifndef FLUXNODE_UPDATE_SLOTS_H
#define FLUXNODE_UPDATE_SLOTS_H

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

static PyObject *vertex_names[V_N], *emit_names[E_N], *s_post_init;

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

/* Intern the slot names (from the module's PyInit): 0, or -1 with an exception. */
static int
update_slots_init(void)
{
    if (intern_names(vertex_names, vertex_fields, V_N) < 0 ||
        intern_names(emit_names, emit_fields, E_N) < 0)
        return -1;
    return (s_post_init = PyUnicode_InternFromString("__post_init__")) == NULL ? -1 : 0;
}

#endif
