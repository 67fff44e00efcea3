/* confprof.c: the lane's conformance profiler for the Windows runtime (x64 `confprof.dll`, built
 * with mingw-w64). It is the Windows build of what conformance/profiler (Rust) is on Linux: the
 * same P/Invoke exports (RunCase, Arm, RegisterTarget, InvokeCallback, InvokeCallbackFramed), the same case names
 * (`label:shape`, `nt_` for a native thread the profiler starts) and the same log, one JSON line
 * per call appended to the file CONF_LOG names, so `simclr conform` and `simclr record` read
 * both lanes alike. It adds the shapes only Windows has: the profiler's own SuspendThread +
 * GetThreadContext + seeded walk + ResumeThread, seeds from any frame of a cross-thread walk,
 * seeds with a bad RSP or RBP, and walks of a thread inside and after its ThreadDestroyed.
 *
 * Plain C with COM vtables by slot index (include/simclr_com.h), and the few kernel32 calls it
 * makes declared here, so no Windows SDK header is needed. */
#include <stdio.h>
#include <stdlib.h>
#include "../../include/simclr_com.h"

/* kernel32 (x64: one calling convention). DWORD is 32 bits. */
typedef void *HANDLE;
typedef uint32_t DWORD;
typedef DWORD (*ThreadStart)(void *);
__declspec(dllimport) HANDLE CreateThread(void *, size_t, ThreadStart, void *, DWORD, DWORD *);
__declspec(dllimport) DWORD WaitForSingleObject(HANDLE, DWORD);
__declspec(dllimport) int CloseHandle(HANDLE);
__declspec(dllimport) DWORD SuspendThread(HANDLE);
__declspec(dllimport) DWORD ResumeThread(HANDLE);
__declspec(dllimport) int GetThreadContext(HANDLE, void *);
__declspec(dllimport) HANDLE OpenThread(DWORD, int, DWORD);
__declspec(dllimport) DWORD GetCurrentThreadId(void);
__declspec(dllimport) void AcquireSRWLockExclusive(void **);
__declspec(dllimport) void ReleaseSRWLockExclusive(void **);
__declspec(dllimport) int GetModuleHandleExA(DWORD, const void *, HANDLE *);
__declspec(dllimport) DWORD GetModuleFileNameA(HANDLE, char *, DWORD);
__declspec(dllimport) void Sleep(DWORD);
#define INFINITE 0xFFFFFFFFu
#define THREAD_ALL_ACCESS 0x1FFFFFu
#define GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS 4u
#define GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT 2u

static const GUID CLSID_CONFPROF = {0x8A4B6C2D, 0x1E3F, 0x4A5B, {0x9C, 0x8D, 0x7E, 0x6F, 0x5A, 0x4B, 0x3C, 0x2D}};
static const GUID IID_ICorProfilerInfo10 = {0x2F1B5152, 0xC869, 0x40C9, {0xAA, 0x5F, 0x3A, 0xBE, 0x02, 0x6B, 0xD7, 0x20}};
static const GUID IID_IMetaDataImport = {0x7DAC8207, 0xD3AE, 0x4C75, {0x9B, 0x67, 0x92, 0x80, 0x1A, 0x49, 0x7D, 0x44}};

enum {
    INFO_GET_FUNCTION_FROM_IP = 7, INFO_GET_CURRENT_THREAD_ID = 13, INFO_GET_CLASS_ID_INFO = 14,
    INFO_GET_FUNCTION_INFO = 15, INFO_SET_EVENT_MASK = 16, INFO_GET_MODULE_METADATA = 21,
    INFO_DO_STACK_SNAPSHOT = 36, INFO_GET_CODE_INFO2 = 42, INFO_GET_FUNCTION_FROM_IP2 = 77,
    INFO_INITIALIZE_CURRENT_THREAD = 72, INFO_SUSPEND_RUNTIME = 97, INFO_RESUME_RUNTIME = 98,
};
enum { MD_GET_TYPE_DEF_PROPS = 12, MD_GET_METHOD_PROPS = 30 };
enum { CB_MODULE_LOAD_FINISHED = 14, CB_THREAD_DESTROYED = 30, CB_OBJECT_ALLOCATED = 50, CB_GC_STARTED = 73 };

#define ENABLE_STACK_SNAPSHOT 0x10000000u
#define ENABLE_OBJECT_ALLOCATED 0x800000u
#define MONITOR_OBJECT_ALLOCATED 0x100u
#define MONITOR_THREADS 0x200u
#define MONITOR_GC 0x80u
#define MONITOR_MODULE_LOADS 0x4u
#define REGISTER_CONTEXT 1u
#define S_FALSE 1
#define E_FAIL ((HRESULT)0x80004005)

/* The x64 CONTEXT: its size and the offsets of the fields the cases read or change. */
enum { CONTEXT_SIZE = 1232, CTX_FLAGS = 0x30, CTX_RSP = 0x98, CTX_RBP = 0xA0, CTX_RIP = 0xF8 };
#define CONTEXT_FULL 0x10000Bu
#define CONTEXT_EXCEPTION_REQUEST 0x40000000u
typedef struct { _Alignas(16) uint8_t bytes[CONTEXT_SIZE]; } Context;

