/* The compiled order of std_sort (see stdsort.py, which documents the contract and
 * holds the Python reference this must equal).
 *
 * Design: exact mode replays libstdc++'s introsort to leave Fluxion's order among equal
 * scores, and the replay is all comparisons and swaps of small integers: in Python it
 * cost a 1,000-node gang about 1.5 ms of its choice at the root, and a single-core
 * match in exact mode its sort of every candidate. Here the keys are read once into
 * int64 (negated when descending) and the same steps run on C arrays: median of three
 * to the first place, unguarded partition, recursion on the right part only while it
 * starts before `limit`, final insertion sort with threshold 16, and at depth 0 the
 * reference's fallback (a stable sort of the segment by key). A key that is not an int
 * or does not fit (or whose negation does not) makes `order` answer None, and the
 * Python reference sorts instead.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define THRESHOLD 16

typedef struct {
    int64_t *a;
    Py_ssize_t *idx;
} Arr;

static inline void
swap(Arr *s, Py_ssize_t i, Py_ssize_t j)
{
    int64_t t = s->a[i];
    s->a[i] = s->a[j];
    s->a[j] = t;
    Py_ssize_t u = s->idx[i];
    s->idx[i] = s->idx[j];
    s->idx[j] = u;
}

static void
move_median_to_first(Arr *s, Py_ssize_t result, Py_ssize_t x, Py_ssize_t y, Py_ssize_t z)
{
    int64_t *a = s->a;
    if (a[x] < a[y]) {
        if (a[y] < a[z])
            swap(s, result, y);
        else if (a[x] < a[z])
            swap(s, result, z);
        else
            swap(s, result, x);
    }
    else if (a[x] < a[z])
        swap(s, result, x);
    else if (a[y] < a[z])
        swap(s, result, z);
    else
        swap(s, result, y);
}

static Py_ssize_t
unguarded_partition(Arr *s, Py_ssize_t first, Py_ssize_t last, Py_ssize_t pivot)
{
    int64_t *a = s->a, pv = a[pivot];
    for (;;) {
        while (a[first] < pv)
            first++;
        last--;
        while (pv < a[last])
            last--;
        if (!(first < last))
            return first;
        swap(s, first, last);
        first++;
    }
}

/* The reference's fallback: the segment sorted by key, stably (a bottom-up merge sort).
 * 0, or -1 with MemoryError. */
static int
stable_segment_sort(Arr *s, Py_ssize_t first, Py_ssize_t last)
{
    Py_ssize_t n = last - first;
    int64_t *ta = PyMem_New(int64_t, n);
    Py_ssize_t *ti = PyMem_New(Py_ssize_t, n);
    if (ta == NULL || ti == NULL) {
        PyMem_Free(ta);
        PyMem_Free(ti);
        PyErr_NoMemory();
        return -1;
    }
    int64_t *a = s->a + first;
    Py_ssize_t *idx = s->idx + first;
    for (Py_ssize_t width = 1; width < n; width *= 2) {
        for (Py_ssize_t lo = 0; lo < n; lo += 2 * width) {
            Py_ssize_t mid = lo + width < n ? lo + width : n;
            Py_ssize_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            Py_ssize_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                if (a[j] < a[i]) { /* only a strictly smaller right element goes first */
                    ta[k] = a[j];
                    ti[k++] = idx[j++];
                }
                else {
                    ta[k] = a[i];
                    ti[k++] = idx[i++];
                }
            }
            while (i < mid) {
                ta[k] = a[i];
                ti[k++] = idx[i++];
            }
            while (j < hi) {
                ta[k] = a[j];
                ti[k++] = idx[j++];
            }
        }
        memcpy(a, ta, n * sizeof(int64_t));
        memcpy(idx, ti, n * sizeof(Py_ssize_t));
    }
    PyMem_Free(ta);
    PyMem_Free(ti);
    return 0;
}

/* 0, or -1 with an exception (only the fallback allocates). */
static int
introsort_loop(Arr *s, Py_ssize_t first, Py_ssize_t last, Py_ssize_t depth, Py_ssize_t limit,
               Py_ssize_t *bound)
{
    while (last - first > THRESHOLD) {
        if (depth == 0)
            return stable_segment_sort(s, first, last);
        depth--;
        Py_ssize_t mid = first + (last - first) / 2;
        move_median_to_first(s, first, first + 1, mid, last - 1);
        Py_ssize_t cut = unguarded_partition(s, first + 1, last, first);
        if (cut < limit) {
            if (introsort_loop(s, cut, last, depth, limit, bound) < 0)
                return -1;
        }
        else if (cut < *bound)
            *bound = cut; /* [cut, last) stays unsorted: past the wanted positions */
        last = cut;
    }
    return 0;
}

