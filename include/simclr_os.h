/* simclr_os.h: the operating system a hosted profiler library sees on the simulated threads
 * of a running process, for samplers designed for Windows (SuspendThread, GetThreadContext,
 * ResumeThread) run under simclr on Linux.
 *
 * The ICorProfilerInfo object simclr hands to Initialize answers QueryInterface for
 * IID_ISimclrOs with an ISimclrOs. Each of its methods is the running process's own: a
 * suspension completes only when GetThreadContext returns, a CONTEXT is the simulated
 * thread's registers (the x64 CONTEXT, 1232 bytes), stack reads are checked against the
 * thread's stack, and every rule simclr checks for samplers applies (locks while a thread is
 * suspended, walks after ThreadDestroyed, suspend counts). Called from a thread that is not
 * one of the process's simulated threads, every method fails.
 *
 * Threads are named by their OS thread id (what ThreadAssignedToOSThread and GetThreadInfo
 * give). With SIMCLR_OS_WINDOWS_NAMES defined before including this file, the Windows
 * functions a sampler calls are defined over simclr_os_attach's object: a HANDLE is the
 * thread id (OpenThread), CloseHandle does nothing. C11 or C++. */
#ifndef SIMCLR_OS_H
#define SIMCLR_OS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* {5E1C1A0A-0C5E-4D0E-9A1B-51C0FFEE0001} */
#define SIMCLR_IID_ISIMCLR_OS_INIT {0x5E1C1A0A, 0x0C5E, 0x4D0E, {0x9A, 0x1B, 0x51, 0xC0, 0xFF, 0xEE, 0x00, 0x01}}

typedef struct simclr_guid { uint32_t d1; uint16_t d2, d3; uint8_t d4[8]; } simclr_guid;
typedef struct ISimclrOs ISimclrOs;

typedef struct ISimclrOsVtbl {
    int32_t (*QueryInterface)(ISimclrOs *self, const simclr_guid *iid, void **out);
    uint32_t (*AddRef)(ISimclrOs *self);
    uint32_t (*Release)(ISimclrOs *self);
    /* The calling simulated thread's OS thread id (0 outside the process). */
    uint32_t (*CurrentThreadId)(ISimclrOs *self);
    /* The thread's previous suspend count, or -1. */
    int32_t (*SuspendThread)(ISimclrOs *self, uint32_t thread);
    /* The thread's previous suspend count, or -1. */
    int32_t (*ResumeThread)(ISimclrOs *self, uint32_t thread);
    /* 1 with the thread's registers in `context` (a whole 1232-byte x64 CONTEXT), or 0. */
    int32_t (*GetThreadContext)(ISimclrOs *self, uint32_t thread, void *context);
    /* Writes up to `capacity` thread ids; returns how many threads there are. */
    uint32_t (*EnumThreads)(ISimclrOs *self, uint32_t *ids, uint32_t capacity);
    /* 1 with the thread's stack as [limit, base), or 0. */
    int32_t (*GetStackBounds)(ISimclrOs *self, uint32_t thread, uint64_t *limit, uint64_t *base);
    /* 1 with the 8-byte word at `address` of the thread's stack, or 0 outside it. */
    int32_t (*ReadStack)(ISimclrOs *self, uint32_t thread, uint64_t address, uint64_t *value);
    /* Names the mutex, read-write lock, condition variable, semaphore or once-control at
     * `object` in every report and timeline ("map lock"): call it before the object's first
     * use. Unnamed, an object is named by its symbol when it lies in the library's data
     * (g_registry_mutex, TeamSampler::instance+0x40), else by the function that first took
     * it. 1, or 0 for a NULL argument. */
    int32_t (*NameObject)(ISimclrOs *self, const void *object, const char *name);
} ISimclrOsVtbl;

struct ISimclrOs { const ISimclrOsVtbl *vtbl; };

#ifdef SIMCLR_OS_WINDOWS_NAMES
typedef void *HANDLE;
typedef uint32_t DWORD;
typedef int BOOL;

/* The ISimclrOs the Windows functions below use. */
static ISimclrOs *simclr_os;

/* Asks `info` (the ICorProfilerInfo object Initialize got, as its first field is its vtable)
 * for the ISimclrOs; returns 1 when it answered. */
static inline int simclr_os_attach(void *info) {
    typedef int32_t (*QueryInterface)(void *self, const simclr_guid *iid, void **out);
    static const simclr_guid iid = SIMCLR_IID_ISIMCLR_OS_INIT;
    QueryInterface qi = (QueryInterface)(*(void ***)info)[0];
    return qi(info, &iid, (void **)&simclr_os) == 0 && simclr_os != 0;
}

static inline HANDLE OpenThread(DWORD access, BOOL inherit, DWORD thread) {
    (void)access; (void)inherit;
    return (HANDLE)(uintptr_t)thread;
}
static inline BOOL CloseHandle(HANDLE handle) { (void)handle; return 1; }
static inline DWORD GetCurrentThreadId(void) { return simclr_os->vtbl->CurrentThreadId(simclr_os); }
static inline DWORD SuspendThread(HANDLE thread) {
    return (DWORD)simclr_os->vtbl->SuspendThread(simclr_os, (uint32_t)(uintptr_t)thread);
}
static inline DWORD ResumeThread(HANDLE thread) {
    return (DWORD)simclr_os->vtbl->ResumeThread(simclr_os, (uint32_t)(uintptr_t)thread);
}
/* `context` points at a whole x64 CONTEXT (1232 bytes); its flags are not read. */
static inline BOOL GetThreadContext(HANDLE thread, void *context) {
    return simclr_os->vtbl->GetThreadContext(simclr_os, (uint32_t)(uintptr_t)thread, context);
}
#endif

#ifdef __cplusplus
}
#endif

#endif