static Object *info;

/* ---- ICorProfilerInfo10, thin wrappers ---- */

typedef HRESULT (*SnapshotCallback)(UINT_PTR, UINT_PTR, UINT_PTR, uint32_t, uint8_t *, void *);

static HRESULT do_stack_snapshot(UINT_PTR thread, SnapshotCallback cb, uint32_t flags, void *data, uint8_t *ctx,
                                 uint32_t size) {
    typedef HRESULT (*F)(Object *, UINT_PTR, SnapshotCallback, uint32_t, void *, uint8_t *, uint32_t);
    return ((F)info->vtbl[INFO_DO_STACK_SNAPSHOT])(info, thread, cb, flags, data, ctx, size);
}

static HRESULT call0(int slot) { return ((HRESULT (*)(Object *))info->vtbl[slot])(info); }

static UINT_PTR current_thread_id(HRESULT *hr) {
    UINT_PTR id = 0;
    HRESULT r = ((HRESULT (*)(Object *, UINT_PTR *))info->vtbl[INFO_GET_CURRENT_THREAD_ID])(info, &id);
    if (hr) *hr = r;
    return id;
}

static HRESULT function_from_ip(UINT_PTR ip) {
    UINT_PTR f = 0;
    return ((HRESULT (*)(Object *, UINT_PTR, UINT_PTR *))info->vtbl[INFO_GET_FUNCTION_FROM_IP])(info, ip, &f);
}

static HRESULT function_from_ip2(UINT_PTR ip) {
    UINT_PTR f = 0, rejit = 0;
    typedef HRESULT (*F)(Object *, UINT_PTR, UINT_PTR *, UINT_PTR *);
    return ((F)info->vtbl[INFO_GET_FUNCTION_FROM_IP2])(info, ip, &f, &rejit);
}

/* GetCodeInfo2: 1 when `ip` lies in one of the function's code regions, 0 when not, -1 when
 * the call fails. */
static int code_contains(UINT_PTR function, UINT_PTR ip) {
    typedef HRESULT (*F)(Object *, UINT_PTR, uint32_t, uint32_t *, UINT_PTR *);
    UINT_PTR regions[4] = {0};
    uint32_t count = 0;
    if (((F)info->vtbl[INFO_GET_CODE_INFO2])(info, function, 2, &count, regions) != S_OK) return -1;
    for (uint32_t i = 0; i < count && i < 2; i++)
        if (ip >= regions[2 * i] && ip - regions[2 * i] < regions[2 * i + 1]) return 1;
    return 0;
}

/* ---- Names through metadata ---- */

/* (ModuleID, IMetaDataImport) of every loaded module, kept from ModuleLoadFinished, where
 * GetModuleMetaData is allowed. */
enum { MAX_MODULES = 1024 };
static struct { UINT_PTR module; Object *import; } modules[MAX_MODULES];
static int module_count;
static void *modules_lock;

static HRESULT module_load_finished(Object *self, UINT_PTR module, HRESULT status) {
    typedef HRESULT (*F)(Object *, UINT_PTR, uint32_t, const GUID *, Object **);
    Object *import = NULL;
    (void)self;
    (void)status;
    if (((F)info->vtbl[INFO_GET_MODULE_METADATA])(info, module, 0, &IID_IMetaDataImport, &import) != S_OK || !import)
        return S_OK;
    AcquireSRWLockExclusive(&modules_lock);
    if (module_count < MAX_MODULES) modules[module_count++].module = module, modules[module_count - 1].import = import;
    ReleaseSRWLockExclusive(&modules_lock);
    return S_OK;
}

static Object *module_import(UINT_PTR module) {
    Object *import = NULL;
    AcquireSRWLockExclusive(&modules_lock);
    for (int i = 0; i < module_count && !import; i++)
        if (modules[i].module == module) import = modules[i].import;
    ReleaseSRWLockExclusive(&modules_lock);
    return import;
}

/* UTF-16 to UTF-8 (the names here are ASCII, but any BMP text survives). */
static void narrow(const WCHAR *in, uint32_t len, char *out, size_t room) {
    size_t o = 0;
    for (uint32_t i = 0; i < len && in[i]; i++) {
        unsigned c = in[i];
        if (c < 0x80 && o + 1 < room) out[o++] = (char)c;
        else if (c < 0x800 && o + 2 < room) { out[o++] = (char)(0xC0 | c >> 6); out[o++] = (char)(0x80 | (c & 0x3F)); }
        else if (o + 3 < room) {
            out[o++] = (char)(0xE0 | c >> 12); out[o++] = (char)(0x80 | ((c >> 6) & 0x3F)); out[o++] = (char)(0x80 | (c & 0x3F));
        }
    }
    out[o] = 0;
}

