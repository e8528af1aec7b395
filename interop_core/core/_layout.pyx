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
from cpython.long cimport PyLong_AsLongLong, PyLong_CheckExact
from cpython.number cimport PyNumber_Index
from cpython.object cimport PyObject
from cpython.sequence cimport PySequence_Fast, PySequence_Fast_GET_SIZE, PySequence_Fast_ITEMS
from cpython.tuple cimport PyTuple_Check, PyTuple_New
from libc.stdint cimport INT64_MAX, INT64_MIN, int64_t
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


cdef void _stride_order(const Extents* e, int* perm) noexcept nogil:
    """Dims sorted by |stride| descending; stable, so ties keep their index order."""
    cdef int i, j, d
    cdef int64_t s
    for i in range(e.ndim):
        d = i
        s = _abs64(e.strides[i])
        j = i
        while j > 0 and _abs64(e.strides[perm[j - 1]]) < s:
            perm[j] = perm[j - 1]
            j -= 1
        perm[j] = d


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
    if not _has_zero_extent(e):
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
            # Only a 1-long slice with a huge step can overflow, and its stride is irrelevant.
            if _mul_ovf(stride, step, &st[out]):
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


cdef StridedLayout _dense_like(StridedLayout like, object order):
    cdef int64_t st[MAX_NDIM]
    cdef int perm[MAX_NDIM]
    _parse_order(order, &like.ext, like.ext.ndim, perm, True)
    _dense_strides(like.ext.ndim, like.ext.shape, perm, st)
    return _layout_from_arrays(like.ext.ndim, like.ext.shape, st, like.itemsize, 0, True)


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

        Ties keep index order, so a C-contiguous layout gives ``(0, 1, ..., ndim-1)``.  This is
        the form :meth:`dense` takes as ``order``.
        """
        cdef int perm[MAX_NDIM]
        cdef int i
        _stride_order(&self.ext, perm)
        return tuple([perm[i] for i in range(self.ext.ndim)])

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
            For an int out of range, too many indices, or more than one Ellipsis.
        TypeError
            For any other kind of index (arrays, lists, bools, floats).
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
                    raise ValueError("can only specify one unknown dimension (-1)")
                infer = i
            elif shp[i] < 0:
                raise ValueError(f"shape entries must be >= 0 or -1, got {_int64_tuple(shp, n, 1)}")
            elif _mul_ovf(known, shp[i], &known):
                raise ValueError(f"the volume of shape {_int64_tuple(shp, n, 1)} overflows int64")
        if infer >= 0:
            if known == 0 or vol % known != 0:
                raise ValueError(f"cannot reshape a layout of volume {vol} into shape "
                                 f"{_int64_tuple(shp, n, 1)}")
            shp[infer] = vol // known
            known = vol
        if known != vol:
            raise ValueError(f"cannot reshape a layout of volume {vol} into shape "
                             f"{_int64_tuple(shp, n, 1)}")
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
        """
        cdef int perm[MAX_NDIM]
        cdef int64_t shp[MAX_NDIM]
        cdef int64_t st[MAX_NDIM]
        cdef int n = self.ext.ndim, i
        if _parse_axes(axes, n, perm, "axes") != n:
            raise ValueError(f"axes {axes!r} is not a permutation of range({n})")
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
                             "the target has fewer dimensions")
        for i in range(n):
            if i < lead:
                st[i] = 0
            elif self.ext.shape[i - lead] == shp[i]:
                st[i] = self.ext.strides[i - lead]
            elif self.ext.shape[i - lead] == 1:
                st[i] = 0
            else:
                raise ValueError(f"cannot broadcast shape {self.shape} to "
                                 f"{_int64_tuple(shp, n, 1)}")
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
        """The layout with dims ``start`` through ``end`` (inclusive) merged into one.

        Parameters
        ----------
        start, end : int, optional
            First and last dim to merge (negative count from the end); default all.  A 0-d
            layout flattens to shape ``(1,)``.

        Returns
        -------
        StridedLayout

        Raises
        ------
        ValueError
            If the dims cannot be merged without a copy (they are not nested in C order) or
            ``start > end``.
        """
        cdef int64_t shp[MAX_NDIM]
        cdef int64_t st[MAX_NDIM]
        cdef int nd = self.ext.ndim, s, e, i, out = 0, prev = -1
        cdef int64_t ext = 1, stride
        if nd == 0:
            shp[0] = 1
            st[0] = 1
            return _layout_from_arrays(1, shp, st, self.itemsize, self.slice_offset, False)
        s = _normalize_axis(start, nd, "start")
        e = _normalize_axis(end, nd, "end")
        if s > e:
            raise ValueError(f"start ({s}) must not come after end ({e})")
        for i in range(s, e + 1):
            ext *= self.ext.shape[i]
        stride = self.ext.strides[e]
        if not _has_zero_extent(&self.ext):  # with no elements, any dims merge
            for i in range(s, e + 1):
                if self.ext.shape[i] == 1:
                    continue
                if prev >= 0 and self.ext.strides[prev] != (self.ext.strides[i]
                                                            * self.ext.shape[i]):
                    raise ValueError(
                        f"cannot merge dims {s}..{e} of shape {self.shape} with strides "
                        f"{self.strides} without copying")
                prev = i
            if prev >= 0:
                stride = self.ext.strides[prev]
        for i in range(s):
            shp[out] = self.ext.shape[i]
            st[out] = self.ext.strides[i]
            out += 1
        shp[out] = ext
        st[out] = stride
        out += 1
        for i in range(e + 1, nd):
            shp[out] = self.ext.shape[i]
            st[out] = self.ext.strides[i]
            out += 1
        return _layout_from_arrays(out, shp, st, self.itemsize, self.slice_offset, False)

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

    def repacked(self, new_itemsize):
        """The same bytes seen as elements of another size (e.g. float32 pairs as complex64).

        The last dim is re-cut: its bytes (extent * itemsize) must be a whole number of new
        elements, so it must be contiguous (stride 1, or extent 1).  Every other stride, in
        bytes, and the slice offset, in bytes, must be multiples of the new itemsize.  Strides of
        other extent-1 dims do not matter and are rounded down.

        Parameters
        ----------
        new_itemsize : int
            Bytes per new element, > 0.

        Returns
        -------
        StridedLayout
            Same ndim; the last extent scaled by ``itemsize / new_itemsize``.

        Raises
        ------
        ValueError
            If the layout cannot be seen with the new itemsize (including any itemsize change
            of a 0-d layout: unsqueeze it first).
        """
        cdef int64_t shp[MAX_NDIM]
        cdef int64_t st[MAX_NDIM]
        cdef int64_t isz = _to_int64(new_itemsize, "new_itemsize"), old = self.itemsize, b, b2
        cdef int nd = self.ext.ndim, i, last = nd - 1
        if isz <= 0:
            raise ValueError(f"new_itemsize must be > 0, got {isz}")
        if isz == old:
            return self
        if nd == 0:
            raise ValueError(f"cannot repack a 0-d layout from itemsize {old} to {isz}; "
                             "unsqueeze it to 1-d first")
        if self.ext.shape[last] != 1 and self.ext.strides[last] != 1:
            raise ValueError(f"cannot repack from itemsize {old} to {isz}: the last dim must be "
                             f"contiguous, but its stride is {self.ext.strides[last]}")
        b = self.ext.shape[last] * old
        if b % isz != 0:
            raise ValueError(f"cannot repack from itemsize {old} to {isz}: the last dim holds "
                             f"{b} bytes, not a multiple of {isz}")
        if (self.slice_offset * old) % isz != 0:
            raise ValueError(f"cannot repack from itemsize {old} to {isz}: slice_offset "
                             f"{self.slice_offset} is {self.slice_offset * old} bytes, not a "
                             f"multiple of {isz}")
        for i in range(last):
            shp[i] = self.ext.shape[i]
            if shp[i] == 1:
                st[i] = 0 if _mul_ovf(self.ext.strides[i], old, &b2) else _floordiv(b2, isz)
            elif (self.ext.strides[i] * old) % isz != 0:
                raise ValueError(
                    f"cannot repack from itemsize {old} to {isz}: dim {i} has a stride of "
                    f"{self.ext.strides[i] * old} bytes, not a multiple of {isz}")
            else:
                st[i] = (self.ext.strides[i] * old) // isz
        shp[last] = b // isz
        st[last] = 1
        return _layout_from_arrays(nd, shp, st, isz, (self.slice_offset * old) // isz, True)

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
