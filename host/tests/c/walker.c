/* A small native profiler in C, as a team would write one: it walks its own thread with
 * DoStackSnapshot in ObjectAllocated and names every managed frame through metadata
 * (GetTokenAndMetaDataFromFunction, IMetaDataImport::GetMethodProps/GetTypeDefProps).
 * The walk's names, one per line ("<native>" for a funcId == 0 run), are read back with
 * walker_result(). Slots are the profiling API's vtable indices. */
#define _DEFAULT_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>
#include "../../../include/simclr_com.h"

static const GUID CLSID_WALKER = {0x1b9e9f2c, 0x5e3d, 0x4c55, {0x9a, 0x11, 0x2f, 0x60, 0x7d, 0x31, 0x42, 0x0b}};
static const GUID IID_ICorProfilerInfo3 = {0xB555ED4F, 0x452A, 0x4E54, {0x8B, 0x39, 0xB5, 0x36, 0x0B, 0xAD, 0x32, 0xA0}};
static const GUID IID_IMetaDataImport = {0x7DAC8207, 0xD3AE, 0x4C75, {0x9B, 0x67, 0x92, 0x80, 0x1A, 0x49, 0x7D, 0x44}};
static const GUID IID_IMetaDataImport2 = {0xFCE5EFA0, 0x8BBA, 0x4F8E, {0xA0, 0x36, 0x8F, 0x20, 0x22, 0xB0, 0x84, 0x66}};
static const GUID IID_IMetaDataAssemblyImport = {0xEE62470B, 0xE94B, 0x424E, {0x9B, 0x7C, 0x2F, 0x00, 0xC9, 0x24, 0x9F, 0x93}};

enum { INFO_GET_FUNCTION_INFO = 15, INFO_SET_EVENT_MASK = 16, INFO_GET_TOKEN_AND_METADATA = 19,
       INFO_GET_MODULE_INFO = 20, INFO_GET_MODULE_METADATA = 21, INFO_DO_STACK_SNAPSHOT = 36,
       INFO_GET_FUNCTION_INFO2 = 38 };
enum { MD_GET_TYPE_DEF_PROPS = 12, MD_GET_METHOD_PROPS = 30, MD2_GET_VERSION_STRING = 71 };
enum { MDA_GET_ASSEMBLY_PROPS = 3, MDA_GET_ASSEMBLY_FROM_SCOPE = 12 };
enum { CB_OBJECT_ALLOCATED = 50 };

#define ENABLE_STACK_SNAPSHOT 0x10000000u
#define ENABLE_OBJECT_ALLOCATED 0x800000u
#define MONITOR_OBJECT_ALLOCATED 0x100u

static Object *info;
static char result[4096];
static int shutdowns;

static void append(const char *text) {
    size_t used = strlen(result), n = strlen(text);
    if (used + n + 2 < sizeof result) {
        memcpy(result + used, text, n);
        result[used + n] = '\n';
        result[used + n + 1] = 0;
    }
}

/* UTF-16 to ASCII: the names here are ASCII. */
static void narrow(const WCHAR *in, char *out, size_t room) {
    size_t i = 0;
    for (; in[i] && i + 1 < room; i++) out[i] = (char)in[i];
    out[i] = 0;
}

static HRESULT release(Object *o) { return ((HRESULT (*)(Object *))o->vtbl[SLOT_RELEASE])(o); }

static void name_function(UINT_PTR function) {
    typedef HRESULT (*TokenAndMetadata)(Object *, UINT_PTR, const GUID *, Object **, uint32_t *);
    typedef HRESULT (*MethodProps)(Object *, uint32_t, uint32_t *, WCHAR *, uint32_t, uint32_t *, uint32_t *,
                                   const uint8_t **, uint32_t *, uint32_t *, uint32_t *);
    typedef HRESULT (*TypeDefProps)(Object *, uint32_t, WCHAR *, uint32_t, uint32_t *, uint32_t *, uint32_t *);
    Object *import = NULL;
    uint32_t token = 0, class_token = 0, len = 0;
    WCHAR method[256], type[256];
    char a[256], b[256], line[600];
    if (((TokenAndMetadata)info->vtbl[INFO_GET_TOKEN_AND_METADATA])(info, function, &IID_IMetaDataImport, &import, &token) != S_OK) {
        append("<no metadata>");
        return;
    }
    HRESULT hr = ((MethodProps)import->vtbl[MD_GET_METHOD_PROPS])(import, token, &class_token, method, 256, &len, NULL, NULL, NULL, NULL, NULL);
    if (hr == S_OK)
        hr = ((TypeDefProps)import->vtbl[MD_GET_TYPE_DEF_PROPS])(import, class_token, type, 256, &len, NULL, NULL);
    release(import);
    if (hr != S_OK) {
        append("<unnamed>");
        return;
    }
    narrow(type, a, sizeof a);
    narrow(method, b, sizeof b);
    strcpy(line, a);
    strcat(line, "::");
    strcat(line, b);
    append(line);
}

