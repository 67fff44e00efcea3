/* The lane's probe of the ICorProfilerInfo interfaces a runtime offers: in Initialize the
 * profiler asks for ICorProfilerInfo10 to ICorProfilerInfo15 and writes which it got, one
 * line, to the file $PROBE_OUT names. */
#include <stdio.h>
#include <stdlib.h>
#include "../../include/simclr_com.h"
#include "probe.h"

static const GUID CLSID_PROBE = {0x2c0f6a1e, 0x7b3d, 0x4e21, {0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0xbb, 0x05}};
static const GUID INFO[] = {
    {0x2F1B5152, 0xC869, 0x40C9, {0xAA, 0x5F, 0x3A, 0xBE, 0x02, 0x6B, 0xD7, 0x20}}, /* 10 */
    {0x06398876, 0x8987, 0x4154, {0xB6, 0x21, 0x40, 0xA0, 0x0D, 0x6E, 0x4D, 0x04}}, /* 11 */
    {0x27B24CCD, 0x1CB1, 0x47C5, {0x96, 0xEE, 0x98, 0x19, 0x0D, 0xC3, 0x09, 0x59}}, /* 12 */
    {0x6E6C7EE2, 0x0701, 0x4EC2, {0x9D, 0x29, 0x2E, 0x87, 0x33, 0xB6, 0x69, 0x34}}, /* 13 */
    {0xF460E352, 0xD76D, 0x4FE9, {0x83, 0x5F, 0xF6, 0xAF, 0x9D, 0x6E, 0x86, 0x2D}}, /* 14 */
    {0xB446462D, 0xBD22, 0x41DD, {0x87, 0x2D, 0xDC, 0x71, 0x4C, 0x49, 0xEB, 0x56}}, /* 15 */
};

static HRESULT initialize(Object *self, Object *unknown) {
    typedef HRESULT (*QueryInterface)(Object *, const GUID *, void **);
    (void)self;
    FILE *out = probe_out();
    if (!out) return S_OK;
    fprintf(out, "interfaces:");
    for (int i = 0; i < (int)(sizeof INFO / sizeof INFO[0]); i++) {
        Object *got = NULL;
        HRESULT hr = ((QueryInterface)unknown->vtbl[SLOT_QI])(unknown, &INFO[i], (void **)&got);
        fprintf(out, " Info%d %s", 10 + i, hr == S_OK && got ? "yes" : "no");
        if (hr == S_OK && got) ((HRESULT(*)(Object *))got->vtbl[SLOT_RELEASE])(got);
    }
    fprintf(out, "\n");
    fclose(out);
    return S_OK;
}

static void set_callbacks(void **slots) { slots[CB_INITIALIZE] = (void *)initialize; }

SIMCLR_ONE_CLASS(CLSID_PROBE)
