# StridedLayout and the extents arithmetic behind it.
#
# Everything here works on the C-level `Extents` (shape and strides in elements) so that
# StridedMemoryView can slice and query its own record without building Python objects.  The
# Python-visible StridedLayout is a thin immutable wrapper around one Extents plus an itemsize
# and a slice offset.
#
# Conventions (documented again on the public names):
# - strides are in elements, never bytes; `strides_in_bytes` multiplies by itemsize.
# - `slice_offset` is the number of elements from a base pointer to element 0, so min_offset /
#   max_offset (which include it) say which elements of a buffer starting at that base pointer
#   the layout touches.
# - a stride order, as taken by `dense(order=...)` and returned by `stride_order`, lists the
#   dimensions from the slowest varying (largest |stride|) to the fastest (stride 1):
#   "C" is (0, 1, ..., n-1), "F" is (n-1, ..., 1, 0).

from . cimport _refcount  # 64-bit reference-count increments: see the file
cimport cython
from cpython.long cimport PyLong_AsLongLong, PyLong_AsUnsignedLongLong, PyLong_CheckExact
from cpython.number cimport PyNumber_Index
from cpython.object cimport PyObject
from cpython.sequence cimport PySequence_Fast, PySequence_Fast_GET_SIZE, PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_Check, PyTuple_New
from libc.stdint cimport INT64_MAX, INT64_MIN, int64_t, uint64_t
from libc.string cimport memcpy

from ._record cimport (
    MAX_NDIM,
    Extents,
    extents_copy,
    extents_free,
    extents_init,
    extents_resize,
)

__all__ = ["AxisError", "StridedLayout"]


cdef extern from "Python.h":
    # Declared here with raw pointers so tuples are filled without reference-count traffic:
    # PyTuple_SET_ITEM steals the new reference PyLong_FromLongLong returns.
    PyObject* _long_from_int64 "PyLong_FromLongLong"(long long v) except NULL
    void _tuple_set_item "PyTuple_SET_ITEM"(object t, Py_ssize_t i, PyObject* o)
    bint PySlice_Check(object o)
    int PySlice_Unpack(object s, Py_ssize_t* start, Py_ssize_t* stop,
                       Py_ssize_t* step) except -1
    Py_ssize_t PySlice_AdjustIndices(Py_ssize_t length, Py_ssize_t* start, Py_ssize_t* stop,
                                     Py_ssize_t step) noexcept nogil

cdef extern from *:
    # GCC/Clang builtins: exact int64 overflow detection without UB.
    bint _mul_ovf "__builtin_mul_overflow"(int64_t a, int64_t b, int64_t* r) noexcept nogil
    bint _add_ovf "__builtin_add_overflow"(int64_t a, int64_t b, int64_t* r) noexcept nogil


# Borrowed pointers to immortal singletons, compared by identity in the indexing hot path.
cdef PyObject* _NONE = <PyObject*> None
cdef PyObject* _ELLIPSIS = <PyObject*> Ellipsis

# Upper bound on the nodes the exact overlap search visits before giving up (and answering
# "not unique", the safe answer for a caller about to write through the layout).
cdef int64_t _UNIQUE_SEARCH_BUDGET = 1 << 20


class AxisError(ValueError, IndexError):
    """An axis argument is out of range for the layout's number of dimensions.

    Subclasses both ValueError and IndexError, like ``numpy.exceptions.AxisError``, so code
    written against either convention catches it.
    """


# --- small C helpers ---------------------------------------------------------------------------

cdef inline int64_t _abs64(int64_t x) noexcept nogil:
    return -x if x < 0 else x


cdef inline int64_t _floordiv(int64_t a, int64_t b) noexcept nogil:
    # b > 0; C division truncates toward zero, adjust for negative numerators.
    cdef int64_t q = a // b
    if (a % b != 0) and (a < 0):
        q -= 1
    return q


cdef inline int64_t _ceildiv(int64_t a, int64_t b) noexcept nogil:
    return -_floordiv(-a, b)


cdef tuple _int64_tuple(const int64_t* values, int n, int64_t scale):
    cdef tuple t = PyTuple_New(n)
    cdef int i
    for i in range(n):
        _tuple_set_item(t, i, _long_from_int64(values[i] * scale))
    return t


cdef int64_t _to_int64(object o, str what) except? -1:
    """An int64 from a Python integer (or anything with __index__ except bool)."""
    if not PyLong_CheckExact(o):
        if isinstance(o, bool):
            raise TypeError(f"{what} must be an integer, got bool")
        try:
            o = PyNumber_Index(o)
        except TypeError:
            raise TypeError(f"{what} must be an integer, got {type(o).__name__}") from None
    try:
        return PyLong_AsLongLong(o)
    except OverflowError:
        raise ValueError(f"{what} = {o} does not fit in int64") from None


