/* Timer-driven instruction-pointer sampling for benchmarks/profile_view.py.
 *
 * Where hardware counters cannot be read (both our machines are VMs: perf_event_open answers
 * ENOENT for every hardware event), a high-resolution CLOCK_MONOTONIC timer delivers SIGPROF and
 * the handler records the interrupted instruction pointer.  The time an instruction waits shows
 * up on it or on the one after it.  Linux x86-64 and aarch64 only; loaded with ctypes.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

static uint64_t *samples;   /* malloc'd by sampler_start, owned here until the process ends */
static long capacity, count;
static timer_t timer;

static void on_sigprof(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)info;
    ucontext_t *uc = (ucontext_t *)context;
    if (count < capacity) {
#if defined(__x86_64__)
        samples[count++] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
        samples[count++] = (uint64_t)uc->uc_mcontext.pc;
#endif
    }
}

/* Start sampling every period_ns; at most max_samples are kept.  0, or -1 on failure. */
int sampler_start(long max_samples, long period_ns) {
    free(samples);
    samples = calloc((size_t)max_samples, sizeof(uint64_t));
    if (samples == NULL) return -1;
    capacity = max_samples;
    count = 0;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_sigprof;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    if (sigaction(SIGPROF, &action, NULL) != 0) return -1;
    struct sigevent event;
    memset(&event, 0, sizeof event);
    event.sigev_notify = SIGEV_SIGNAL;
    event.sigev_signo = SIGPROF;
    if (timer_create(CLOCK_MONOTONIC, &event, &timer) != 0) return -1;
    struct itimerspec spec;
    spec.it_interval.tv_sec = period_ns / 1000000000L;
    spec.it_interval.tv_nsec = period_ns % 1000000000L;
    spec.it_value = spec.it_interval;
    return timer_settime(timer, 0, &spec, NULL);
}

/* Stop sampling; the number of samples taken. */
long sampler_stop(void) {
    struct itimerspec off;
    memset(&off, 0, sizeof off);
    timer_settime(timer, 0, &off, NULL);
    timer_delete(timer);
    signal(SIGPROF, SIG_IGN);
    return count;
}

/* The samples (valid until the next sampler_start). */
const uint64_t *sampler_samples(void) { return samples; }
