/* hs_signals: a C SIGTERM handler that wakes a hotspan thread (see hs_signals.h for why). */
#define _GNU_SOURCE
#include "hs_signals.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* The pipe's ends. The handler reads pipe_w with a relaxed load: it only ever sees a valid
 * descriptor or -1 (uninstall stores -1 before closing). */
static atomic_int pipe_r = -1;
static atomic_int pipe_w = -1;
/* Set by the first SIGTERM: a second one kills at once, as it would without hotspan (a
 * flush that takes too long must not make the process unkillable). */
static volatile sig_atomic_t received;

static void on_sigterm(int sig) {
    int saved = errno;
    if (received) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(sig, &dfl, NULL);
        raise(sig); /* blocked while this handler runs: delivered, and fatal, on return */
    } else {
        received = 1;
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
    return !(now.sa_flags & SA_SIGINFO) && now.sa_handler == on_sigterm;
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
    struct sigaction ours;
    memset(&ours, 0, sizeof ours);
    ours.sa_handler = on_sigterm;
    sigemptyset(&ours.sa_mask);
    /* SA_RESTART: the program's own blocking calls go on undisturbed; nothing waits for
     * EINTR here, the waiter thread does the work. */
    ours.sa_flags = SA_RESTART;
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
    if (!hs_sigterm_installed()) return 0;
    return open_pipe();
}
