/* A profiler library whose static constructor starts a thread of its own: it runs inside the
 * loader, before any import of the library can be redirected, so the thread is a real OS
 * thread outside every schedule. The profiler itself does nothing. */
#include <pthread.h>
#include <unistd.h>
#include "../../../include/simclr_com.h"

static const GUID CLSID_CTOR_THREAD = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0xaa, 0x01}};

static void *idle(void *unused) {
    (void)unused;
    for (;;) pause();
    return NULL;
}

__attribute__((constructor)) static void start_at_load(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, idle, NULL) == 0) pthread_detach(t);
}

static HRESULT initialize(Object *self, Object *unknown) {
    (void)self;
    (void)unknown;
    return S_OK;
}

static void set_callbacks(void **slots) { slots[CB_INITIALIZE] = (void *)initialize; }

SIMCLR_ONE_CLASS(CLSID_CTOR_THREAD)
