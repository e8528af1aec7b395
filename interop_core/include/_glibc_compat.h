/* Private to interop-core's build (setup.py includes it first in every module; not part of the
 * public C ABI in interop_core.h).
 *
 * glibc 2.34 moved dlopen and dlsym from libdl into libc under a new symbol version, GLIBC_2.34.
 * A module linked on such a glibc asks for that version and so loads only on glibc >= 2.34
 * (wheels tagged manylinux_2_34).  The functions keep their first versions as well, which every
 * glibc has (in libc from 2.34, in libdl.so.2 before: setup.py links that into the modules that
 * call them), so bind the calls to those and the modules load on any glibc the wheel's tag
 * admits.  Nothing changes in behaviour: both versions are the same function.
 */
#ifndef INTEROP_CORE_GLIBC_COMPAT_H
#define INTEROP_CORE_GLIBC_COMPAT_H

#if defined(__linux__)
#include <features.h> /* defines __GLIBC__ on glibc; this header is included before any other */
#endif

#if defined(__GLIBC__) && defined(__GLIBC_PREREQ)
#if __GLIBC_PREREQ(2, 34)
#if defined(__x86_64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
#endif
#endif
#endif

#endif /* INTEROP_CORE_GLIBC_COMPAT_H */