static int type_name(Object *import, uint32_t type_def, char *out, size_t room) {
    typedef HRESULT (*F)(Object *, uint32_t, WCHAR *, uint32_t, uint32_t *, uint32_t *, uint32_t *);
    WCHAR buf[512];
    uint32_t len = 0, flags = 0, extends = 0;
    if (((F)import->vtbl[MD_GET_TYPE_DEF_PROPS])(import, type_def, buf, 512, &len, &flags, &extends) != S_OK) return 0;
    narrow(buf, len, out, room);
    return 1;
}

/* `Class::Method` of a FunctionID, as the scenarios name methods. */
static void function_name(UINT_PTR function, char *out, size_t room) {
    typedef HRESULT (*Info)(Object *, UINT_PTR, UINT_PTR *, UINT_PTR *, uint32_t *);
    typedef HRESULT (*Props)(Object *, uint32_t, uint32_t *, WCHAR *, uint32_t, uint32_t *, uint32_t *,
                             const uint8_t **, uint32_t *, uint32_t *, uint32_t *);
    UINT_PTR class_id = 0, module = 0;
    uint32_t token = 0, class_token = 0, len = 0, attrs = 0, sig_len = 0, rva = 0, impl = 0;
    const uint8_t *sig = NULL;
    WCHAR buf[512];
    char method[512], type[512];
    Object *import = NULL;
    snprintf(out, room, "<unnamed 0x%llx>", (unsigned long long)function);
    if (((Info)info->vtbl[INFO_GET_FUNCTION_INFO])(info, function, &class_id, &module, &token) != S_OK) return;
    if (!(import = module_import(module))) return;
    if (((Props)import->vtbl[MD_GET_METHOD_PROPS])(import, token, &class_token, buf, 512, &len, &attrs, &sig, &sig_len,
                                                   &rva, &impl) == S_OK) {
        narrow(buf, len, method, sizeof method);
        if (!type_name(import, class_token, type, sizeof type)) snprintf(type, sizeof type, "<class>");
        snprintf(out, room, "%s::%s", type, method);
    }
}

/* The name of a ClassID's type definition; 0 when it has none. */
static int class_name(UINT_PTR class_id, char *out, size_t room) {
    typedef HRESULT (*F)(Object *, UINT_PTR, UINT_PTR *, uint32_t *);
    UINT_PTR module = 0;
    uint32_t type_def = 0;
    Object *import;
    if (((F)info->vtbl[INFO_GET_CLASS_ID_INFO])(info, class_id, &module, &type_def) != S_OK || !type_def) return 0;
    if (!(import = module_import(module))) return 0;
    return type_name(import, type_def, out, room);
}

/* The module holding native code at `ip` (`module.dll`); 0 when none does. */
static int native_name(UINT_PTR ip, char *out, size_t room) {
    HANDLE module = NULL;
    char path[520];
    if (!GetModuleHandleExA(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
                            (const void *)ip, &module))
        return 0;
    DWORD n = GetModuleFileNameA(module, path, sizeof path);
    if (!n || n >= sizeof path) return 0;
    const char *base = path;
    for (const char *p = path; *p; p++)
        if (*p == '\\' || *p == '/') base = p + 1;
    snprintf(out, room, "%s", base);
    return 1;
}

/* ---- The log ---- */

static void *log_lock;

/* Appends `text` to `out` as a JSON string. */
static void quote(char *out, size_t room, const char *text) {
    size_t o = strlen(out);
    if (o + 1 < room) out[o++] = '"';
    for (; *text && o + 8 < room; text++) {
        unsigned char c = (unsigned char)*text;
        if (c == '"' || c == '\\') { out[o++] = '\\'; out[o++] = (char)c; }
        else if (c < 0x20) o += (size_t)snprintf(out + o, room - o, "\\u%04x", c);
        else out[o++] = (char)c;
    }
    if (o + 1 < room) out[o++] = '"';
    out[o] = 0;
}

/* One callback of a walk: FunctionID, context size, IP, and the context bytes when kept. */
typedef struct {
    UINT_PTR function, ip;
    uint32_t context_size;
} Frame;

enum { MAX_FRAMES = 1024 };

/* Appends one record, as conformance/profiler's log does: the case, the caller kind, the API,
 * the argument shape, the HRESULT and, for walks (`frames` not NULL), each callback named. */
