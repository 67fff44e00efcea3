/* The lane's probe of the profiler's end: counts Shutdown and the Releases of the profiler
 * object that come after it, and writes them, one line, to the file $PROBE_OUT names when the
 * process exits (an atexit handler, which runs after the runtime has shut down). */
#include <stdio.h>
#include <stdlib.h>
#include "../../include/simclr_com.h"
#include "probe.h"

static const GUID CLSID_PROBE = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0xbb, 0x04}};

static int shutdowns, releases_at_shutdown;

static void report(void) {
    FILE *out = probe_out();
    if (!out) return;
    fprintf(out, "shutdown: Shutdown %d, Releases of the profiler after it %d\n", shutdowns,
            profiler_releases() - releases_at_shutdown);
    fclose(out);
}

static HRESULT initialize(Object *self, Object *unknown) {
    (void)self;
    (void)unknown;
    atexit(report);
    return S_OK;
}

static HRESULT shutdown(Object *self) {
    (void)self;
    shutdowns++;
    releases_at_shutdown = profiler_releases();
    return S_OK;
}

static void set_callbacks(void **slots) {
    slots[CB_INITIALIZE] = (void *)initialize;
    slots[CB_SHUTDOWN] = (void *)shutdown;
}

SIMCLR_ONE_CLASS(CLSID_PROBE)
