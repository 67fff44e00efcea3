/*
 * A stand-in for the ThreadSanitizer runtime, for native profilers built with
 * -fsanitize=thread and hosted by simclr.
 *
 * The compiler turns every atomic operation of such a library into a call to
 * __tsan_atomic<bits>_<operation>, and every plain load and store, function entry and exit into
 * calls of their own. This library defines those entry points under the name the compilers link
 * against (its soname is set when it is built: libtsan.so.2 for GCC 12 and later, libtsan.so.0
 * before), so a library built with -fsanitize=thread loads into simclr without the real runtime,
 * which cannot be loaded into a process that did not start with it.
 *
 * Each atomic operation happens at once, sequentially consistent whatever order the caller
 * asked for, and then reports to simclr_tsan_access (set by the host once loaded): the address,
 * the value the operation read, and whether it changed memory. The host makes that a scheduling
 * point. Plain loads and stores, function entries and exits are not scheduling points: this is
 * no data-race detector. It also defines what the real runtime defines for C++ code linked
 * against it: operator new and delete, on malloc and free.
 */
#define _POSIX_C_SOURCE 200112L /* posix_memalign */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Where an atomic operation reports: its address, the value it read, whether it wrote a
   different value. A NULL address is a fence or an annotation (nothing read). */
typedef void (*simclr_access_fn)(const volatile void *address, uint64_t seen, int changed);

/* Set by the host once this library is loaded; NULL until then. */
simclr_access_fn simclr_tsan_access;

#define ORDER __ATOMIC_SEQ_CST

static void reported(const volatile void *address, uint64_t seen, int changed) {
    simclr_access_fn access = __atomic_load_n(&simclr_tsan_access, __ATOMIC_ACQUIRE);
    if (access) access(address, seen, changed);
}

/* One read-modify-write operation: the previous value is read and `next` written. */
#define RMW(bits, T, op, next)                                                        \
    T __tsan_atomic##bits##_##op(volatile T *a, T v, int mo) {                        \
        T old = __atomic_load_n(a, ORDER);                                            \
        while (!__atomic_compare_exchange_n(a, &old, (T)(next), 0, ORDER, ORDER)) {   \
        }                                                                             \
        reported(a, (uint64_t)old, (T)(next) != old);                                 \
        return old;                                                                   \
    }

/* Every operation on one width. A weak compare-exchange never fails spuriously here. */
#define ATOMICS(bits, T)                                                                       \
    T __tsan_atomic##bits##_load(const volatile T *a, int mo) {                                \
        T v = __atomic_load_n(a, ORDER);                                                       \
        reported(a, (uint64_t)v, 0);                                                           \
        return v;                                                                              \
    }                                                                                          \
    void __tsan_atomic##bits##_store(volatile T *a, T v, int mo) {                             \
        T old = __atomic_exchange_n(a, v, ORDER);                                              \
        reported(a, (uint64_t)v, old != v);                                                    \
    }                                                                                          \
    RMW(bits, T, exchange, v)                                                                  \
    RMW(bits, T, fetch_add, old + v)                                                           \
    RMW(bits, T, fetch_sub, old - v)                                                           \
    RMW(bits, T, fetch_and, old &v)                                                            \
    RMW(bits, T, fetch_or, old | v)                                                            \
    RMW(bits, T, fetch_xor, old ^ v)                                                           \
    RMW(bits, T, fetch_nand, ~(old & v))                                                       \
    static int cas##bits(volatile T *a, T *expected, T v) {                                    \
        T wanted = *expected;                                                                  \
        int done = __atomic_compare_exchange_n(a, expected, v, 0, ORDER, ORDER);               \
        reported(a, (uint64_t)*expected, done && wanted != v);                                 \
        return done;                                                                           \
    }                                                                                          \
    int __tsan_atomic##bits##_compare_exchange_strong(volatile T *a, T *c, T v, int mo, int f) { \
        return cas##bits(a, c, v);                                                             \
    }                                                                                          \
    int __tsan_atomic##bits##_compare_exchange_weak(volatile T *a, T *c, T v, int mo, int f) { \
        return cas##bits(a, c, v);                                                             \
    }                                                                                          \
    T __tsan_atomic##bits##_compare_exchange_val(volatile T *a, T c, T v, int mo, int f) {     \
        cas##bits(a, &c, v);                                                                   \
        return c;                                                                              \
    }

ATOMICS(8, uint8_t)
ATOMICS(16, uint16_t)
ATOMICS(32, uint32_t)
ATOMICS(64, uint64_t)