static void record(const char *label, const char *caller, const char *api, const char *shape, HRESULT hr,
                   const Frame *frames, int count) {
    static char line[MAX_FRAMES * 700 + 1024];
    char name[600];
    AcquireSRWLockExclusive(&log_lock);
    line[0] = 0;
    strcat(line, "{\"case\":");
    quote(line, sizeof line, label);
    strcat(line, ",\"caller\":");
    quote(line, sizeof line, caller);
    strcat(line, ",\"api\":");
    quote(line, sizeof line, api);
    strcat(line, ",\"shape\":");
    quote(line, sizeof line, shape);
    size_t o = strlen(line);
    o += (size_t)snprintf(line + o, sizeof line - o, ",\"hresult\":\"0x%08X\",\"frames\":", (uint32_t)hr);
    if (!frames) {
        strcat(line, "null");
    } else {
        strcat(line, "[");
        for (int i = 0; i < count; i++) {
            const Frame *f = &frames[i];
            strcat(line, i ? ",{\"function\":" : "{\"function\":");
            if (f->function) {
                function_name(f->function, name, sizeof name);
                quote(line, sizeof line, name);
            } else {
                strcat(line, "null");
            }
            o = strlen(line);
            o += (size_t)snprintf(line + o, sizeof line - o, ",\"context_size\":%u", f->context_size);
            if (f->function) {
                int first = i;
                for (int k = 0; k < i; k++)
                    if (frames[k].function == f->function) { first = k; break; }
                if (first < i) o += (size_t)snprintf(line + o, sizeof line - o, ",\"same_as\":%d", first);
                int inside = code_contains(f->function, f->ip);
                snprintf(line + o, sizeof line - o, ",\"in_code\":%s", inside < 0 ? "null" : inside ? "true" : "false");
            } else if (native_name(f->ip, name, sizeof name)) {
                strcat(line, ",\"native\":");
                quote(line, sizeof line, name);
            }
            strcat(line, "}");
        }
        strcat(line, "]");
    }
    strcat(line, "}\n");
    const char *path = getenv("CONF_LOG");
    FILE *file = path ? fopen(path, "ab") : NULL;
    if (file) {
        fputs(line, file);
        fclose(file);
    }
    ReleaseSRWLockExclusive(&log_lock);
}

/* ---- The cases ---- */

enum Caller { PINVOKE, OBJECT_ALLOCATED, GC_STARTED, NATIVE, THREAD_DESTROYED };
static const char *caller_label(enum Caller c) {
    static const char *labels[] = {"pinvoke", "ObjectAllocated", "GarbageCollectionStarted", "native",
                                   "ThreadDestroyed"};
    return labels[c];
}

static char armed[256];
static void *armed_lock;
/* The cross-thread target: its ThreadID and a handle to its OS thread. */
static volatile UINT_PTR target;
static HANDLE target_handle;
/* The IP a `saveK` case kept, for a later `fip_saved`. */
static volatile UINT_PTR saved_ip;

/* The seed a shape passes. */
enum Seed {
    SEED_NONE, SEED_ZERO, SEED_FRAME, /* the context of callback K of a REGISTER_CONTEXT walk */
    SEED_FRAME_BAD_RSP, SEED_FRAME_BAD_RBP, /* that context with RSP or RBP = 0x1000 */
    SEED_OWN, SEED_OWN_NATIVE_IP, /* the target's context from the profiler's own GetThreadContext */
};
enum Callback { CB_OK, CB_NULL, CB_RETURN, CB_NESTED };

/* One DoStackSnapshot call shape. `own_suspend`: the profiler suspends the target itself
 * (SuspendThread) around the call. */
typedef struct {
    UINT_PTR thread;
    uint32_t flags;
    enum Seed seed;
    int frame;
    uint32_t size;
    enum Callback callback;
    int at;
    HRESULT value;
    int own_suspend;
} Shape;

typedef struct {
    Frame frames[MAX_FRAMES];
    int count;
    const Shape *shape;
    /* REGISTER_CONTEXT walks keep the context of callback `keep`. */
    int keep;
    Context kept;
    int have_kept;
    HRESULT nested_hr;
    Frame nested[MAX_FRAMES];
    int nested_count, nested_ran;
    /* The concurrent-walk shape: the label of the walk its first callback starts. */
    char second[300];
} Walk;

static HRESULT collect(UINT_PTR function, UINT_PTR ip, UINT_PTR frame_info, uint32_t size, uint8_t *ctx, void *data) {
    (void)frame_info;
    Walk *w = data;
    int index = w->count;
    if (w->count < MAX_FRAMES) w->frames[w->count++] = (Frame){function, ip, size};
    if (index == w->keep && ctx && size) {
        memcpy(w->kept.bytes, ctx, size < CONTEXT_SIZE ? size : CONTEXT_SIZE);
        w->have_kept = 1;
    }
    if (!w->shape) return S_OK;
    if (w->shape->callback == CB_RETURN && w->shape->at == index) return w->shape->value;
    if (w->shape->callback == CB_NESTED && index == 0) {
        Walk *inner = calloc(1, sizeof *inner);
        inner->keep = -1;
        w->nested_hr = do_stack_snapshot(0, collect, 0, inner, NULL, 0);
        memcpy(w->nested, inner->frames, sizeof inner->frames);
        w->nested_count = inner->count;
        w->nested_ran = 1;
        free(inner);
    }
    return S_OK;
}

/* The context of callback `k` of a REGISTER_CONTEXT walk of `thread` (zeroed if it has none). */
static void frame_context(UINT_PTR thread, int k, Context *out) {
    Walk *w = calloc(1, sizeof *w);
    w->keep = k;
    do_stack_snapshot(thread, collect, REGISTER_CONTEXT, w, NULL, 0);
    if (w->have_kept) *out = w->kept;
    else memset(out, 0, sizeof *out);
    free(w);
}

/* Walks with `shape` (named `name`) and logs the call (and a nested one) under `label`;
 * returns callback `save`'s IP (0 if none). */
