/* Native code that would leave the simulation: blocking calls the process does not model
   (a read of an empty pipe, epoll_wait, a raw futex wait) and a thread started with clone;
   and the same calls where they return at once (data waiting, a futex word that changed, a
   zero timeout). Each export returns what the C library returned. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Reads one byte of a new pipe, after writing `written` bytes to it. */
long read_pipe(int written) {
    int ends[2];
    char byte = 'x';
    if (pipe(ends) != 0) return -2;
    if (written > 0 && write(ends[1], &byte, 1) != 1) return -3;
    long got = read(ends[0], &byte, 1);
    close(ends[0]);
    close(ends[1]);
    return got;
}

/* Waits on a new, empty epoll set for `timeout` ms (-1: for ever). */
int epoll_for(int timeout) {
    struct epoll_event event;
    int set = epoll_create1(0);
    int got = epoll_wait(set, &event, 1, timeout);
    close(set);
    return got;
}

/* FUTEX_WAIT on a word holding `word` for the value 0. */
long futex_wait_on(int word) {
    static int32_t futex;
    futex = word;
    return syscall(SYS_futex, &futex, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
}

static char stack[64 * 1024];

static int thread_start(void *argument) {
    (void)argument;
    return 0;
}

/* Starts an OS thread with clone. */
int clone_thread(void) {
    return clone(thread_start, stack + sizeof stack, CLONE_VM | CLONE_FS | CLONE_FILES | SIGCHLD, NULL);
}