void __tsan_atomic_thread_fence(int mo) {
    __atomic_thread_fence(ORDER);
    reported(NULL, 0, 0);
}

void __tsan_atomic_signal_fence(int mo) { __atomic_signal_fence(ORDER); }

/* Hand-written synchronization annotations: scheduling points. */
void __tsan_acquire(void *address) {
    reported(NULL, 0, 0);
}

void __tsan_release(void *address) {
    reported(NULL, 0, 0);
}

/* The rest of the compiler's instrumentation: nothing to do. */
void __tsan_init(void) {}
void __tsan_func_entry(void *caller) {}
void __tsan_func_exit(void) {}
void __tsan_vptr_update(void **slot, void *value) {}
void __tsan_vptr_read(void **slot) {}
void __tsan_read_range(void *address, size_t size) {}
void __tsan_write_range(void *address, size_t size) {}

#define PLAIN(name) \
    void __tsan_##name(void *address) {}
#define PLAIN_SIZES(kind) PLAIN(kind##1) PLAIN(kind##2) PLAIN(kind##4) PLAIN(kind##8) PLAIN(kind##16)
PLAIN_SIZES(read)
PLAIN_SIZES(write)
PLAIN_SIZES(volatile_read)
PLAIN_SIZES(volatile_write)
PLAIN(unaligned_read2)
PLAIN(unaligned_read4)
PLAIN(unaligned_read8)
PLAIN(unaligned_read16)
PLAIN(unaligned_write2)
PLAIN(unaligned_write4)
PLAIN(unaligned_write8)
PLAIN(unaligned_write16)

/* The C++ allocation functions: the real runtime defines them, so a library linked against it
   (even with a static libstdc++) takes them from there. */
#define ALLOCATE(name, ...)                           \
    void *name(size_t size, ##__VA_ARGS__) {          \
        void *p = malloc(size ? size : 1);            \
        if (!p) abort();                              \
        return p;                                     \
    }
#define ALLOCATE_ALIGNED(name, ...)                                      \
    void *name(size_t size, size_t align, ##__VA_ARGS__) {               \
        void *p = NULL;                                                  \
        if (align < sizeof(void *)) align = sizeof(void *);              \
        if (posix_memalign(&p, align, size ? size : 1) != 0) abort();    \
        return p;                                                        \
    }
#define FREE(name, ...) \
    void name(void *p, ##__VA_ARGS__) { free(p); }

/* operator new, new[]: plain, nothrow, aligned, aligned nothrow. */
ALLOCATE(_Znwm)
ALLOCATE(_Znam)
ALLOCATE(_ZnwmRKSt9nothrow_t, const void *nothrow)
ALLOCATE(_ZnamRKSt9nothrow_t, const void *nothrow)
ALLOCATE_ALIGNED(_ZnwmSt11align_val_t)
ALLOCATE_ALIGNED(_ZnamSt11align_val_t)
ALLOCATE_ALIGNED(_ZnwmSt11align_val_tRKSt9nothrow_t, const void *nothrow)
ALLOCATE_ALIGNED(_ZnamSt11align_val_tRKSt9nothrow_t, const void *nothrow)
/* operator delete, delete[]: plain, sized, nothrow, aligned, sized aligned, aligned nothrow. */
FREE(_ZdlPv)
FREE(_ZdaPv)
FREE(_ZdlPvm, size_t size)
FREE(_ZdaPvm, size_t size)
FREE(_ZdlPvRKSt9nothrow_t, const void *nothrow)
FREE(_ZdaPvRKSt9nothrow_t, const void *nothrow)
FREE(_ZdlPvSt11align_val_t, size_t align)
FREE(_ZdaPvSt11align_val_t, size_t align)
FREE(_ZdlPvmSt11align_val_t, size_t size, size_t align)
FREE(_ZdaPvmSt11align_val_t, size_t size, size_t align)
FREE(_ZdlPvSt11align_val_tRKSt9nothrow_t, size_t align, const void *nothrow)
FREE(_ZdaPvSt11align_val_tRKSt9nothrow_t, size_t align, const void *nothrow)

/* Memory intrinsics, as Clang instruments them. */
void *__tsan_memcpy(void *to, const void *from, size_t size) { return memcpy(to, from, size); }
void *__tsan_memmove(void *to, const void *from, size_t size) { return memmove(to, from, size); }
void *__tsan_memset(void *to, int byte, size_t size) { return memset(to, byte, size); }