static UINT_PTR walk(const char *label, enum Caller caller, const char *name, const Shape *shape, int save) {
    Context seed;
    uint8_t *ctx = NULL;
    memset(&seed, 0, sizeof seed);
    switch (shape->seed) {
    case SEED_NONE: break;
    case SEED_ZERO: ctx = seed.bytes; break;
    case SEED_FRAME: case SEED_FRAME_BAD_RSP: case SEED_FRAME_BAD_RBP:
        frame_context(shape->thread, shape->frame, &seed);
        if (shape->seed == SEED_FRAME_BAD_RSP) memcpy(seed.bytes + CTX_RSP, &(uint64_t){0x1000}, 8);
        if (shape->seed == SEED_FRAME_BAD_RBP) memcpy(seed.bytes + CTX_RBP, &(uint64_t){0x1000}, 8);
        ctx = seed.bytes;
        break;
    case SEED_OWN: case SEED_OWN_NATIVE_IP: ctx = seed.bytes; break;
    }
    if (shape->own_suspend) SuspendThread(target_handle);
    if (shape->seed == SEED_OWN || shape->seed == SEED_OWN_NATIVE_IP) {
        uint32_t flags = CONTEXT_FULL | CONTEXT_EXCEPTION_REQUEST;
        memcpy(seed.bytes + CTX_FLAGS, &flags, 4);
        GetThreadContext(target_handle, seed.bytes);
        if (shape->seed == SEED_OWN_NATIVE_IP) {
            uint64_t ip = (uint64_t)(UINT_PTR)&walk;
            memcpy(seed.bytes + CTX_RIP, &ip, 8);
        }
    }
    Walk *w = calloc(1, sizeof *w);
    w->shape = shape;
    w->keep = -1;
    HRESULT hr = do_stack_snapshot(shape->thread, shape->callback == CB_NULL ? NULL : collect, shape->flags,
                                   shape->callback == CB_NULL ? NULL : w, ctx, shape->size);
    if (shape->own_suspend) ResumeThread(target_handle);
    record(label, caller_label(caller), "DoStackSnapshot", name, hr, w->frames, w->count);
    if (w->nested_ran) {
        char inner[300];
        snprintf(inner, sizeof inner, "%s/inner", label);
        record(inner, caller_label(caller), "DoStackSnapshot", "default", w->nested_hr, w->nested, w->nested_count);
    }
    UINT_PTR ip = save >= 0 && save < w->count ? w->frames[save].ip : 0;
    free(w);
    return ip;
}

/* The first frame's IP of a walk of the calling thread. */
static UINT_PTR first_ip(void) {
    Walk *w = calloc(1, sizeof *w);
    w->keep = -1;
    do_stack_snapshot(0, collect, 0, w, NULL, 0);
    UINT_PTR ip = w->count ? w->frames[0].ip : 0;
    free(w);
    return ip;
}

/* The DoStackSnapshot shapes, by name (as conformance/profiler's, plus the Windows ones); 0
 * for an unknown name. */
static int snapshot_shape(const char *name, Shape *s) {
    UINT_PTR own = current_thread_id(NULL);
    const char *rest = name;
    memset(s, 0, sizeof *s);
    if (!strncmp(name, "target", 6)) {
        s->thread = target;
        rest = name[6] == '_' ? name + 7 : "default";
        if (!name[6]) rest = "default";
    }
    if (!strncmp(rest, "own_suspend", 11)) {
        s->own_suspend = 1;
        rest += 11;
        if (!*rest) return 1;
        if (!strcmp(rest, "_seed")) s->seed = SEED_OWN, s->size = CONTEXT_SIZE;
        else if (!strcmp(rest, "_seed16")) s->seed = SEED_OWN, s->size = 16;
        else if (!strcmp(rest, "_seed_native_ip")) s->seed = SEED_OWN_NATIVE_IP, s->size = CONTEXT_SIZE;
        else return 0;
        return 1;
    }
    if (!strcmp(rest, "default")) {}
    else if (!strcmp(rest, "self")) s->thread = own;
    else if (!strcmp(rest, "regctx")) s->flags = REGISTER_CONTEXT;
    else if (!strcmp(rest, "x86")) s->flags = 2;
    else if (!strcmp(rest, "zero")) s->seed = SEED_ZERO, s->size = CONTEXT_SIZE;
    else if (!strcmp(rest, "zero16")) s->seed = SEED_ZERO, s->size = 16;
    else if (!strcmp(rest, "null1232")) s->size = CONTEXT_SIZE;
    else if (!strcmp(rest, "flags4")) s->flags = 4;
    else if (!strcmp(rest, "flagshi")) s->flags = 0x80000000u;
    else if (!strcmp(rest, "sfalse1")) s->callback = CB_RETURN, s->at = 1, s->value = S_FALSE;
    else if (!strcmp(rest, "efail1")) s->callback = CB_RETURN, s->at = 1, s->value = E_FAIL;
    else if (!strcmp(rest, "other0")) s->callback = CB_RETURN, s->at = 0, s->value = 0x12345;
    else if (!strcmp(rest, "nested")) s->callback = CB_NESTED;
    else if (!strcmp(rest, "nullcb") || !strcmp(rest, "null")) s->callback = CB_NULL;
    else if (!strcmp(rest, "seed2size0")) s->seed = SEED_FRAME, s->frame = 2;
    else if (!strncmp(rest, "seed", 4) && rest[4] && strspn(rest + 4, "0123456789") == strlen(rest + 4))
        s->seed = SEED_FRAME, s->frame = atoi(rest + 4), s->size = CONTEXT_SIZE;
    else if (!strcmp(rest, "badseed_rsp")) s->seed = SEED_FRAME_BAD_RSP, s->size = CONTEXT_SIZE;
    else if (!strcmp(rest, "badseed_rbp")) s->seed = SEED_FRAME_BAD_RBP, s->size = CONTEXT_SIZE;
    else if (!strcmp(name, "bogus")) s->thread = 1;
    else return 0;
    return 1;
}