/* The module's assembly, named as production profilers do: GetModuleMetaData for
   IMetaDataImport2, QueryInterface for IMetaDataAssemblyImport, GetAssemblyFromScope,
   GetAssemblyProps; and the metadata version string (IMetaDataImport2::GetVersionString). */
static void name_assembly(UINT_PTR module) {
    typedef HRESULT (*ModuleMetaData)(Object *, UINT_PTR, uint32_t, const GUID *, Object **);
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    typedef HRESULT (*FromScope)(Object *, uint32_t *);
    typedef HRESULT (*AssemblyProps)(Object *, uint32_t, const void **, uint32_t *, uint32_t *, WCHAR *, uint32_t,
                                     uint32_t *, void *, uint32_t *);
    typedef HRESULT (*VersionString)(Object *, WCHAR *, uint32_t, uint32_t *);
    Object *import = NULL, *assembly = NULL;
    uint32_t token = 0, len = 0;
    WCHAR name[256];
    char text[300];
    if (((ModuleMetaData)info->vtbl[INFO_GET_MODULE_METADATA])(info, module, 0, &IID_IMetaDataImport2, &import) != S_OK) {
        append("<no IMetaDataImport2>");
        return;
    }
    if (((VersionString)import->vtbl[MD2_GET_VERSION_STRING])(import, name, 256, &len) == S_OK) {
        strcpy(text, "metadata ");
        narrow(name, text + 9, sizeof text - 9);
        append(text);
    }
    if (((QueryInterface)import->vtbl[SLOT_QI])(import, &IID_IMetaDataAssemblyImport, (void **)&assembly) != S_OK) {
        release(import);
        append("<no IMetaDataAssemblyImport>");
        return;
    }
    if (((FromScope)assembly->vtbl[MDA_GET_ASSEMBLY_FROM_SCOPE])(assembly, &token) == S_OK &&
        ((AssemblyProps)assembly->vtbl[MDA_GET_ASSEMBLY_PROPS])(assembly, token, NULL, NULL, NULL, name, 256, &len, NULL, NULL) == S_OK) {
        strcpy(text, "assembly ");
        narrow(name, text + 9, sizeof text - 9);
        append(text);
    }
    release(assembly);
    release(import);
}

typedef struct { UINT_PTR functions[64]; UINT_PTR frame_infos[64]; int count; } Walk;

static HRESULT on_frame(UINT_PTR function, UINT_PTR ip, UINT_PTR frame_info, uint32_t context_size,
                        uint8_t *context, void *client_data) {
    Walk *walk = client_data;
    (void)ip; (void)context_size; (void)context;
    if (walk->count < 64) {
        walk->frame_infos[walk->count] = frame_info;
        walk->functions[walk->count++] = function;
    }
    return S_OK;
}

static HRESULT object_allocated(Object *self, UINT_PTR object, UINT_PTR class_id) {
    typedef HRESULT (*Snapshot)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
    typedef HRESULT (*ModuleInfo)(Object *, UINT_PTR, const uint8_t **, uint32_t, uint32_t *, WCHAR *, UINT_PTR *);
    typedef HRESULT (*FunctionInfo)(Object *, UINT_PTR, UINT_PTR *, UINT_PTR *, uint32_t *);
    Walk walk = {{0}, {0}, 0};
    (void)self; (void)object; (void)class_id;
    result[0] = 0;
    if (((Snapshot)info->vtbl[INFO_DO_STACK_SNAPSHOT])(info, 0, (void *)on_frame, 0, &walk, NULL, 0) != S_OK) {
        append("<walk failed>");
        return S_OK;
    }
    for (int i = 0; i < walk.count; i++) {
        if (walk.functions[i] == 0) append("<native>");
        else name_function(walk.functions[i]);
    }
    /* The leaf's module, named through GetModuleInfo. */
    if (walk.count > 0 && walk.functions[0] != 0) {
        UINT_PTR class_ = 0, module = 0;
        uint32_t token = 0, len = 0;
        WCHAR name[256];
        char text[300] = "module ";
        ((FunctionInfo)info->vtbl[INFO_GET_FUNCTION_INFO])(info, walk.functions[0], &class_, &module, &token);
        if (((ModuleInfo)info->vtbl[INFO_GET_MODULE_INFO])(info, module, NULL, 256, &len, name, NULL) == S_OK) {
            narrow(name, text + 7, sizeof text - 7);
            append(text);
        }
        name_assembly(module);
    }
    return S_OK;
}

