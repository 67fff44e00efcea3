/* Native code that blocks through the C library: two mutexes taken in the caller's order
   with a sleep in between, a try-lock, and sleeps. Run on simulated threads of a running
   process, these calls are the process's own mutexes and virtual time. */
#define _DEFAULT_SOURCE
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t first = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t second = PTHREAD_MUTEX_INITIALIZER;

/* Takes both mutexes, in the order "12" or "21", sleeping 1 ms while holding the first. */
void take_both(const char *order) {
    pthread_mutex_t *a = order[0] == '1' ? &first : &second;
    pthread_mutex_t *b = a == &first ? &second : &first;
    pthread_mutex_lock(a);
    usleep(1000);
    pthread_mutex_lock(b);
    pthread_mutex_unlock(b);
    pthread_mutex_unlock(a);
}

/* 1 when `first` was free (it is released again), 0 when another thread holds it. */
int first_is_free(void) {
    if (pthread_mutex_trylock(&first) != 0) {
        return 0;
    }
    pthread_mutex_unlock(&first);
    return 1;
}

/* Holds `first` for 5 ms. */
void hold_first(void) {
    pthread_mutex_lock(&first);
    usleep(5000);
    pthread_mutex_unlock(&first);
}

/* Sleeps 2.5 s with nanosleep, then 1 s with sleep. */
void nap(void) {
    struct timespec t = {2, 500000000};
    nanosleep(&t, NULL);
    sleep(1);
}