static int run_here(const char *label, const char *shape, enum Caller caller);

typedef struct { char label[256], shape[256]; int ok; } NativeCase;

static DWORD native_case(void *arg) {
    NativeCase *c = arg;
    c->ok = run_here(c->label, c->shape, NATIVE);
    return 0;
}

/* Runs case `name` (`label:shape`) from `caller`; 0 for an unknown shape. */
static int run(const char *name, enum Caller caller) {
    char label[256];
    const char *colon = strrchr(name, ':');
    const char *shape = colon ? colon + 1 : "default";
    snprintf(label, sizeof label, "%.*s", colon ? (int)(colon - name) : (int)strlen(name), name);
    if (!strncmp(shape, "nt_", 3)) {
        NativeCase c;
        memset(&c, 0, sizeof c);
        snprintf(c.label, sizeof c.label, "%s", label);
        snprintf(c.shape, sizeof c.shape, "%s", shape + 3);
        HANDLE thread = CreateThread(NULL, 0, native_case, &c, 0, NULL);
        if (!thread) return 0;
        WaitForSingleObject(thread, INFINITE);
        CloseHandle(thread);
        return c.ok;
    }
    return run_here(label, shape, caller);
}

static void step(const char *label, const char *name, const char *api, HRESULT hr, enum Caller caller) {
    char full[300];
    snprintf(full, sizeof full, "%s/%s", label, name);
    record(full, caller_label(caller), api, name, hr, NULL, 0);
}

static void walk_as(const char *label, const char *name, enum Caller caller) {
    char full[300];
    Shape s;
    snprintf(full, sizeof full, "%s/%s", label, name);
    if (snapshot_shape(name, &s)) walk(full, caller, name, &s, -1);
}

/* Every way the profiler can walk the target from a thread of its own, one record each
 * (`windows` shape): plain, with contexts, seeded from frames and bad seeds, around its own
 * SuspendThread, with a NULL callback, then under SuspendRuntime and after ResumeRuntime. */
static const char *const windows_walks[] = {
    "target_zero", "target_zero16", "target_flags4", "target_own_suspend", "target_own_suspend_seed",
    "target_own_suspend_seed16", "target_own_suspend_seed_native_ip", "target_badseed_rsp",
    "target_badseed_rbp", "target_null",
};

/* How many callbacks a REGISTER_CONTEXT walk of `thread` makes. */
static int count_frames(UINT_PTR thread) {
    Walk *w = calloc(1, sizeof *w);
    w->keep = -1;
    do_stack_snapshot(thread, collect, REGISTER_CONTEXT, w, NULL, 0);
    int count = w->count;
    free(w);
    return count;
}

/* The concurrent-walk shape: a walk of the target (`LABEL/first`) whose first callback starts
 * another profiler thread walking the same target (`LABEL/second`) and waits for it. */
static DWORD second_walk(void *label) {
    Shape s;
    snapshot_shape("target", &s);
    walk(label, NATIVE, "target", &s, -1);
    return 0;
}

static HRESULT start_second(UINT_PTR function, UINT_PTR ip, UINT_PTR frame_info, uint32_t size, uint8_t *ctx,
                            void *data) {
    Walk *w = data;
    HRESULT hr = collect(function, ip, frame_info, size, ctx, data);
    if (w->count == 1) {
        HANDLE thread = CreateThread(NULL, 0, second_walk, w->second, 0, NULL);
        if (thread) {
            WaitForSingleObject(thread, 10000);
            CloseHandle(thread);
        }
    }
    return hr;
}

static void concurrent(const char *label, enum Caller caller) {
    Walk *w = calloc(1, sizeof *w);
    char first[300];
    w->keep = -1;
    snprintf(w->second, sizeof w->second, "%s/second", label);
    HRESULT hr = do_stack_snapshot(target, start_second, 0, w, NULL, 0);
    snprintf(first, sizeof first, "%s/first", label);
    record(first, caller_label(caller), "DoStackSnapshot", "target", hr, w->frames, w->count);
    free(w);
}

