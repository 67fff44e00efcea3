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

/* Read-write locks, one-time initialization, semaphores and more clocks. `reset` (called
   between runs, outside the simulation) puts every object back to its initial state. */
#include <poll.h>
#include <semaphore.h>
#include <string.h>
#include <sys/time.h>

static pthread_rwlock_t shared = PTHREAD_RWLOCK_INITIALIZER;
static sem_t handoff;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_done, init_runs, too_early;
static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t gated_once = PTHREAD_ONCE_INIT;
static sem_t binary;

void reset(void) {
    memset(&shared, 0, sizeof shared);
    memset(&handoff, 0, sizeof handoff);
    memset(&once, 0, sizeof once);
    memset(&gated_once, 0, sizeof gated_once);
    sem_init(&binary, 0, 1);
    init_done = init_runs = too_early = 0;
}

/* A once-routine that takes `gate`. */
static void gated_init(void) {
    pthread_mutex_lock(&gate);
    pthread_mutex_unlock(&gate);
}

/* Runs the gated once-routine (or waits for the thread running it). */
void once_taking_gate(void) { pthread_once(&gated_once, gated_init); }

/* Holds `gate` across a pthread_once of the same control: while another thread runs the
   routine, which waits for `gate`, a deadlock through the once-control. */
void gate_then_once(void) {
    pthread_mutex_lock(&gate);
    usleep(10);
    pthread_once(&gated_once, gated_init);
    pthread_mutex_unlock(&gate);
}

/* Takes the binary semaphore, then `gate`. */
void semaphore_then_gate(void) {
    sem_wait(&binary);
    usleep(10);
    pthread_mutex_lock(&gate);
    pthread_mutex_unlock(&gate);
    sem_post(&binary);
}

/* Takes `gate`, then the binary semaphore: the other order. */
void gate_then_semaphore(void) {
    pthread_mutex_lock(&gate);
    usleep(10);
    sem_wait(&binary);
    sem_post(&binary);
    pthread_mutex_unlock(&gate);
}

/* Holds a read lock until the other thread posts the semaphore. */
void read_until_posted(void) {
    pthread_rwlock_rdlock(&shared);
    sem_wait(&handoff);
    pthread_rwlock_unlock(&shared);
}

/* Takes a read lock (or, with `write`, a write lock), then posts the semaphore. */
void lock_then_post(int write) {
    if (write) {
        pthread_rwlock_wrlock(&shared);
    } else {
        pthread_rwlock_rdlock(&shared);
    }
    sem_post(&handoff);
    pthread_rwlock_unlock(&shared);
}

static void init(void) {
    usleep(1000);
    init_runs++;
    init_done = 1;
}

/* pthread_once, then checks that the routine had finished. */
void call_init_once(void) {
    pthread_once(&once, init);
    if (!init_done) too_early++;
}

int init_runs_seen(void) { return init_runs; }
int returned_too_early(void) { return too_early; }

/* Sleeps 1.5 s with clock_nanosleep, until 0.5 s later with an absolute clock_nanosleep, then
   1 s in poll; returns the milliseconds gettimeofday saw pass, and checks time() agrees. */
long nap_with_clocks(void) {
    struct timeval before, after;
    struct timespec t = {1, 500000000}, now;
    time_t start = time(NULL);
    gettimeofday(&before, NULL);
    clock_nanosleep(CLOCK_MONOTONIC, 0, &t, NULL);
    clock_gettime(CLOCK_MONOTONIC, &now);
    now.tv_nsec += 500000000;
    if (now.tv_nsec >= 1000000000) { now.tv_sec++; now.tv_nsec -= 1000000000; }
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &now, NULL);
    poll(NULL, 0, 1000);
    gettimeofday(&after, NULL);
    if (time(NULL) - start != 3) return -1;
    return (after.tv_sec - before.tv_sec) * 1000 + (after.tv_usec - before.tv_usec) / 1000;
}
