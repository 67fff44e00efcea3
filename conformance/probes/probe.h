/* What every lane probe shares: the file its one line goes to. */
#ifndef SIMCLR_PROBE_H
#define SIMCLR_PROBE_H
#include <stdio.h>
#include <stdlib.h>

/* The file $PROBE_OUT names, opened for writing; NULL when it is unset or cannot be opened. */
static FILE *probe_out(void) {
    const char *path = getenv("PROBE_OUT");
    return path ? fopen(path, "w") : NULL;
}

#endif