static HRESULT initialize(Object *self, Object *unknown) {
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    typedef HRESULT (*SetEventMask)(Object *, uint32_t);
    (void)self;
    HRESULT hr = ((QueryInterface)unknown->vtbl[SLOT_QI])(unknown, &IID_ICorProfilerInfo3, (void **)&info);
    if (hr != S_OK) return hr;
    return ((SetEventMask)info->vtbl[INFO_SET_EVENT_MASK])(info, ENABLE_STACK_SNAPSHOT | ENABLE_OBJECT_ALLOCATED | MONITOR_OBJECT_ALLOCATED);
}

static HRESULT shutdown(Object *self) {
    (void)self;
    shutdowns++;
    if (info) release(info);
    info = NULL;
    return S_OK;
}

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = (void *)initialize;
    slots[CB_SHUTDOWN] = (void *)shutdown;
    slots[CB_OBJECT_ALLOCATED] = (void *)object_allocated;
}

HRESULT DllGetClassObject(const GUID *clsid, const GUID *iid, void **out) {
    if (!same(clsid, &CLSID_WALKER)) {
        *out = NULL;
        return CLASS_E_CLASSNOTAVAILABLE;
    }
    return factory_qi(&factory, iid, out);
}

/* The names of the last walk, one per line. */
const char *walker_result(void) { return result; }

/* How many times Shutdown was called. */
int walker_shutdowns(void) { return shutdowns; }

/* Appends a line to the result (an export the program calls by P/Invoke). */
void walker_note(const char *text) { append(text); }

/* Adds its integer arguments and the length of its string (typed arguments of a step). */
long walker_sum(long a, const char *text, long b) { return a + (long)strlen(text) + b; }

static void *tick(void *unused) {
    (void)unused;
    usleep(1000);
    append("ticked");
    return NULL;
}

/* Starts a thread of its own that notes "ticked" after 1 ms: time must pass for it to. */
void walker_tick_later(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, tick, NULL) == 0) pthread_detach(t);
}

/* Walks its own thread with a NULL callback: the process dies at the first frame. */
void walker_null_walk(void) {
    typedef HRESULT (*Snapshot)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
    HRESULT hr = ((Snapshot)info->vtbl[INFO_DO_STACK_SNAPSHOT])(info, 0, NULL, 0, NULL, NULL, 0);
    append(hr == S_OK ? "survived a NULL callback" : "refused a NULL callback");
}

/* Walks its own thread, keeps the leaf's COR_PRF_FRAME_INFO and passes it to GetFunctionInfo2
 * after the walk has returned: the handle is stale. */
void walker_stale_frame_info(void) {
    typedef HRESULT (*Snapshot)(Object *, UINT_PTR, void *, uint32_t, void *, uint8_t *, uint32_t);
    typedef HRESULT (*FunctionInfo2)(Object *, UINT_PTR, UINT_PTR, UINT_PTR *, UINT_PTR *, uint32_t *, uint32_t,
                                     uint32_t *, UINT_PTR *);
    Walk walk = {{0}, {0}, 0};
    char line[100];
    UINT_PTR class_ = 0, module = 0;
    uint32_t token = 0;
    if (((Snapshot)info->vtbl[INFO_DO_STACK_SNAPSHOT])(info, 0, (void *)on_frame, 0, &walk, NULL, 0) != S_OK ||
        walk.count == 0) {
        append("<walk failed>");
        return;
    }
    HRESULT hr = ((FunctionInfo2)info->vtbl[INFO_GET_FUNCTION_INFO2])(info, walk.functions[0], walk.frame_infos[0],
                                                                      &class_, &module, &token, 0, NULL, NULL);
    snprintf(line, sizeof line, "stale frame info 0x%08X", (unsigned)hr);
    append(line);
}

static HRESULT current_thread_hr(void) {
    typedef HRESULT (*CurrentThread)(Object *, UINT_PTR *);
    UINT_PTR id = 0;
    return ((CurrentThread)info->vtbl[13])(info, &id);
}

static void *own_thread(void *out) {
    *(HRESULT *)out = current_thread_hr();
    return NULL;
}

/* GetCurrentThreadID on the calling thread, then on a thread this library starts itself:
 * the second is a native thread the runtime does not know. */
void walker_threads(void) {
    HRESULT mine = 0, theirs = 0;
    char line[100];
    pthread_t t;
    mine = current_thread_hr();
    if (pthread_create(&t, NULL, own_thread, &theirs) != 0 || pthread_join(t, NULL) != 0) {
        append("pthread failed");
        return;
    }
    snprintf(line, sizeof line, "caller 0x%08X, own thread 0x%08X", (unsigned)mine, (unsigned)theirs);
    append(line);
}