static int run_here(const char *label, const char *shape, enum Caller caller) {
    Shape s;
    if (!strcmp(shape, "threadid")) {
        HRESULT hr;
        current_thread_id(&hr);
        record(label, caller_label(caller), "GetCurrentThreadID", shape, hr, NULL, 0);
    } else if (!strcmp(shape, "init")) {
        record(label, caller_label(caller), "InitializeCurrentThread", shape, call0(INFO_INITIALIZE_CURRENT_THREAD), NULL, 0);
    } else if (!strcmp(shape, "resume")) {
        record(label, caller_label(caller), "ResumeRuntime", shape, call0(INFO_RESUME_RUNTIME), NULL, 0);
    } else if (!strcmp(shape, "fip_managed")) {
        record(label, caller_label(caller), "GetFunctionFromIP", shape, function_from_ip(first_ip()), NULL, 0);
    } else if (!strcmp(shape, "fip_native")) {
        record(label, caller_label(caller), "GetFunctionFromIP", shape, function_from_ip((UINT_PTR)&run), NULL, 0);
    } else if (!strcmp(shape, "fip2_managed")) {
        record(label, caller_label(caller), "GetFunctionFromIP2", shape, function_from_ip2(first_ip()), NULL, 0);
    } else if (!strcmp(shape, "fip_saved")) {
        record(label, caller_label(caller), "GetFunctionFromIP", shape, function_from_ip(saved_ip), NULL, 0);
    } else if (!strcmp(shape, "suspended")) {
        /* The sampler protocol of dotnet/samples, step by step. */
        static const char *const under[] = {"target", "target_regctx", "target_zero", "target_zero16",
                                            "target_flags4", "target_sfalse1", "target_efail1", "default"};
        step(label, "init", "InitializeCurrentThread", call0(INFO_INITIALIZE_CURRENT_THREAD), caller);
        step(label, "suspend", "SuspendRuntime", call0(INFO_SUSPEND_RUNTIME), caller);
        for (size_t i = 0; i < sizeof under / sizeof *under; i++) walk_as(label, under[i], caller);
        step(label, "resume", "ResumeRuntime", call0(INFO_RESUME_RUNTIME), caller);
        step(label, "resume_again", "ResumeRuntime", call0(INFO_RESUME_RUNTIME), caller);
        char full[300];
        snprintf(full, sizeof full, "%s/after_resume", label);
        snapshot_shape("target", &s);
        walk(full, caller, "target", &s, -1);
    } else if (!strcmp(shape, "suspended_walk")) {
        step(label, "init", "InitializeCurrentThread", call0(INFO_INITIALIZE_CURRENT_THREAD), caller);
        step(label, "suspend", "SuspendRuntime", call0(INFO_SUSPEND_RUNTIME), caller);
        walk_as(label, "target", caller);
        walk_as(label, "target_regctx", caller);
        step(label, "resume", "ResumeRuntime", call0(INFO_RESUME_RUNTIME), caller);
    } else if (!strcmp(shape, "windows")) {
        step(label, "init", "InitializeCurrentThread", call0(INFO_INITIALIZE_CURRENT_THREAD), caller);
        walk_as(label, "target", caller);
        walk_as(label, "target_regctx", caller);
        /* Seeded from every callback of a REGISTER_CONTEXT walk. */
        for (int k = 0, n = count_frames(target); k < n; k++) {
            char seed[32];
            snprintf(seed, sizeof seed, "target_seed%d", k);
            walk_as(label, seed, caller);
        }
        for (size_t i = 0; i < sizeof windows_walks / sizeof *windows_walks; i++) walk_as(label, windows_walks[i], caller);
        char full[300];
        snprintf(full, sizeof full, "%s/susp", label);
        run_here(full, "suspended_walk", caller);
        snprintf(full, sizeof full, "%s/after_resume", label);
        snapshot_shape("target", &s);
        walk(full, caller, "target", &s, -1);
    } else if (!strcmp(shape, "concurrent")) {
        concurrent(label, caller);
    } else if (!strcmp(shape, "suspended_null")) {
        step(label, "suspend", "SuspendRuntime", call0(INFO_SUSPEND_RUNTIME), caller);
        walk_as(label, "target_null", caller);
    } else if (!strcmp(shape, "double_suspend")) {
        step(label, "suspend", "SuspendRuntime", call0(INFO_SUSPEND_RUNTIME), caller);
        step(label, "suspend_again", "SuspendRuntime", call0(INFO_SUSPEND_RUNTIME), caller);
        step(label, "resume", "ResumeRuntime", call0(INFO_RESUME_RUNTIME), caller);
        step(label, "resume_again", "ResumeRuntime", call0(INFO_RESUME_RUNTIME), caller);
    } else if (!strcmp(shape, "gc")) {
        /* `LABEL/self` is a plain walk of the calling thread, logged as shape `default`. */
        char full[300];
        snprintf(full, sizeof full, "%s/self", label);
        snapshot_shape("default", &s);
        walk(full, caller, "default", &s, -1);
        walk_as(label, "target", caller);
    } else if (!strncmp(shape, "save", 4)) {
        /* `saveK`: a plain walk of this thread that keeps callback K's IP. */
        snapshot_shape("default", &s);
        saved_ip = walk(label, caller, shape, &s, atoi(shape + 4));
    } else if (snapshot_shape(shape, &s)) {
        walk(label, caller, shape, &s, -1);
    } else {
        return 0;
    }
    return 1;
}

