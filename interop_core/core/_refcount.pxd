# Reference-count increments as wide as Py_DECREF's reads, in every module that cimports this
# file (each compiled module of the core does, as its first cimport).
#
# Since immortal objects (Python 3.12), Py_INCREF writes only the low 32 bits of `ob_refcnt`
# while Py_DECREF reads all 64.  A 64-bit load that follows a 32-bit store to the same address
# before the store has reached the L1 cache cannot take its value from the store buffer and waits
# for it.  Our hot paths increment and release the same objects a few instructions apart: Cython's
# `return v` for a local `v` is exactly that (an increment for the caller, then the local's
# release), and a view keeps its owner with an increment that the caller's release of its
# argument follows.  Timer samples of a view(numpy) loop (benchmarks/profile_view.py) put 18-28 %
# of the call on the two loads right after such returns on the H100 host (Intel Xeon, family 6
# model 207, Python 3.12), 16 % on the dev VM (AMD EPYC, Python 3.12).
#
# Here Py_INCREF, Py_XINCREF, Py_NewRef and Py_XNewRef load and store all 64 bits, so the release
# that follows reads its value from the store buffer.  They skip immortal objects with
# Py_DECREF's own test (the low 32 bits negative), as Py_INCREF leaves them unwritten: the counts
# are the ones CPython's functions would leave.  Where the count's layout is another
# (before 3.12, free-threaded builds, 32-bit platforms), may change (3.14 on), or CPython keeps
# totals or statistics of reference counts (debug and stats builds), CPython's own functions stay.

cdef extern from *:
    """
    #if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030E0000 && SIZEOF_VOID_P == 8 \\
        && !defined(Py_GIL_DISABLED) && !defined(Py_REF_DEBUG) && !defined(Py_STATS) \\
        && !defined(Py_LIMITED_API)
    static inline void ic_incref_wide(PyObject *op) {
        Py_ssize_t count = op->ob_refcnt;
        if ((int32_t) count >= 0) {
            op->ob_refcnt = count + 1;
        }
    }
    static inline void ic_xincref_wide(PyObject *op) {
        if (op != NULL) {
            ic_incref_wide(op);
        }
    }
    static inline PyObject *ic_newref_wide(PyObject *op) {
        ic_incref_wide(op);
        return op;
    }
    static inline PyObject *ic_xnewref_wide(PyObject *op) {
        ic_xincref_wide(op);
        return op;
    }
    #undef Py_INCREF
    #define Py_INCREF(op) ic_incref_wide(_PyObject_CAST(op))
    #undef Py_XINCREF
    #define Py_XINCREF(op) ic_xincref_wide(_PyObject_CAST(op))
    #undef Py_NewRef
    #define Py_NewRef(op) ic_newref_wide(_PyObject_CAST(op))
    #undef Py_XNewRef
    #define Py_XNewRef(op) ic_xnewref_wide(_PyObject_CAST(op))
    #endif
    """
    pass