/* Move the element at `i` left past every greater one (no bound check: a smaller or
 * equal element stands before it, as libstdc++'s __unguarded_linear_insert assumes). */
static inline void
linear_insert(Arr *s, Py_ssize_t i)
{
    int64_t *a = s->a, v = a[i];
    Py_ssize_t *idx = s->idx, vi = idx[i], j = i;
    while (v < a[j - 1]) {
        a[j] = a[j - 1];
        idx[j] = idx[j - 1];
        j--;
    }
    a[j] = v;
    idx[j] = vi;
}

static void
insertion_sort(Arr *s, Py_ssize_t first, Py_ssize_t last)
{
    int64_t *a = s->a;
    Py_ssize_t *idx = s->idx;
    for (Py_ssize_t i = first + 1; i < last; i++) {
        if (a[i] < a[first]) { /* the new least: everything before it moves one right */
            int64_t v = a[i];
            Py_ssize_t vi = idx[i];
            memmove(a + first + 1, a + first, (i - first) * sizeof(int64_t));
            memmove(idx + first + 1, idx + first, (i - first) * sizeof(Py_ssize_t));
            a[first] = v;
            idx[first] = vi;
        }
        else
            linear_insert(s, i);
    }
}

static void
final_insertion_sort(Arr *s, Py_ssize_t first, Py_ssize_t last)
{
    if (last - first > THRESHOLD) {
        insertion_sort(s, first, first + THRESHOLD);
        for (Py_ssize_t i = first + THRESHOLD; i < last; i++)
            linear_insert(s, i);
    }
    else
        insertion_sort(s, first, last);
}

/* order(keys, descending, depth, limit) -> (idx, bound) or None; see stdsort.py. */
static PyObject *
order(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "order: 4 arguments expected");
        return NULL;
    }
    if (!PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "order: keys must be a list");
        return NULL;
    }
    int descending = PyObject_IsTrue(args[1]);
    Py_ssize_t depth = PyLong_AsSsize_t(args[2]), limit = PyLong_AsSsize_t(args[3]);
    if (descending < 0 || ((depth == -1 || limit == -1) && PyErr_Occurred()))
        return NULL;
    if (depth < 0 || limit < 0) {
        PyErr_SetString(PyExc_ValueError, "order: depth and limit must be >= 0");
        return NULL;
    }
    PyObject *keys = args[0];
    Py_ssize_t n = PyList_GET_SIZE(keys);
    Arr s = {PyMem_New(int64_t, n > 0 ? n : 1), PyMem_New(Py_ssize_t, n > 0 ? n : 1)};
    PyObject *result = NULL;
    if (s.a == NULL || s.idx == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyList_GET_ITEM(keys, i);
        int overflow = 0;
        long long v = PyLong_Check(k) ? PyLong_AsLongLongAndOverflow(k, &overflow) : 0;
        if (!PyLong_Check(k) || overflow || (descending && v == LLONG_MIN)) {
            result = Py_NewRef(Py_None); /* the Python reference sorts these */
            goto done;
        }
        if (v == -1 && PyErr_Occurred())
            goto done;
        s.a[i] = descending ? -(int64_t)v : (int64_t)v;
        s.idx[i] = i;
    }
    Py_ssize_t bound = n;
    if (n >= 2) {
        if (introsort_loop(&s, 0, n, depth, limit, &bound) < 0)
            goto done;
        final_insertion_sort(&s, 0, bound);
    }
    PyObject *idx = PyList_New(n);
    if (idx == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromSsize_t(s.idx[i]);
        if (v == NULL) {
            Py_DECREF(idx);
            goto done;
        }
        PyList_SET_ITEM(idx, i, v);
    }
    result = Py_BuildValue("Nn", idx, bound);
done:
    PyMem_Free(s.a);
    PyMem_Free(s.idx);
    return result;
}

static PyMethodDef methods[] = {
    {"order", (PyCFunction)(void (*)(void))order, METH_FASTCALL,
     "order(keys, descending, depth, limit) -> (permutation, sorted bound) or None; see"
     " fluxnode.scheduler.policies.stdsort."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_stdsort",
    "Compiled introsort order (see fluxnode.scheduler.policies.stdsort).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__stdsort(void)
{
    return PyModule_Create(&module);
}
