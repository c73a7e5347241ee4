/* hs_signals: a C SIGTERM handler that wakes a hotspan thread (see hs_signals.h for why). */
#define _GNU_SOURCE
#include "hs_signals.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The value a launcher queues with a signal it passes on (hs_forward_signal). */
#define HS_FORWARD_MARK 0x68737066 /* "hspf" */
/* How long after a signal the program received directly the launcher's copy may come. It
 * is sent as soon as the launcher's handler runs (microseconds to milliseconds); the window
 * is wide for a loaded machine, and matters only to SIGINT, which a program may survive. */
#define HS_ECHO_WINDOW_NS 5000000000LL

/* Whether this signal was passed on by our launcher: queued with the mark by our parent. */
static int is_forwarded(const siginfo_t *info) {
#ifdef SI_QUEUE
    return info != NULL && info->si_code == SI_QUEUE &&
           info->si_value.sival_int == HS_FORWARD_MARK && info->si_pid == getppid();
#else
    (void)info;
    return 0;
#endif
}

int hs_forward_signal(int pid, int sig) {
#if defined(__linux__)
    union sigval value;
    memset(&value, 0, sizeof value);
    value.sival_int = HS_FORWARD_MARK;
    return sigqueue((pid_t)pid, sig, value);
#else
    return kill((pid_t)pid, sig); /* no sigqueue (macOS): unmarked, as before */
#endif
}

/* The pipe's ends. The handler reads pipe_w with a relaxed load: it only ever sees a valid
 * descriptor or -1 (uninstall stores -1 before closing). */
static atomic_int pipe_r = -1;
static atomic_int pipe_w = -1;
/* Set by the first SIGTERM: a second one kills at once, as it would without hotspan (a
 * flush that takes too long must not make the process unkillable). */
static volatile sig_atomic_t received;
/* The first SIGTERM came directly, not from our launcher: the launcher's copy of it may
 * follow (the process group was signalled), and is not a second SIGTERM. */
static volatile sig_atomic_t echo_expected;

static void on_sigterm(int sig, siginfo_t *info, void *context) {
    (void)context;
    int saved = errno;
    int forwarded = is_forwarded(info);
    if (received && forwarded && echo_expected) {
        echo_expected = 0; /* the group's SIGTERM, passed on by the launcher: already taken */
    } else if (received) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(sig, &dfl, NULL);
        raise(sig); /* blocked while this handler runs: delivered, and fatal, on return */
    } else {
        received = 1;
        echo_expected = !forwarded;
        int fd = atomic_load_explicit(&pipe_w, memory_order_relaxed);
        if (fd >= 0) {
            ssize_t n = write(fd, "T", 1);
            (void)n; /* a full pipe already holds a wake-up */
        }
    }
    errno = saved;
}

int hs_sigterm_received(void) { return received != 0; }

int hs_sigterm_installed(void) {
    struct sigaction now;
    if (sigaction(SIGTERM, NULL, &now) != 0) return 0;
    return (now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigterm;
}

static int open_pipe(void) {
    int fds[2];
#if defined(__linux__) || defined(__FreeBSD__) || defined(__NetBSD__) || defined(__OpenBSD__)
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
#else
    /* macOS has pipe2 only from version 27: set close-on-exec by hand. A fork+exec by
     * another thread between the two calls may leak the ends into that one child (which
     * never writes them); the pipe itself works the same. */
    if (pipe(fds) != 0) return -1;
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
#endif
    /* the handler must never block on a full pipe */
    fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
    atomic_store(&pipe_r, fds[0]);
    atomic_store(&pipe_w, fds[1]);
    return 0;
}

static void close_pipe(void) {
    int w = atomic_exchange(&pipe_w, -1);
    if (w >= 0) close(w); /* a waiter reads end-of-file and returns 0 */
    /* the read end stays open while a waiter may sit in read(): closing it under that
     * thread could hand its number to an unrelated file. It is closed at the next install. */
}

int hs_sigterm_install(void) {
    if (hs_sigterm_installed()) return 1;
    struct sigaction now;
    if (sigaction(SIGTERM, NULL, &now) != 0) return -1;
    if ((now.sa_flags & SA_SIGINFO) || now.sa_handler != SIG_DFL) return 0;
    int r = atomic_exchange(&pipe_r, -1);
    if (r >= 0) close(r);
    if (open_pipe() != 0) return -1;
    received = 0;
    echo_expected = 0;
    struct sigaction ours;
    memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = on_sigterm;
    sigemptyset(&ours.sa_mask);
    /* SA_RESTART: the program's own blocking calls go on undisturbed; nothing waits for
     * EINTR here, the waiter thread does the work. SA_SIGINFO: who sent it (a launcher's
     * copy of a signal already taken is not a second one). */
    ours.sa_flags = SA_RESTART | SA_SIGINFO;
    if (sigaction(SIGTERM, &ours, NULL) != 0) {
        close_pipe();
        return -1;
    }
    return 1;
}

void hs_sigterm_uninstall(void) {
    if (hs_sigterm_installed()) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(SIGTERM, &dfl, NULL);
    }
    close_pipe();
}