/* ---- P/Invoke exports ---- */

/* Runs case `name` on the calling thread; 0, or -1 for an unknown case. */
__declspec(dllexport) int RunCase(const char *name) { return run(name, PINVOKE) ? 0 : -1; }

/* Arms case `name` for the next ObjectAllocated of a `Marker` (or the next GC for `gc…`
 * labels, or the target's ThreadDestroyed for `td…` labels). */
__declspec(dllexport) void Arm(const char *name) {
    AcquireSRWLockExclusive(&armed_lock);
    snprintf(armed, sizeof armed, "%s", name);
    ReleaseSRWLockExclusive(&armed_lock);
}

/* Records the calling managed thread as the cross-thread target. */
__declspec(dllexport) void RegisterTarget(void) {
    HANDLE old = target_handle;
    target_handle = OpenThread(THREAD_ALL_ACCESS, 0, GetCurrentThreadId());
    target = current_thread_id(NULL);
    if (old) CloseHandle(old);
}

/* Calls `callback` (a managed delegate marshalled as a function pointer). */
__declspec(dllexport) void InvokeCallback(void (*callback)(void)) { callback(); }
/* As InvokeCallback, from a frame of its own: a value lives across the call, so the call
 * cannot become a jump. */
__declspec(dllexport) void InvokeCallbackFramed(void (*callback)(void)) {
  volatile int kept = 1;
  callback();
  kept++;
}

/* Blocks in native code (the target of the P/Invoke shapes) until Release is called. */
static volatile int released;
__declspec(dllexport) void Block(void) {
    while (!released) Sleep(1);
    released = 0;
}
__declspec(dllexport) void Release(void) { released = 1; }

/* ---- Callbacks ---- */

/* Takes the armed case if its label starts with `prefix` (or, for prefix NULL, starts with
 * neither "gc" nor "td"); 0 if none. */
static int take_armed(const char *prefix, char *out, size_t room) {
    int taken = 0;
    AcquireSRWLockExclusive(&armed_lock);
    int gc = !strncmp(armed, "gc", 2), td = !strncmp(armed, "td", 2);
    if (armed[0] && (prefix ? !strncmp(armed, prefix, strlen(prefix)) : !gc && !td)) {
        snprintf(out, room, "%s", armed);
        armed[0] = 0;
        taken = 1;
    }
    ReleaseSRWLockExclusive(&armed_lock);
    return taken;
}

static HRESULT object_allocated(Object *self, UINT_PTR object, UINT_PTR class_id) {
    char name[256], cls[256];
    (void)self;
    (void)object;
    AcquireSRWLockExclusive(&armed_lock);
    int any = armed[0] && strncmp(armed, "gc", 2) && strncmp(armed, "td", 2);
    ReleaseSRWLockExclusive(&armed_lock);
    if (any && class_name(class_id, cls, sizeof cls) && !strcmp(cls, "Marker") && take_armed(NULL, name, sizeof name))
        run(name, OBJECT_ALLOCATED);
    return S_OK;
}

static HRESULT gc_started(Object *self) {
    char name[256];
    (void)self;
    if (take_armed("gc", name, sizeof name)) run(name, GC_STARTED);
    return S_OK;
}

static HRESULT thread_destroyed(Object *self, UINT_PTR thread) {
    char name[256];
    (void)self;
    if (thread == target && take_armed("td", name, sizeof name)) run(name, THREAD_DESTROYED);
    return S_OK;
}

static HRESULT initialize(Object *self, Object *unknown) {
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    typedef HRESULT (*SetEventMask)(Object *, uint32_t);
    uint32_t mask = ENABLE_STACK_SNAPSHOT | ENABLE_OBJECT_ALLOCATED | MONITOR_OBJECT_ALLOCATED | MONITOR_THREADS |
                    MONITOR_GC | MONITOR_MODULE_LOADS;
    (void)self;
    HRESULT hr = ((QueryInterface)unknown->vtbl[SLOT_QI])(unknown, &IID_ICorProfilerInfo10, (void **)&info);
    if (hr != S_OK) return hr;
    if (getenv("CONF_NO_SNAPSHOT")) mask &= ~ENABLE_STACK_SNAPSHOT;
    return ((SetEventMask)info->vtbl[INFO_SET_EVENT_MASK])(info, mask);
}

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = (void *)initialize;
    slots[CB_MODULE_LOAD_FINISHED] = (void *)module_load_finished;
    slots[CB_THREAD_DESTROYED] = (void *)thread_destroyed;
    slots[CB_OBJECT_ALLOCATED] = (void *)object_allocated;
    slots[CB_GC_STARTED] = (void *)gc_started;
}

__declspec(dllexport) SIMCLR_ONE_CLASS(CLSID_CONFPROF)
