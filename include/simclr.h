/* simclr.h: the simulated .NET runtime for C and C++ tests of profiler stack walkers.
 *
 * Link with libsimclr_host.a (plus -lpthread -ldl -lm) or libsimclr_host.so, built by
 * `cargo build -p simclr-host`. A runtime is built from a scenario file or string; it hands
 * out an ICorProfilerInfo* (an IUnknown* answering ICorProfilerInfo ... ICorProfilerInfo10)
 * that answers as CoreCLR would, can attach your ICorProfilerCallback2 object, run your code
 * as one of its threads, raise callbacks into your profiler, and report runs and schedule
 * explorations of scenario files as JSON (schemas in docs/json-output.md).
 *
 * Calls made on the OS thread inside simclr_on_thread's function, or inside a callback the
 * runtime raised, are that simulated thread's; calls from any other OS thread are a native
 * thread's that never ran managed code. Strings returned are freed with simclr_string_free;
 * error messages (when `error` is not NULL) too. docs/native-profilers.md has the whole
 * contract. */
#ifndef SIMCLR_H
#define SIMCLR_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A simulated runtime (opaque). */
typedef struct simclr_runtime simclr_runtime;

/* Vtable slots of ICorProfilerInfo* methods, for C code without corprof.h: call slot N of
 * an object `o` as ((HRESULT (*)(void *, ...))(*(void ***)o)[N])(o, ...). */
enum {
    SIMCLR_SLOT_QUERY_INTERFACE = 0,
    SIMCLR_SLOT_RELEASE = 2,
    SIMCLR_SLOT_GET_THREAD_INFO = 12,
    SIMCLR_SLOT_GET_CURRENT_THREAD_ID = 13,
    SIMCLR_SLOT_GET_CLASS_ID_INFO = 14,
    SIMCLR_SLOT_GET_FUNCTION_INFO = 15,
    SIMCLR_SLOT_SET_EVENT_MASK = 16,
    SIMCLR_SLOT_GET_TOKEN_AND_METADATA_FROM_FUNCTION = 19,
    SIMCLR_SLOT_GET_MODULE_INFO = 20,
    SIMCLR_SLOT_GET_MODULE_METADATA = 21,
    SIMCLR_SLOT_DO_STACK_SNAPSHOT = 36,
    SIMCLR_SLOT_GET_FUNCTION_FROM_IP2 = 76,
    SIMCLR_SLOT_SUSPEND_RUNTIME = 97,
    SIMCLR_SLOT_RESUME_RUNTIME = 98,
    /* IMetaDataImport */
    SIMCLR_SLOT_GET_TYPE_DEF_PROPS = 12,
    SIMCLR_SLOT_GET_METHOD_PROPS = 30
};

/* Builds a runtime from a scenario file (TOML, docs/scenario-format.md). NULL on error, with
 * the message in *error. */
simclr_runtime *simclr_runtime_from_file(const char *path, char **error);

/* Builds a runtime from scenario text; `name` names it in messages. */
simclr_runtime *simclr_runtime_from_string(const char *name, const char *toml, char **error);

/* Frees a runtime, detaching its profiler first (Shutdown, then the last Release). */
void simclr_runtime_free(simclr_runtime *runtime);

/* The runtime's ICorProfilerInfo* (an IUnknown*), with one reference for the caller; valid
 * until simclr_runtime_free. NULL for a NULL runtime. */
void *simclr_profiler_info(const simclr_runtime *runtime);

/* Attaches profiler object `callback` (an ICorProfilerCallback2*; one reference taken) as
 * CoreCLR does at startup: Initialize with the runtime's ICorProfilerInfo*, then
 * ModuleLoadFinished and ThreadCreated for what exists. Returns Initialize's HRESULT
 * (E_POINTER for NULL arguments, E_UNEXPECTED when a profiler is already attached). */
int32_t simclr_attach(simclr_runtime *runtime, void *callback);

/* Runs f(data) as scenario thread `thread` calling from `context`: "thread", "pinvoke", or a
 * callback's name ("ObjectAllocated", "GarbageCollectionStarted", "ExceptionThrown",
 * "ThreadDestroyed", "FunctionEnter", "ModuleLoadFinished"). Returns 0, or -1 for an unknown
 * thread or context. */
int simclr_on_thread(const simclr_runtime *runtime, const char *thread, const char *context,
                     void (*f)(void *data), void *data);

/* Raises `callback` (a name as above) on `thread` into the attached profiler. Returns the
 * profiler's HRESULT, S_FALSE (1) when it is not raised (no profiler, not in the event mask,
 * no such managed thread), E_INVALIDARG for an unknown callback. */
int32_t simclr_raise(const simclr_runtime *runtime, const char *thread, const char *callback);

/* Runs a scenario file's calls on a fresh runtime: the report as JSON, or NULL and *error. */
char *simclr_run_scenario(const char *path, char **error);

/* Explores up to `schedules` schedules of a scenario file's process from `seed` with the
 * file's strategy: the exploration report as JSON, or NULL and *error. */
char *simclr_explore_scenario(const char *path, uint64_t schedules, uint64_t seed, char **error);

/* The same with a native profiler library hosted afresh in every run (as `simclr explore
 * --profiler`): `library` is its path, `clsid` the class DllGetClassObject is asked for
 * ("{2C0F6A1E-7B3D-4E21-8F5A-112233445501}"); the threads it creates with pthread_create are
 * the file's threads declared start = "profiler". On Linux each run is in a worker process of
 * its own, as the command's are: a crash, std::terminate or hang (10 s of wall-clock time) of
 * the library ends that run as profiler_crash or profiler_hang, never the caller. The report
 * as JSON (its first_failure and each entry of failures with a "replay" command line that
 * reproduces it), or NULL and *error. */
char *simclr_explore_profiler(const char *path, const char *library, const char *clsid, uint64_t schedules,
                              uint64_t seed, char **error);

/* Frees a string this library returned. */
void simclr_string_free(char *s);

#ifdef __cplusplus
}
#endif

#endif /* SIMCLR_H */