int hs_sigterm_wait(void) {
    int fd = atomic_load(&pipe_r);
    if (fd < 0) return 0;
    char byte;
    for (;;) {
        ssize_t n = read(fd, &byte, 1);
        if (n == 1) return 1;
        if (n == 0) return 0;
        if (errno != EINTR) return 0;
    }
}

void hs_sigterm_die(void) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGTERM, &dfl, NULL);
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    /* this thread (a quiet hotspan thread) blocks SIGTERM: unblock it here, so the signal
     * is delivered to, and kills, the process now rather than whenever another thread
     * unblocks it */
    pthread_sigmask(SIG_UNBLOCK, &term, NULL);
    raise(SIGTERM);
}

int hs_sigterm_after_fork_child(void) {
    int r = atomic_exchange(&pipe_r, -1);
    int w = atomic_exchange(&pipe_w, -1);
    if (r >= 0) close(r); /* the parent's: no thread of ours reads it in this process */
    if (w >= 0) close(w);
    received = 0;
    echo_expected = 0;
    if (!hs_sigterm_installed()) return 0;
    return open_pipe();
}

/* ---- SIGINT in the program a launcher runs ------------------------------------------- */

/* The handler the filter passes SIGINT on to (Python's, a plain handler). */
static void (*sigint_next)(int);
static volatile sig_atomic_t sigint_echo_expected;
static struct timespec sigint_direct_at;

static long long ns_since(const struct timespec *then) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe */
    return (long long)(now.tv_sec - then->tv_sec) * 1000000000LL + (now.tv_nsec - then->tv_nsec);
}

static void on_sigint(int sig, siginfo_t *info, void *context) {
    (void)context;
    int saved = errno;
    if (is_forwarded(info)) {
        if (sigint_echo_expected && ns_since(&sigint_direct_at) < HS_ECHO_WINDOW_NS) {
            sigint_echo_expected = 0; /* the group's SIGINT again, from the launcher: taken */
            errno = saved;
            return;
        }
        sigint_echo_expected = 0;
    } else {
        sigint_echo_expected = 1;
        clock_gettime(CLOCK_MONOTONIC, &sigint_direct_at);
    }
    errno = saved;
    sigint_next(sig);
}

int hs_sigint_filter_install(void) {
    struct sigaction now;
    if (sigaction(SIGINT, NULL, &now) != 0) return -1;
    if (now.sa_flags & SA_SIGINFO) return now.sa_sigaction == on_sigint;
    if (now.sa_handler == SIG_DFL || now.sa_handler == SIG_IGN) return 0;
    sigint_next = now.sa_handler;
    sigint_echo_expected = 0;
    struct sigaction ours = now;
    ours.sa_sigaction = on_sigint;
    ours.sa_flags = now.sa_flags | SA_SIGINFO;
    if (sigaction(SIGINT, &ours, NULL) != 0) return -1;
    return 1;
}