cdef int _parse_int64_seq(object seq, int64_t* out, str what) except -1:
    """Fill `out` (room for MAX_NDIM) from an int or a sequence of ints; return the length."""
    cdef Py_ssize_t n, i
    cdef PyObject** items
    if PyLong_CheckExact(seq):
        out[0] = _to_int64(seq, what)
        return 1
    if isinstance(seq, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of integers, got {type(seq).__name__}")
    try:
        fast = PySequence_Fast(seq, "")
    except TypeError:
        # Not a sequence: one integer-like (numpy integer) stands for a 1-d shape.
        if isinstance(seq, bool) or not hasattr(seq, "__index__"):
            raise TypeError(f"{what} must be an integer or a sequence of integers, "
                            f"got {type(seq).__name__}") from None
        out[0] = _to_int64(seq, what)
        return 1
    n = PySequence_Fast_GET_SIZE(fast)
    if n > MAX_NDIM:
        raise ValueError(f"{what} has {n} entries; at most {MAX_NDIM} dimensions are supported")
    items = PySequence_Fast_ITEMS(fast)
    for i in range(n):
        out[i] = _to_int64(<object> items[i], what)
    return <int> n


cdef int _parse_shape(object shape, int64_t* out, str what) except -1:
    cdef int n = _parse_int64_seq(shape, out, what)
    cdef int i
    for i in range(n):
        if out[i] < 0:
            raise ValueError(f"{what} entries must be >= 0, got {_int64_tuple(out, n, 1)}")
    return n


cdef int _normalize_axis(object axis, int ndim, str what) except -1:
    cdef int64_t a = _to_int64(axis, what)
    if a < -ndim or a >= ndim:
        raise AxisError(f"{what} {a} is out of bounds for a layout of {ndim} dimensions")
    return <int> (a + ndim if a < 0 else a)


cdef tuple _axes_tuple(object axes, str what):
    if PyLong_CheckExact(axes):
        return (axes,)
    if isinstance(axes, (str, bytes)):
        raise TypeError(f"{what} must be an int or a sequence of ints, got {type(axes).__name__}")
    try:
        return tuple(axes)
    except TypeError:
        if not hasattr(axes, "__index__"):
            raise TypeError(f"{what} must be an int or a sequence of ints, "
                            f"got {type(axes).__name__}") from None
        return (axes,)


cdef int _parse_axes(object axes, int ndim, int* out, str what) except -1:
    """Normalised, duplicate-free axes from an int or a sequence; return how many."""
    cdef int n = 0, i, j
    cdef bint seen[MAX_NDIM]
    if axes is None:
        raise TypeError(f"{what} must be an int or a sequence of ints, got None")
    axes = _axes_tuple(axes, what)
    if len(axes) > ndim:
        raise ValueError(f"{what} {axes} has more entries than the {ndim} dimensions")
    for i in range(ndim):
        seen[i] = False
    for i in range(len(axes)):
        j = _normalize_axis(axes[i], ndim, what)
        if seen[j]:
            raise ValueError(f"repeated axis in {what} {axes}")
        seen[j] = True
        out[n] = j
        n += 1
    return n


cdef int _parse_order(object order, const Extents* like, int ndim, int* perm,
                      bint allow_k) except -1:
    """A stride order (slowest to fastest) from "C", "F", "K" (stride order of `like`) or a
    permutation of range(ndim)."""
    cdef int i, n
    if isinstance(order, str):
        if order == "C":
            for i in range(ndim):
                perm[i] = i
            return 0
        if order == "F":
            for i in range(ndim):
                perm[i] = ndim - 1 - i
            return 0
        if order == "K" and allow_k:
            _stride_order(like, perm)
            return 0
        choices = '"C", "F", "K"' if allow_k else '"C", "F"'
        raise ValueError(
            f"order must be {choices} or a permutation of the dimensions, got {order!r}")
    try:
        n = _parse_axes(order, ndim, perm, "order")
    except AxisError as exc:
        raise ValueError(f"order {order!r} is not a permutation of range({ndim}): {exc}") from None
    if n != ndim:
        raise ValueError(f"order {order!r} is not a permutation of range({ndim})")
    return 0


cdef int _dense_strides(int ndim, const int64_t* shape, const int* perm,
                        int64_t* strides) except -1:
    """Dense strides for stride order `perm` (slowest to fastest).  Extents of 0 are skipped in
    the running product, as numpy does, so an empty layout still gets meaningful strides."""
    cdef int64_t acc = 1
    cdef int k, d
    for k in range(ndim - 1, -1, -1):
        d = perm[k]
        strides[d] = acc
        if shape[d] != 0 and _mul_ovf(acc, shape[d], &acc):
            raise ValueError(f"dense strides for shape {_int64_tuple(shape, ndim, 1)} "
                             "overflow int64")
    return 0


cdef inline bint _slower(const Extents* e, int a, int b) noexcept nogil:
    """Whether dim `a` is strictly slower than dim `b`: a larger |stride|, or an equal one and a
    larger extent (full ties keep index order: the sort is stable)."""
    cdef int64_t sa = _abs64(e.strides[a]), sb = _abs64(e.strides[b])
    if sa != sb:
        return sa > sb
    # Equal |strides| only happen with an extent of 1 or 0 in a dense layout; putting the larger
    # extent first makes an F-ordered (3, 1, 4) give (2, 1, 0), and a C-ordered one (0, 1, 2).
    return e.shape[a] > e.shape[b]


cdef void _stride_order(const Extents* e, int* perm) noexcept nogil:
    """Dims sorted by |stride| descending, then extent descending, then index (stable)."""
    cdef int i, j
    for i in range(e.ndim):
        j = i
        while j > 0 and _slower(e, i, perm[j - 1]):
            perm[j] = perm[j - 1]
            j -= 1
        perm[j] = i


cdef StridedLayout _new_layout():
    return StridedLayout.__new__(StridedLayout)


cdef StridedLayout _layout_from_arrays(int ndim, const int64_t* shape, const int64_t* strides,
                                       int64_t itemsize, int64_t slice_offset, bint validate):
    cdef StridedLayout r = _new_layout()
    extents_resize(&r.ext, ndim)
    if ndim:
        memcpy(r.ext.shape, shape, ndim * sizeof(int64_t))
        memcpy(r.ext.strides, strides, ndim * sizeof(int64_t))
    if validate:
        extents_validate(&r.ext, itemsize, slice_offset)
    r.itemsize = itemsize
    r.slice_offset = slice_offset
    return r


# --- the cdef API (see _layout.pxd) ------------------------------------------------------------

cdef StridedLayout layout_from_extents(const Extents* ext, int64_t itemsize, int64_t slice_offset):
    cdef StridedLayout r = _new_layout()
    extents_copy(&r.ext, ext)
    r.itemsize = itemsize
    r.slice_offset = slice_offset
    return r


cdef int64_t extents_volume(const Extents* e) noexcept nogil:
    cdef int64_t v = 1
    cdef bint overflow = False
    cdef int i
    for i in range(e.ndim):
        if e.shape[i] == 0:
            return 0
        if not overflow and _mul_ovf(v, e.shape[i], &v):
            overflow = True   # keep scanning: a later extent of 0 still makes the volume 0
    return -1 if overflow else v


cdef void extents_offset_bounds(const Extents* e, int64_t* lo, int64_t* hi) noexcept nogil:
    cdef int64_t l = 0, h = 0, span
    cdef int i
    for i in range(e.ndim):
        if e.shape[i] == 0:
            lo[0] = 0
            hi[0] = -1
            return
        span = (e.shape[i] - 1) * e.strides[i]
        if span > 0:
            h += span
        else:
            l += span
    lo[0] = l
    hi[0] = h


cdef bint _has_zero_extent(const Extents* e) noexcept nogil:
    cdef int i
    for i in range(e.ndim):
        if e.shape[i] == 0:
            return True
    return False


cdef bint extents_is_c_contiguous(const Extents* e) noexcept nogil:
    cdef int64_t expected = 1
    cdef int i
    for i in range(e.ndim - 1, -1, -1):
        if e.shape[i] == 1:
            continue
        if e.shape[i] == 0:
            return True
        if e.strides[i] != expected:
            return _has_zero_extent(e)
        expected *= e.shape[i]
    return True


cdef bint extents_is_f_contiguous(const Extents* e) noexcept nogil:
    cdef int64_t expected = 1
    cdef int i
    for i in range(e.ndim):
        if e.shape[i] == 1:
            continue
        if e.shape[i] == 0:
            return True
        if e.strides[i] != expected:
            return _has_zero_extent(e)
        expected *= e.shape[i]
    return True


cdef bint _is_contiguous_any(const Extents* e) noexcept nogil:
    """Dense in some dimension order: the dims of extent > 1, sorted by stride, tile exactly."""
    cdef int perm[MAX_NDIM]
    cdef int i, d, n = 0
    cdef int64_t expected = 1
    if _has_zero_extent(e):
        return True
    _stride_order(e, perm)
    for i in range(e.ndim - 1, -1, -1):
        d = perm[i]
        if e.shape[d] == 1:
            continue
        if e.strides[d] != expected:
            return False
        expected *= e.shape[d]
    return True


cdef int _overlap_search(const int64_t* s, const int64_t* m, const int64_t* reach, int n, int k,
                         int64_t r, bint nonzero, int64_t* budget) noexcept nogil:
    """Look for d with |d_j| <= m_j for j >= k, sum s_j d_j = r, and d != 0 overall.

    s is sorted descending; reach[k] = sum_{j>=k} s_j m_j.  Returns 1 if found, 0 if not,
    -1 if the budget ran out.  By symmetry the first nonzero d_j is taken positive.
    """
    cdef int64_t lo, hi, dk
    cdef int res
    budget[0] -= 1
    if budget[0] < 0:
        return -1
    if k == n:
        return 1 if (r == 0 and nonzero) else 0
    lo = _ceildiv(r - reach[k + 1], s[k])
    hi = _floordiv(r + reach[k + 1], s[k])
    if lo < -m[k]:
        lo = -m[k]
    if hi > m[k]:
        hi = m[k]
    if not nonzero and lo < 0:
        lo = 0
    dk = lo
    while dk <= hi:
        res = _overlap_search(s, m, reach, n, k + 1, r - s[k] * dk, nonzero or dk != 0, budget)
        if res != 0:
            return res
        dk += 1
    return 0


cdef bint _is_unique(const Extents* e) noexcept nogil:
    cdef int64_t s[MAX_NDIM]
    cdef int64_t m[MAX_NDIM]
    cdef int64_t reach[MAX_NDIM + 1]
    cdef int64_t acc, budget, sv, mv
    cdef int i, j, n = 0
    if _has_zero_extent(e):
        return True
    for i in range(e.ndim):
        if e.shape[i] == 1:
            continue
        if e.strides[i] == 0:
            return False
        sv = _abs64(e.strides[i])
        mv = e.shape[i] - 1
        # insertion sort, |stride| descending
        j = n
        while j > 0 and s[j - 1] < sv:
            s[j] = s[j - 1]
            m[j] = m[j - 1]
            j -= 1
        s[j] = sv
        m[j] = mv
        n += 1
    # Sufficient condition: taken from the fastest dim up, each stride clears everything the
    # faster dims can reach.  Holds for every dense or sliced-dense layout.
    acc = 0
    for i in range(n - 1, -1, -1):
        if s[i] <= acc:
            break
        acc += s[i] * m[i]
    else:
        return True
    reach[n] = 0
    for i in range(n - 1, -1, -1):
        reach[i] = reach[i + 1] + s[i] * m[i]
    budget = _UNIQUE_SEARCH_BUDGET
    return _overlap_search(s, m, reach, n, 0, 0, False, &budget) == 0


cdef tuple extents_shape_tuple(const Extents* e):
    return _int64_tuple(e.shape, e.ndim, 1)


cdef tuple extents_strides_tuple(const Extents* e, int64_t scale):
    return _int64_tuple(e.strides, e.ndim, scale)


cdef int extents_validate(const Extents* e, int64_t itemsize, int64_t slice_offset) except -1:
    cdef int64_t lo = 0, hi = 0, span
    cdef int i
    cdef bint overflow = False
    for i in range(e.ndim):
        if e.shape[i] < 0:
            raise ValueError(f"extents must be >= 0, got shape {extents_shape_tuple(e)}")
    if extents_volume(e) < 0:
        raise ValueError(f"the volume of shape {extents_shape_tuple(e)} overflows int64")
    for i in range(e.ndim):
        # Every stride in bytes fits in int64 (strides_in_bytes, the exports), even where it
        # addresses nothing (an extent of 1 or 0).
        if _mul_ovf(e.strides[i], itemsize, &span):
            overflow = True
    if not overflow and not _has_zero_extent(e):
        for i in range(e.ndim):
            if (_mul_ovf(e.shape[i] - 1, e.strides[i], &span)
                    or _add_ovf(hi, span if span > 0 else 0, &hi)
                    or _add_ovf(lo, span if span < 0 else 0, &lo)):
                overflow = True
                break
    if not overflow:
        overflow = (_add_ovf(lo, slice_offset, &lo) or _add_ovf(hi, slice_offset, &hi)
                    or _add_ovf(hi, 1, &hi) or _mul_ovf(lo, itemsize, &lo)
                    or _mul_ovf(hi, itemsize, &hi))
    if overflow:
        raise ValueError(
            f"shape {extents_shape_tuple(e)} with strides {extents_strides_tuple(e, 1)}, "
            f"slice_offset {slice_offset} and itemsize {itemsize} reaches byte offsets "
            "outside the int64 range")
    return 0


# Beyond this step a 1-long slice keeps its source's stride (extents_getitem).
cdef Py_ssize_t _HUGE_STEP = 1 << 32


cdef int _int_index(object item, const Extents* src, int d, int64_t* offset) except -1:
    cdef int64_t idx, n = src.shape[d]
    if not PyLong_CheckExact(item):
        # numpy's bool scalar keeps a (deprecated) __index__ before numpy 2.3 (Python 3.10's
        # newest is 2.2), yet numpy indexes with it as a mask: refuse it as numpy's own bool.
        if isinstance(item, bool) or (type(item).__module__ == "numpy"
                                      and type(item).__name__ in ("bool", "bool_")):
            raise TypeError("boolean indices are not supported (a view cannot select by mask)")
        try:
            item = PyNumber_Index(item)
        except TypeError:
            raise TypeError(
                "only integers, slices (`:`), ellipsis (`...`) and None are valid indices, "
                f"got {type(item).__name__}") from None
    try:
        idx = PyLong_AsLongLong(item)
    except OverflowError:
        raise IndexError(f"index {item} is out of bounds for axis {d} with size {n}") from None
    if idx < 0:
        idx += n
    if idx < 0 or idx >= n:
        raise IndexError(f"index {item} is out of bounds for axis {d} with size {n}")
    offset[0] += idx * src.strides[d]
    return 0


cdef int extents_getitem(const Extents* src, object key, Extents* dst, int64_t* offset) except -1:
    cdef int64_t shp[MAX_NDIM]
    cdef int64_t st[MAX_NDIM]
    cdef PyObject* single
    cdef PyObject** items
    cdef PyObject* item
    cdef Py_ssize_t n_items, k, start, stop, step, length
    cdef int ndim = src.ndim, n_index = 0, n_ell = 0, d = 0, out = 0, fill, j
    cdef int64_t off = 0, stride
    if PyTuple_Check(key):
        n_items = PySequence_Fast_GET_SIZE(key)
        items = PySequence_Fast_ITEMS(key)
    else:
        single = <PyObject*> key
        items = &single
        n_items = 1
    for k in range(n_items):
        item = items[k]
        if item == _ELLIPSIS:
            n_ell += 1
        elif item != _NONE:
            n_index += 1
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_index > ndim:
        raise IndexError(f"too many indices: the layout is {ndim}-dimensional, "
                         f"but {n_index} were indexed")
    for k in range(n_items):
        item = items[k]
        if item == _NONE:
            if out == MAX_NDIM:
                raise ValueError(f"indexing would give more than {MAX_NDIM} dimensions")
            shp[out] = 1
            st[out] = 0
            out += 1
        elif item == _ELLIPSIS:
            fill = ndim - n_index
            if out + fill > MAX_NDIM:
                raise ValueError(f"indexing would give more than {MAX_NDIM} dimensions")
            for j in range(fill):
                shp[out] = src.shape[d]
                st[out] = src.strides[d]
                out += 1
                d += 1
        elif PySlice_Check(<object> item):
            if out == MAX_NDIM:
                raise ValueError(f"indexing would give more than {MAX_NDIM} dimensions")
            PySlice_Unpack(<object> item, &start, &stop, &step)
            length = PySlice_AdjustIndices(src.shape[d], &start, &stop, step)
            stride = src.strides[d]
            if length <= 0:
                # As numpy: an empty slice points at the old element 0.
                length = 0
                start = 0
                step = 1
            shp[out] = length
            # Only a 1-long slice can take a huge step, and its stride addresses nothing: beyond
            # 2**32 it keeps the source's, so that no stride in bytes overflows int64.
            if (length <= 1 and (step > _HUGE_STEP or step < -_HUGE_STEP)) or _mul_ovf(
                    stride, step, &st[out]):
                st[out] = stride
            off += start * stride
            out += 1
            d += 1
        else:
            _int_index(<object> item, src, d, &off)
            d += 1
    if out + (ndim - d) > MAX_NDIM:
        raise ValueError(f"indexing would give more than {MAX_NDIM} dimensions")
    while d < ndim:
        shp[out] = src.shape[d]
        st[out] = src.strides[d]
        out += 1
        d += 1
    # Written last, from the local arrays, so `dst` may alias `src`.
    extents_resize(dst, out)
    if out:
        memcpy(dst.shape, shp, out * sizeof(int64_t))
        memcpy(dst.strides, st, out * sizeof(int64_t))
    offset[0] = off
    return 0


cdef int _reshape_strides(const Extents* e, int n, const int64_t* newshape,
                          int64_t* newstrides) except -1:
    """Strides giving `newshape` over the same elements without a copy: 1 if possible, else 0.

    Works group by group: the smallest runs of old and new dims with equal products must each be
    mergeable (every old stride equals the next one times its extent), and the new strides of
    the group then follow from the group's fastest old stride.  Old extent-1 dims are ignored.
    """
    cdef int64_t od[MAX_NDIM]
    cdef int64_t os[MAX_NDIM]
    cdef int on = 0, i, oi, oj, ni, nj, ok, nk
    cdef int64_t np_, op, last
    cdef int perm[MAX_NDIM]
    if _has_zero_extent(e):
        for i in range(n):
            perm[i] = i
        _dense_strides(n, newshape, perm, newstrides)
        return 1
    for i in range(e.ndim):
        if e.shape[i] != 1:
            od[on] = e.shape[i]
            os[on] = e.strides[i]
            on += 1
    oi = 0
    oj = 1
    ni = 0
    nj = 1
    while ni < n and oi < on:
        np_ = newshape[ni]
        op = od[oi]
        while np_ != op:
            if np_ < op:
                np_ *= newshape[nj]
                nj += 1
            else:
                op *= od[oj]
                oj += 1
        for ok in range(oi, oj - 1):
            if os[ok] != od[ok + 1] * os[ok + 1]:
                return 0
        newstrides[nj - 1] = os[oj - 1]
        for nk in range(nj - 1, ni, -1):
            newstrides[nk - 1] = newstrides[nk] * newshape[nk]
        ni = nj
        nj += 1
        oi = oj
        oj += 1
    last = newstrides[ni - 1] if ni >= 1 else 1
    for nk in range(ni, n):
        newstrides[nk] = last
    return 1


cdef inline uint64_t _all_axes_mask(int ndim) noexcept nogil:
    """Bits 1..ndim-1: every dim but the first may merge into the one before it."""
    if ndim <= 1:
        return 0
    if ndim == 64:
        return ~(<uint64_t> 1)
    return ((<uint64_t> 1) << ndim) - 2


cdef uint64_t extents_merge_mask(const Extents* e) noexcept nogil:
    cdef uint64_t mask = 0
    cdef int64_t product
    cdef int i, prev = -1    # prev: the nearest dim to the left with extent != 1
    if _has_zero_extent(e):
        return _all_axes_mask(e.ndim)
    for i in range(e.ndim):
        if i > 0 and (e.shape[i] == 1 or prev < 0
                      or (not _mul_ovf(e.strides[i], e.shape[i], &product)
                          and product == e.strides[prev])):
            mask |= (<uint64_t> 1) << i
        if e.shape[i] != 1:
            prev = i
    return mask


cdef int _merge_extents(const Extents* e, uint64_t allowed, int64_t* shp, int64_t* st,
                        int* merges) except -1:
    """Merge each dim i whose bit is set in `allowed` into the group before it, where the
    elements allow it; write the result and return its ndim (at least 1).

    A group keeps the stride of its fastest dim of extent != 1 (of its last dim if it has none):
    dim i joins when its extent is 1, when the group has only extents of 1 so far, or when the
    group's stride equals stride[i] * extent[i].  With no elements at all, every allowed merge
    is made.  `merges` counts the merges made.
    """
    cdef bint empty = _has_zero_extent(e), has_big
    cdef int i, out = 0
    cdef int64_t product
    merges[0] = 0
    if e.ndim == 0:
        shp[0] = 1
        st[0] = 1
        return 1
    shp[0] = e.shape[0]
    st[0] = e.strides[0]
    has_big = e.shape[0] != 1
    for i in range(1, e.ndim):
        if (allowed >> i) & 1 and (
                empty or e.shape[i] == 1 or not has_big
                or (not _mul_ovf(e.strides[i], e.shape[i], &product) and product == st[out])):
            if _mul_ovf(shp[out], e.shape[i], &shp[out]):
                raise ValueError(f"merging dims of shape {extents_shape_tuple(e)} gives an "
                                 "extent that overflows int64")
            if e.shape[i] != 1 or not has_big:
                st[out] = e.strides[i]
            has_big = has_big or e.shape[i] != 1
            merges[0] += 1
        else:
            out += 1
            shp[out] = e.shape[i]
            st[out] = e.strides[i]
            has_big = e.shape[i] != 1
    return out + 1


cdef inline int64_t _gcd(int64_t a, int64_t b) noexcept nogil:
    cdef int64_t t
    a = _abs64(a)
    b = _abs64(b)
    while b != 0:
        t = a % b
        a = b
        b = t
    return a


cdef uint64_t _to_address(object data_ptr) except? 0xFFFFFFFFFFFFFFFF:
    """A data pointer as an unsigned 64-bit address (a negative int is taken as intptr_t)."""
    if not PyLong_CheckExact(data_ptr):
        if isinstance(data_ptr, bool) or not hasattr(data_ptr, "__index__"):
            raise TypeError(f"data_ptr must be an integer, got {type(data_ptr).__name__}")
        data_ptr = PyNumber_Index(data_ptr)
    if data_ptr < 0:
        return <uint64_t> _to_int64(data_ptr, "data_ptr")
    try:
        return PyLong_AsUnsignedLongLong(data_ptr)
    except OverflowError:
        raise ValueError(f"data_ptr = {data_ptr} does not fit in 64 bits") from None


cdef StridedLayout layout_merged(StridedLayout self, uint64_t allowed):
    cdef int64_t shp[MAX_NDIM]
    cdef int64_t st[MAX_NDIM]
    cdef int merges
    cdef int n = _merge_extents(&self.ext, allowed, shp, st, &merges)
    if merges == 0 and self.ext.ndim > 0:
        return self
    return _layout_from_arrays(n, shp, st, self.itemsize, self.slice_offset, False)


cdef object _repack_error(StridedLayout self, int64_t isz, str why):
    return ValueError(f"cannot repack shape {self.shape} with strides {self.strides} from "
                      f"itemsize {self.itemsize} to {isz}: {why}")


cdef inline int _checked_axis(int64_t axis, int ndim) except -1:
    if axis < -ndim or axis >= ndim:
        raise AxisError(f"axis {axis} is out of bounds for a layout of {ndim} dimensions")
    return <int> (axis + ndim if axis < 0 else axis)


cdef StridedLayout layout_repacked(StridedLayout self, int64_t isz, uint64_t data_ptr,
                                   int64_t axis, bint keep_dim):
    cdef int64_t shp[MAX_NDIM]
    cdef int64_t st[MAX_NDIM]
    cdef int64_t old = self.itemsize, axis_bytes, offset_bytes, stride_bytes
    cdef int nd = self.ext.ndim, i, ax, out = 0
    cdef bint empty, overflow
    if isz <= 0:
        raise ValueError(f"new_itemsize must be > 0, got {isz}")
    if isz == old:
        return self
    if nd == 0:
        raise ValueError(f"cannot repack a 0-d layout from itemsize {old} to {isz}; "
                         "unsqueeze it to 1-d first")
    ax = _checked_axis(axis, nd)
    if data_ptr % <uint64_t> isz != 0:
        raise _repack_error(self, isz, f"data_ptr {data_ptr:#x} is not aligned to {isz} bytes")
    empty = _has_zero_extent(&self.ext)
    if not empty and self.ext.shape[ax] != 1 and self.ext.strides[ax] != 1:
        raise _repack_error(self, isz, f"axis {ax} must be contiguous, but its stride is "
                                       f"{self.ext.strides[ax]}")
    if _mul_ovf(self.ext.shape[ax], old, &axis_bytes):
        raise _repack_error(self, isz, f"axis {ax} holds more bytes than int64 counts")
    if axis_bytes % isz != 0:
        raise _repack_error(self, isz, f"axis {ax} holds {axis_bytes} bytes, not a multiple "
                                       f"of {isz}")
    if _mul_ovf(self.slice_offset, old, &offset_bytes) or offset_bytes % isz != 0:
        raise _repack_error(self, isz, f"slice_offset {self.slice_offset} is "
                                       f"{<object> self.slice_offset * old} bytes, not a multiple "
                                       f"of {isz}")
    for i in range(nd):
        if i == ax:
            if keep_dim or axis_bytes != isz:
                shp[out] = axis_bytes // isz
                st[out] = 1
                out += 1
            continue
        shp[out] = self.ext.shape[i]
        overflow = _mul_ovf(self.ext.strides[i], old, &stride_bytes)
        if empty or shp[out] == 1:
            # No offset depends on this stride, so any value is right: keep it near in bytes.
            st[out] = 0 if overflow else _floordiv(stride_bytes, isz)
        elif overflow or stride_bytes % isz != 0:
            raise _repack_error(self, isz, f"dim {i} has a stride of "
                                           f"{<object> self.ext.strides[i] * old} bytes, not a "
                                           f"multiple of {isz}")
        else:
            st[out] = stride_bytes // isz
        out += 1
    return _layout_from_arrays(out, shp, st, isz, offset_bytes // isz, True)


cdef inline int64_t _gcd_bytes(int64_t g, int64_t count, int64_t itemsize) noexcept nogil:
    cdef int64_t b
    if _mul_ovf(count, itemsize, &b):
        return 1   # unreachable for a validated layout; 1 is the answer that is always safe
    return _gcd(g, b)


cdef int64_t extents_compatible_itemsize(const Extents* e, int64_t itemsize,
                                         int64_t slice_offset, int64_t max_itemsize,
                                         uint64_t data_ptr, int ax) noexcept nogil:
    cdef int64_t g
    cdef int i
    # A candidate size must divide the data pointer, the bytes of the repacked axis, element
    # 0's offset in bytes and every stride in bytes that moves an element (with no element,
    # every stride of an extent other than 1, as if some did).
    g = _gcd(max_itemsize, <int64_t> (data_ptr % <uint64_t> max_itemsize))
    g = _gcd_bytes(g, e.shape[ax], itemsize)
    g = _gcd_bytes(g, slice_offset, itemsize)
    for i in range(e.ndim):
        if i != ax and e.shape[i] != 1:
            g = _gcd_bytes(g, e.strides[i], itemsize)
    return g


cdef int64_t layout_max_compatible_itemsize(StridedLayout self, int64_t max_itemsize,
                                            uint64_t data_ptr, int64_t axis) except -1:
    cdef int ax
    if max_itemsize <= 0:
        raise ValueError(f"max_itemsize must be > 0, got {max_itemsize}")
    if max_itemsize < self.itemsize:
        raise ValueError(f"max_itemsize {max_itemsize} is less than the layout's itemsize "
                         f"{self.itemsize}")
    ax = _checked_axis(axis, self.ext.ndim)
    if _has_zero_extent(&self.ext) or (self.ext.shape[ax] != 1 and self.ext.strides[ax] != 1):
        return self.itemsize
    return extents_compatible_itemsize(&self.ext, self.itemsize, self.slice_offset,
                                       max_itemsize, data_ptr, ax)


cdef StridedLayout _dense_like(StridedLayout like, object order):
    cdef int64_t st[MAX_NDIM]
    cdef int perm[MAX_NDIM]
    _parse_order(order, &like.ext, like.ext.ndim, perm, True)
    _dense_strides(like.ext.ndim, like.ext.shape, perm, st)
    return _layout_from_arrays(like.ext.ndim, like.ext.shape, st, like.itemsize, 0, True)


cdef uint64_t _range_mask(int ndim, object start, object end, int* s, int* e) except? 1:
    """The merge mask allowing only dims start..end to merge with each other (bits s+1..e)."""
    cdef uint64_t mask
    if ndim == 0:
        s[0] = 0
        e[0] = 0
        return 0
    s[0] = _normalize_axis(start, ndim, "start")
    e[0] = _normalize_axis(end, ndim, "end")
    if s[0] > e[0]:
        raise ValueError(f"start ({s[0]}) must not come after end ({e[0]})")
    mask = _all_axes_mask(e[0] + 1)    # bits 1..e
    return mask & ~((((<uint64_t> 1) << s[0]) << 1) - 1)   # minus bits 0..s


cdef uint64_t _parse_mask(object mask, int ndim) except? 1:
    cdef uint64_t m
    if isinstance(mask, bool) or not hasattr(mask, "__index__"):
        raise TypeError(f"mask must be an int, got {type(mask).__name__}")
    mask = PyNumber_Index(mask)
    if mask < 0 or mask >= (<object> 1) << ndim:
        raise ValueError(f"mask {mask:#x} has bits outside the {ndim} dims of the layout "
                         f"(bit i stands for dim i)")
    m = PyLong_AsUnsignedLongLong(mask)
    return m


# --- the Python class --------------------------------------------------------------------------

@cython.freelist(16)
cdef class StridedLayout:
    """Shape, strides (in elements) and itemsize of strided memory; immutable.

    Parameters
    ----------
    shape : int or sequence of int
        Extents, each >= 0; at most 64 dimensions.
    strides : sequence of int, optional
        Strides in elements (not bytes), one per dimension, any sign.  ``None`` (the default)
        means C-contiguous.
    itemsize : int, optional
        Bytes per element, > 0.  Default 1.
    slice_offset : int, optional
        Elements from a base pointer to element 0 (the offset a slice accumulates).  Default 0.

    Raises
    ------
    TypeError
        If an entry is not an integer.
    ValueError
        If an extent is negative, the strides have the wrong length, there are more than 64
        dimensions, itemsize <= 0, or the volume or a byte offset overflows int64.

    Notes
    -----
    Every method returns a new layout; none changes this one.  A *stride order* (the ``order``
    argument of :meth:`dense` and :meth:`to_dense`, and :attr:`stride_order`) lists the
    dimensions from the slowest varying (largest ``|stride|``) to the fastest: ``"C"`` is
    ``(0, 1, ..., ndim-1)`` and ``"F"`` is ``(ndim-1, ..., 1, 0)``.

    Conventions: :attr:`strides` is always a tuple (``is_contiguous_c`` says whether it is
    the C-contiguous one; it is a C-level check that builds no tuple).  A layout with no
    elements keeps the strides a dense layout of its shape would have, with extents of 0
    skipped in the running product (as torch does), rather than all zeros, so that they stay
    meaningful after a reshape; its :attr:`offset_bounds` are the empty range
    ``(slice_offset, slice_offset - 1)``.  Bad shapes, axes and strides raise ``ValueError``
    (:class:`AxisError`, also an ``IndexError``, for an axis out of range) or ``TypeError``
    for non-integers, with a message naming the shapes involved.  Indexing raises
    ``IndexError`` where numpy does (too many indices, an int out of range) but ``TypeError``
    for an index of a kind it does not take (floats, strs, lists, arrays, bools), where numpy
    raises ``IndexError`` or indexes by array; see :meth:`sliced`.

    Examples
    --------
    >>> StridedLayout((2, 3), itemsize=4).strides
    (3, 1)
    >>> StridedLayout.dense((2, 3, 4), 8, order=(2, 0, 1)).strides
    (3, 1, 6)
    """

    def __cinit__(self):
        extents_init(&self.ext)

    def __dealloc__(self):
        extents_free(&self.ext)

    def __init__(self, shape, strides=None, itemsize=1, slice_offset=0):
        cdef int64_t shp[MAX_NDIM]
        cdef int64_t st[MAX_NDIM]
        cdef int perm[MAX_NDIM]
        cdef int n, m, i
        cdef int64_t isz, off
        if self.itemsize != 0:
            raise TypeError("StridedLayout is immutable; __init__ cannot be called again")
        n = _parse_shape(shape, shp, "shape")
        isz = _to_int64(itemsize, "itemsize")
        if isz <= 0:
            raise ValueError(f"itemsize must be > 0, got {isz}")
        off = _to_int64(slice_offset, "slice_offset")
        if strides is None:
            for i in range(n):
                perm[i] = i
            _dense_strides(n, shp, perm, st)
        else:
            m = _parse_int64_seq(strides, st, "strides")
            if m != n:
                raise ValueError(f"strides {tuple(strides)} has {m} entries but shape "
                                 f"{_int64_tuple(shp, n, 1)} has {n}")
        extents_resize(&self.ext, n)
        if n:
            memcpy(self.ext.shape, shp, n * sizeof(int64_t))
            memcpy(self.ext.strides, st, n * sizeof(int64_t))
        extents_validate(&self.ext, isz, off)
        self.itemsize = isz
        self.slice_offset = off

    # --- constructors --------------------------------------------------------------------------

    @classmethod
    def dense(cls, shape, itemsize, order="C"):
        """A dense (gap-free, non-overlapping) layout.

        Parameters
        ----------
        shape : int or sequence of int
            Extents.
        itemsize : int
            Bytes per element.
        order : {"C", "F"} or sequence of int, optional
            "C" (last dim fastest, the default), "F" (first dim fastest), or a permutation of
            ``range(ndim)`` listing the dims from slowest varying to fastest varying (so
            ``tuple(range(ndim))`` is "C", and the last entry gets stride 1).

        Returns
        -------
        StridedLayout
            With ``slice_offset`` 0; its :attr:`stride_order` is ``order`` whenever all
            extents exceed 1.
        """
        cdef int64_t shp[MAX_NDIM]
        cdef int64_t st[MAX_NDIM]
        cdef int perm[MAX_NDIM]
        cdef int n = _parse_shape(shape, shp, "shape")
        cdef int64_t isz = _to_int64(itemsize, "itemsize")
        if isz <= 0:
            raise ValueError(f"itemsize must be > 0, got {isz}")
        _parse_order(order, NULL, n, perm, False)
        _dense_strides(n, shp, perm, st)
        return _layout_from_arrays(n, shp, st, isz, 0, True)

    @classmethod
    def dense_like(cls, other, order="K"):
        """A dense layout with the shape and itemsize of `other`.

        Parameters
        ----------
        other : StridedLayout
            The layout to imitate.
        order : {"K", "C", "F"} or sequence of int, optional
            "K" (the default) keeps ``other.stride_order``, so a dense `other` comes back
            unchanged (up to ``slice_offset`` and the strides of extent-1 dims) and a transposed
            one stays transposed.  "C", "F" or a permutation as in :meth:`dense`.

        Returns
        -------
        StridedLayout
            With ``slice_offset`` 0.
        """
        if not isinstance(other, StridedLayout):
            raise TypeError(f"other must be a StridedLayout, got {type(other).__name__}")
        return _dense_like(<StridedLayout> other, order)

    # --- properties ----------------------------------------------------------------------------

    @property
    def shape(self):
        """tuple of int: Extent of each dimension."""
        return _int64_tuple(self.ext.shape, self.ext.ndim, 1)

    @property
    def strides(self):
        """tuple of int: Stride of each dimension, in elements."""
        return _int64_tuple(self.ext.strides, self.ext.ndim, 1)

    @property
    def strides_in_bytes(self):
        """tuple of int: Stride of each dimension, in bytes (``strides`` times ``itemsize``)."""
        return _int64_tuple(self.ext.strides, self.ext.ndim, self.itemsize)

    @property
    def ndim(self):
        """int: Number of dimensions (0 to 64)."""
        return self.ext.ndim

    @property
    def volume(self):
        """int: Number of elements (the product of the extents; 1 for 0-d)."""
        return extents_volume(&self.ext)

    @property
    def stride_order(self):
        """tuple of int: The dims sorted by ``|stride|`` descending (slowest varying first).

        Ties (equal ``|stride|``, which in a dense layout only dims of extent 1 or 0 have) put
        the larger extent first, then the lower index, as cuda.core does: a C-contiguous layout
        with elements gives ``(0, 1, ..., ndim-1)``, and an F-contiguous one
        ``(ndim-1, ..., 1, 0)`` unless two neighbouring dims have extent 1.  This is the form
        :meth:`dense` takes as ``order``.
        """
        cdef int perm[MAX_NDIM]
        cdef int i
        cdef tuple t = PyTuple_New(self.ext.ndim)
        _stride_order(&self.ext, perm)
        for i in range(self.ext.ndim):
            _tuple_set_item(t, i, _long_from_int64(perm[i]))
        return t

    @property
    def is_contiguous_c(self):
        """bool: Dense in C order (dims of extent 1 may have any stride; empty counts)."""
        return extents_is_c_contiguous(&self.ext)

    @property
    def is_contiguous_f(self):
        """bool: Dense in Fortran order (dims of extent 1 may have any stride; empty counts)."""
        return extents_is_f_contiguous(&self.ext)

    @property
    def is_contiguous_any(self):
        """bool: Dense in some dimension order: the elements fill ``volume`` consecutive slots.

        Strides must be positive (a reversed layout is not contiguous); dims of extent 1 may
        have any stride; an empty layout counts as contiguous.
        """
        return _is_contiguous_any(&self.ext)

    @property
    def is_unique(self):
        """bool: No two index tuples reach the same element (safe to write through).

        False for a stride of 0 on a dim of extent > 1 (broadcasting) and for overlapping
        layouts.  The answer is exact except for pathological layouts where the overlap search
        exceeds a fixed budget; those answer False, the safe side.
        """
        return _is_unique(&self.ext)

    @property
    def min_offset(self):
        """int: Lowest element offset reached, from the base pointer (``slice_offset`` included).

        For an empty layout (volume 0) this is ``slice_offset`` and ``max_offset`` is one less,
        so that ``max_offset - min_offset + 1 == 0``.
        """
        cdef int64_t lo, hi
        if _has_zero_extent(&self.ext):
            return self.slice_offset
        extents_offset_bounds(&self.ext, &lo, &hi)
        return lo + self.slice_offset

    @property
    def max_offset(self):
        """int: Highest element offset reached, from the base pointer (``slice_offset`` included).

        ``slice_offset - 1`` for an empty layout (see :attr:`min_offset`).
        """
        cdef int64_t lo, hi
        if _has_zero_extent(&self.ext):
            return self.slice_offset - 1
        extents_offset_bounds(&self.ext, &lo, &hi)
        return hi + self.slice_offset

    @property
    def required_size_in_bytes(self):
        """int: Bytes from the base pointer a buffer needs to hold every element.

        ``(max_offset + 1) * itemsize``; 0 for an empty layout.  A layout with
        ``min_offset < 0`` also reaches memory before the base pointer, which this does not
        count.
        """
        cdef int64_t lo, hi
        if _has_zero_extent(&self.ext):
            return 0
        extents_offset_bounds(&self.ext, &lo, &hi)
        hi += self.slice_offset + 1
        return hi * self.itemsize if hi > 0 else 0

    @property
    def slice_offset_in_bytes(self):
        """int: Bytes from the base pointer to element 0 (``slice_offset * itemsize``)."""
        return self.slice_offset * self.itemsize

    @property
    def offset_bounds(self):
        """tuple of int: ``(min_offset, max_offset)``, in elements from the base pointer.

        For a layout with no elements this is ``(slice_offset, slice_offset - 1)``: an empty
        range at element 0.
        """
        cdef int64_t lo, hi
        if _has_zero_extent(&self.ext):
            return (self.slice_offset, self.slice_offset - 1)
        extents_offset_bounds(&self.ext, &lo, &hi)
        return (lo + self.slice_offset, hi + self.slice_offset)

    @property
    def is_dense(self):
        """bool: The elements fill offsets ``0 .. volume-1`` from the base pointer exactly.

        :attr:`is_contiguous_any` with ``slice_offset == 0``: a layout :meth:`dense` or
        :meth:`to_dense` may give (up to the strides of dims of extent 1).
        """
        return self.slice_offset == 0 and _is_contiguous_any(&self.ext)

    # --- derived layouts -----------------------------------------------------------------------

    def sliced(self, key):
        """The layout of ``array[key]``, as numpy indexes.

        Parameters
        ----------
        key : int, slice, Ellipsis, None, or tuple of them
            An int removes its dim (negative counts from the end); a slice keeps it (any step,
            negative included); None inserts a dim of extent 1 and stride 0; one Ellipsis
            stands for all unindexed dims.

        Returns
        -------
        StridedLayout
            Whose ``slice_offset`` is this one's plus the offset of the selected element 0.

        Raises
        ------
        IndexError
            For too many indices, more than one Ellipsis, or an int out of range, as numpy.
            The indices are counted before their kinds are checked: on a 0-d layout any index
            but ``...`` and ``None`` (``L0d[True]``, ``L0d[1.0]`` included) is one too many.
        TypeError
            For an index of any other kind: floats, strs, lists, arrays, and bools (a layout
            cannot select by mask).  numpy raises ``IndexError`` for floats and strs, and
            indexes by array with lists, arrays and bools.
        ValueError
            For a slice step of 0, or a result of more than 64 dims.
        """
        cdef int64_t off = 0
        cdef StridedLayout r = _new_layout()
        extents_getitem(&self.ext, key, &r.ext, &off)
        r.itemsize = self.itemsize
        r.slice_offset = self.slice_offset + off
        return r

    def __getitem__(self, key):
        """Same as :meth:`sliced`."""
        cdef int64_t off = 0
        cdef StridedLayout r = _new_layout()
        extents_getitem(&self.ext, key, &r.ext, &off)
        r.itemsize = self.itemsize
        r.slice_offset = self.slice_offset + off
        return r

    def reshaped(self, shape):
        """The same elements, in C order, seen with another shape, without copying.

        Parameters
        ----------
        shape : int or sequence of int
            The new extents; one entry may be -1 (inferred).  The volume must not change.

        Returns
        -------
        StridedLayout

        Raises
        ------
        ValueError
            If the volumes differ, the -1 cannot be inferred, or the reshape needs a copy
            (as numpy ``reshape(..., copy=False)`` would refuse).
        """
        cdef int64_t shp[MAX_NDIM]
        cdef int64_t st[MAX_NDIM]
        cdef int n = _parse_int64_seq(shape, shp, "shape"), i, infer = -1
        cdef int64_t known = 1, vol = extents_volume(&self.ext)
        for i in range(n):
            if shp[i] == -1:
                if infer >= 0:
                    raise ValueError(f"cannot reshape shape {self.shape} into "
                                     f"{_int64_tuple(shp, n, 1)}: only one extent may be -1")
                infer = i
            elif shp[i] < 0:
                raise ValueError(f"cannot reshape shape {self.shape} into "
                                 f"{_int64_tuple(shp, n, 1)}: extents must be >= 0 (or one -1)")
            elif _mul_ovf(known, shp[i], &known):
                raise ValueError(f"cannot reshape shape {self.shape} into "
                                 f"{_int64_tuple(shp, n, 1)}: its volume overflows int64")
        if infer >= 0:
            if known == 0:
                raise ValueError(f"cannot reshape shape {self.shape} into "
                                 f"{_int64_tuple(shp, n, 1)}: the -1 is ambiguous when the "
                                 "other extents multiply to 0")
            if vol % known != 0:
                raise ValueError(f"cannot reshape shape {self.shape} (volume {vol}) into "
                                 f"{_int64_tuple(shp, n, 1)}: {vol} is not a multiple of {known}")
            shp[infer] = vol // known
            known = vol
        if known != vol:
            raise ValueError(f"cannot reshape shape {self.shape} (volume {vol}) into "
                             f"{_int64_tuple(shp, n, 1)} (volume {known})")
        if not _reshape_strides(&self.ext, n, shp, st):
            raise ValueError(
                f"cannot reshape shape {self.shape} with strides {self.strides} into shape "
                f"{_int64_tuple(shp, n, 1)} without copying")
        return _layout_from_arrays(n, shp, st, self.itemsize, self.slice_offset, False)

    def permuted(self, axes):
        """The layout with its dims reordered (numpy ``transpose``).

        Parameters
        ----------
        axes : sequence of int
            A permutation of ``range(ndim)`` (negative entries count from the end); result dim
            ``i`` is this layout's dim ``axes[i]``.

        Returns
        -------
        StridedLayout

        Raises
        ------
        ValueError
            If `axes` has the wrong length or repeats a dim (:class:`AxisError` for an entry
            out of range); the message names the shape and the axes.
        TypeError
            If an entry is not an integer.
        """
        cdef int perm[MAX_NDIM]
        cdef int64_t shp[MAX_NDIM]
        cdef int64_t st[MAX_NDIM]
        cdef bint seen[MAX_NDIM]
        cdef int n = self.ext.ndim, i
        cdef int64_t a
        axes = _axes_tuple(axes, "axes")
        if len(axes) != n:
            raise ValueError(f"cannot permute shape {self.shape} with axes {axes}: "
                             f"{len(axes)} axes for {n} dims")
        for i in range(n):
            seen[i] = False
        for i in range(n):
            a = _to_int64(axes[i], "axes entry")
            if a < -n or a >= n:
                raise AxisError(f"cannot permute shape {self.shape} with axes {axes}: axis {a} "
                                f"is out of range for {n} dims")
            perm[i] = <int> (a + n if a < 0 else a)
            if seen[perm[i]]:
                raise ValueError(f"cannot permute shape {self.shape} with axes {axes}: axis "
                                 f"{perm[i]} appears twice")
            seen[perm[i]] = True
        for i in range(n):
            shp[i] = self.ext.shape[perm[i]]
            st[i] = self.ext.strides[perm[i]]
        return _layout_from_arrays(n, shp, st, self.itemsize, self.slice_offset, False)

    def broadcast_to(self, shape):
        """The layout broadcast to `shape` by numpy's rules (new and stretched dims get stride 0).

        Parameters
        ----------
        shape : int or sequence of int
            Target extents, at least ``ndim`` of them; aligned at the right, each of this
            layout's extents must equal its target or be 1.

        Returns
        -------
        StridedLayout

        Raises
        ------
        ValueError
            If the shapes are not compatible.
        """
        cdef int64_t shp[MAX_NDIM]
        cdef int64_t st[MAX_NDIM]
        cdef int n = _parse_shape(shape, shp, "shape"), lead = n - self.ext.ndim, i
        if lead < 0:
            raise ValueError(f"cannot broadcast shape {self.shape} to {_int64_tuple(shp, n, 1)}: "
                             f"the target has fewer dimensions ({n}) than the layout "
                             f"({self.ext.ndim})")
        for i in range(n):
            if i < lead:
                st[i] = 0
            elif self.ext.shape[i - lead] == shp[i]:
                st[i] = self.ext.strides[i - lead]
            elif self.ext.shape[i - lead] == 1:
                st[i] = 0
            else:
                raise ValueError(f"cannot broadcast shape {self.shape} to "
                                 f"{_int64_tuple(shp, n, 1)}: dim {i - lead} has extent "
                                 f"{self.ext.shape[i - lead]} where the target has {shp[i]} "
                                 "(only extents of 1 stretch)")
        return _layout_from_arrays(n, shp, st, self.itemsize, self.slice_offset, True)

    def squeezed(self, axes=None):
        """The layout without dims of extent 1.

        Parameters
        ----------
        axes : int or sequence of int, optional
            Which dims to remove (each must have extent 1); default all of extent 1.

        Returns
        -------
        StridedLayout

        Raises
        ------
        ValueError
            If a named dim does not have extent 1 (:class:`AxisError` if out of range).
        """
        cdef int64_t shp[MAX_NDIM]
        cdef int64_t st[MAX_NDIM]
        cdef bint drop[MAX_NDIM]
        cdef int ax[MAX_NDIM]
        cdef int nd = self.ext.ndim, i, k, out = 0
        for i in range(nd):
            drop[i] = axes is None and self.ext.shape[i] == 1
        if axes is not None:
            k = _parse_axes(axes, nd, ax, "axes")
            for i in range(k):
                if self.ext.shape[ax[i]] != 1:
                    raise ValueError(f"cannot squeeze axis {ax[i]} of shape {self.shape}: "
                                     "its extent is not 1")
                drop[ax[i]] = True
        for i in range(nd):
            if not drop[i]:
                shp[out] = self.ext.shape[i]
                st[out] = self.ext.strides[i]
                out += 1
        return _layout_from_arrays(out, shp, st, self.itemsize, self.slice_offset, False)

    def unsqueezed(self, axes):
        """The layout with new dims of extent 1 inserted (numpy ``expand_dims``).

        Parameters
        ----------
        axes : int or sequence of int
            Positions of the new dims in the result (negative count from the result's end).

        Returns
        -------
        StridedLayout
            A new dim gets the stride that keeps a C-contiguous layout C-contiguous (the next
            dim's stride times its extent, or 1 when it is last).
        """
        cdef int64_t shp[MAX_NDIM]
        cdef int64_t st[MAX_NDIM]
        cdef bint new[MAX_NDIM]
        cdef int ax[MAX_NDIM]
        cdef int k, nd, i, src
        axes = _axes_tuple(axes, "axes")
        k = len(axes)
        nd = self.ext.ndim + k
        if nd > MAX_NDIM:
            raise ValueError(f"unsqueezing would give {nd} dims; at most {MAX_NDIM} are supported")
        _parse_axes(axes, nd, ax, "axes")
        for i in range(nd):
            new[i] = False
        for i in range(k):
            new[ax[i]] = True
        src = self.ext.ndim - 1
        for i in range(nd - 1, -1, -1):
            if new[i]:
                shp[i] = 1
                st[i] = st[i + 1] * shp[i + 1] if i + 1 < nd else 1
            else:
                shp[i] = self.ext.shape[src]
                st[i] = self.ext.strides[src]
                src -= 1
        return _layout_from_arrays(nd, shp, st, self.itemsize, self.slice_offset, True)

    def flattened(self, start=0, end=-1):
        """The layout with dims ``start`` through ``end`` (inclusive) merged into one dim.

        All or nothing: the named dims become exactly one dim, or the call raises.  To merge
        only what can be merged, use :meth:`merged`.

        Parameters
        ----------
        start, end : int, optional
            First and last dim to merge (negative count from the end); default all.  A 0-d
            layout flattens to shape ``(1,)``.

        Returns
        -------
        StridedLayout
            The merged dim has the product of the extents and the stride of the fastest of
            them whose extent is not 1; dims of extent 1 merge whatever their strides.

        Raises
        ------
        ValueError
            If the dims cannot be merged without a copy (they are not nested in C order:
            each stride the next one's times its extent) or ``start > end``.
        AxisError
            If ``start`` or ``end`` is out of range.

        Examples
        --------
        >>> StridedLayout.dense((2, 3, 4), 4).flattened(1).shape
        (2, 12)
        """
        cdef int64_t shp[MAX_NDIM]
        cdef int64_t st[MAX_NDIM]
        cdef int merges, n, s, e
        cdef uint64_t allowed = _range_mask(self.ext.ndim, start, end, &s, &e)
        n = _merge_extents(&self.ext, allowed, shp, st, &merges)
        if merges != e - s:
            raise ValueError(
                f"cannot merge dims {s}..{e} of shape {self.shape} with strides "
                f"{self.strides} into one without copying (merged() merges what it can)")
        if merges == 0 and self.ext.ndim > 0:
            return self
        return _layout_from_arrays(n, shp, st, self.itemsize, self.slice_offset, False)

    def merged(self, start=0, end=-1, mask=None):
        """The layout with every run of adjacent dims that can be merged, merged.

        The partial form of :meth:`flattened`: two neighbouring dims merge when stepping
        through them in C order is one stride (the slower stride equals the faster stride
        times its extent); the others stay apart, and nothing raises for the strides.  A layout
        that merges completely gives what ``flattened(start, end)`` gives.

        Parameters
        ----------
        start, end : int, optional
            Only dims ``start`` through ``end`` (inclusive; negative count from the end) may
            merge with each other; default all.
        mask : int, optional
            Bit ``i`` (``1 <= i < ndim``) set allows dim ``i`` to merge into the dim before it
            (bit 0 is ignored).  Combined with the range by AND.  Masks from
            :attr:`merge_mask` of layouts with the same shape, combined with ``&``, merge
            each of those layouts into the same shape.

        Returns
        -------
        StridedLayout
            At least 1-d (a 0-d layout gives shape ``(1,)``).  A merged dim has the product of
            its extents and the stride of its fastest dim whose extent is not 1.  Dims of
            extent 1 merge with their neighbours whatever their strides, and a layout with no
            elements merges every allowed pair.  This layout itself if nothing merges.

        Raises
        ------
        ValueError
            If ``start > end``, or ``mask`` is negative or has bits at ``ndim`` or above.
        AxisError
            If ``start`` or ``end`` is out of range.

        Notes
        -----
        ``cuda.core``'s ``StridedLayout.flattened(start_axis, end_axis, mask)`` merges this
        way too; ours keeps the name ``flattened`` for the all-or-nothing form (as numpy's and
        torch's ``flatten`` always give one dim).

        Examples
        --------
        >>> L = StridedLayout.dense((5, 1, 2, 4, 3), 4)[..., ::-2]
        >>> L.merged().shape, L.merged().strides
        ((40, 2), (3, -2))
        """
        cdef int s, e
        cdef uint64_t allowed = _range_mask(self.ext.ndim, start, end, &s, &e)
        if mask is not None:
            allowed &= _parse_mask(mask, self.ext.ndim)
        return layout_merged(self, allowed)

    @property
    def merge_mask(self):
        """int: Which dims :meth:`merged` merges into the dim before them (bit ``i`` = dim ``i``).

        Bit ``i`` (``1 <= i < ndim``) is set when dim ``i`` can merge into the group of dims
        before it: its extent is 1, every dim before it has extent 1, or the stride of the
        nearest earlier dim of extent other than 1 equals ``stride[i] * extent[i]``.  Every
        bit ``1..ndim-1`` is set for a layout with no elements.  A set bit stays mergeable
        under any narrower mask, so ``a.merge_mask & b.merge_mask`` merges ``a`` and ``b``
        (same ndim) into the same shape.
        """
        return extents_merge_mask(&self.ext)

    def to_dense(self, order="C"):
        """A dense layout with this shape and itemsize.

        Parameters
        ----------
        order : {"C", "F", "K"} or sequence of int, optional
            As :meth:`dense`; "K" keeps this layout's :attr:`stride_order`.

        Returns
        -------
        StridedLayout
            With ``slice_offset`` 0.
        """
        return _dense_like(self, order)

    def repacked(self, new_itemsize, data_ptr=0, axis=-1, keep_dim=True):
        """The same bytes seen as elements of another size (e.g. float32 pairs as complex64).

        Dim ``axis`` is re-cut: it must be contiguous (stride 1, or extent 1) and hold a whole
        number of new elements (``extent * itemsize`` a multiple of `new_itemsize`).  Every
        other stride in bytes, and ``slice_offset`` in bytes, must be a multiple of
        `new_itemsize`; strides of other dims of extent 1 do not matter and are rounded down.
        Any size works, not only multiples or divisors of ``itemsize`` (numpy's ``view`` needs
        a divisor when shrinking).

        Parameters
        ----------
        new_itemsize : int
            Bytes per new element, > 0.
        data_ptr : int, optional
            The address ``slice_offset`` counts from; when given, it must be a multiple of
            `new_itemsize` so that every new element is aligned.  Default 0: no requirement.
        axis : int, optional
            The dim to re-cut (negative counts from the end); default the last.
        keep_dim : bool, optional
            False drops `axis` from the result when its new extent is 1 (e.g. four float32
            as one 16-byte vector).  Default True.

        Returns
        -------
        StridedLayout
            This layout itself when `new_itemsize` equals ``itemsize``; otherwise `axis`'s
            extent scaled by ``itemsize / new_itemsize`` with stride 1, and ``slice_offset``
            scaled by the same factor.  A layout with no elements repacks whatever its strides.

        Raises
        ------
        ValueError
            If the layout cannot be seen with the new itemsize (including any itemsize change
            of a 0-d layout: unsqueeze it first) or `data_ptr` is not aligned.
        AxisError
            If `axis` is out of range.

        Examples
        --------
        >>> L = StridedLayout.dense((5, 4), 4)
        >>> L.repacked(8).shape, L.repacked(16, keep_dim=False).shape, L.repacked(2).shape
        ((5, 2), (5,), (5, 8))
        """
        return layout_repacked(self, _to_int64(new_itemsize, "new_itemsize"),
                               0 if data_ptr is None else _to_address(data_ptr),
                               _to_int64(axis, "axis"), bool(keep_dim))

    def max_compatible_itemsize(self, max_itemsize=16, data_ptr=0, axis=-1):
        """The largest divisor of `max_itemsize` that :meth:`repacked` accepts for this layout.

        Typically the widest vector load a kernel may use on memory with this layout: with
        the default 16 and power-of-two itemsizes the answer is a power of two.

        Parameters
        ----------
        max_itemsize : int, optional
            Upper bound, >= ``itemsize``; default 16.
        data_ptr : int, optional
            The address ``slice_offset`` counts from; the answer also divides it.  Default 0:
            no requirement.
        axis : int, optional
            The dim that would be repacked; default the last.

        Returns
        -------
        int
            ``gcd`` of `max_itemsize`, `data_ptr`, the bytes of `axis`, ``slice_offset`` in
            bytes and the strides in bytes of the other dims of extent other than 1; it may be
            smaller than ``itemsize`` (e.g. a data pointer aligned to less).  ``itemsize``
            when `axis` is not contiguous or the layout has no elements (nothing to repack).

        Raises
        ------
        ValueError
            If `max_itemsize` is not positive or is less than ``itemsize``.
        AxisError
            If `axis` is out of range (a 0-d layout has none).

        Examples
        --------
        >>> StridedLayout.dense((16, 6), 2).max_compatible_itemsize()
        4
        >>> StridedLayout.dense((16, 6), 2).max_compatible_itemsize(axis=0)   # stride 6
        2
        """
        return layout_max_compatible_itemsize(
            self, _to_int64(max_itemsize, "max_itemsize"),
            0 if data_ptr is None else _to_address(data_ptr), _to_int64(axis, "axis"))

    # --- value semantics -----------------------------------------------------------------------

    def __eq__(self, other):
        cdef StridedLayout o
        cdef int i
        if not isinstance(other, StridedLayout):
            return NotImplemented
        o = <StridedLayout> other
        if (o.itemsize != self.itemsize or o.slice_offset != self.slice_offset
                or o.ext.ndim != self.ext.ndim):
            return False
        for i in range(self.ext.ndim):
            if (o.ext.shape[i] != self.ext.shape[i]
                    or o.ext.strides[i] != self.ext.strides[i]):
                return False
        return True

    def __hash__(self):
        if self._hash == 0:
            self._hash = hash((self.shape, self.strides, self.itemsize, self.slice_offset))
        return self._hash

    def __repr__(self):
        extra = f", slice_offset={self.slice_offset}" if self.slice_offset else ""
        return (f"StridedLayout(shape={self.shape}, strides={self.strides}, "
                f"itemsize={self.itemsize}{extra})")

    def __reduce__(self):
        return (StridedLayout, (self.shape, self.strides, self.itemsize, self.slice_offset))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self
