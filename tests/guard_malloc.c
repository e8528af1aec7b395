/* A malloc that puts blocks against an inaccessible page, for tests of code that reads raw
 * object memory (tests/test_guarded_reads.py).
 *
 * Preloaded (LD_PRELOAD) into a test process, it passes every call to glibc until
 * guard_malloc_arm(lo, hi) is called; from then on each malloc / calloc of lo..hi bytes gets a
 * mapping of its own whose block ends exactly where a PROT_NONE page begins (blocks are 16-byte
 * aligned, so a size that is not a multiple of 16 leaves up to 15 bytes of slack), and a read
 * past the block's end faults at once instead of reading the neighbouring allocation.
 * guard_malloc_disarm() stops guarding new blocks; guarded blocks stay valid until freed.
 * Aligned allocations (posix_memalign, memalign, aligned_alloc) are never guarded.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *ptr, size_t size);
extern void __libc_free(void *ptr);

#define GUARD_MAGIC 0x6775617264656421ULL

typedef struct {
    uint64_t magic;     /* GUARD_MAGIC: this page starts a guarded mapping */
    void *block;        /* the block handed out (checked on free, with the magic) */
    size_t mapped;      /* bytes mapped, guard page included */
    size_t size;        /* bytes asked for */
} guard_header;

static atomic_size_t guard_lo, guard_hi;     /* 0, 0: disarmed */
static atomic_size_t guard_count;            /* blocks guarded so far */

void guard_malloc_arm(size_t lo, size_t hi) {
    atomic_store(&guard_lo, lo);
    atomic_store(&guard_hi, hi);
}

void guard_malloc_disarm(void) {
    atomic_store(&guard_hi, 0);
}

size_t guard_malloc_count(void) {
    return atomic_load(&guard_count);
}

static size_t page_size(void) {
    static size_t cached;
    if (cached == 0) cached = (size_t) sysconf(_SC_PAGESIZE);
    return cached;
}

static int wanted(size_t size) {
    size_t hi = atomic_load(&guard_hi);
    return hi != 0 && size >= atomic_load(&guard_lo) && size <= hi
           && size + sizeof(guard_header) + 16 <= page_size();
}

static void *guarded(size_t size) {
    size_t page = page_size();
    size_t rounded = (size + 15) & ~(size_t) 15;
    char *map = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return NULL;
    if (mprotect(map + page, page, PROT_NONE) != 0) {
        munmap(map, 2 * page);
        return NULL;
    }
    guard_header *header = (guard_header *) map;
    header->magic = GUARD_MAGIC;
    header->block = map + page - rounded;
    header->mapped = 2 * page;
    header->size = size;
    atomic_fetch_add(&guard_count, 1);
    return header->block;
}

static guard_header *header_of(void *ptr) {
    /* Every guarded block lies in the first page of its mapping, after the header; for any
     * other heap block this reads the start of a mapped page, which never holds the magic and
     * the block's own address together. */
    guard_header *header = (guard_header *) ((uintptr_t) ptr & ~(uintptr_t) (page_size() - 1));
    if (ptr == NULL || (void *) header == ptr) return NULL;
    return header->magic == GUARD_MAGIC && header->block == ptr ? header : NULL;
}

void *malloc(size_t size) {
    if (wanted(size)) {
        void *block = guarded(size);
        if (block != NULL) return block;
    }
    return __libc_malloc(size);
}

void *calloc(size_t count, size_t size) {
    if (size != 0 && count <= SIZE_MAX / size && wanted(count * size)) {
        void *block = guarded(count * size);      /* fresh mappings are zeroed */
        if (block != NULL) return block;
    }
    return __libc_calloc(count, size);
}

void free(void *ptr) {
    guard_header *header = header_of(ptr);
    if (header == NULL) {
        __libc_free(ptr);
        return;
    }
    header->magic = 0;
    munmap(header, header->mapped);
}

void *realloc(void *ptr, size_t size) {
    guard_header *header = header_of(ptr);
    if (header == NULL) return __libc_realloc(ptr, size);
    void *moved = malloc(size);
    if (moved == NULL) return NULL;
    memcpy(moved, ptr, header->size < size ? header->size : size);
    free(ptr);
    return moved;
}

size_t malloc_usable_size(void *ptr) {
    static size_t (*next)(void *);
    guard_header *header = header_of(ptr);
    if (header != NULL) return header->size;
    if (next == NULL) next = (size_t (*)(void *)) dlsym(RTLD_NEXT, "malloc_usable_size");
    return next(ptr);
}
