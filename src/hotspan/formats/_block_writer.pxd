# cython: language_level=3
"""A file written from a thread of its own, shared by both trace codecs' writers
(``_chrome_codec``, ``_perfetto_codec``): the encoder fills one of two buffers while the
thread hands the other to write(2), so that the kernel's copy into the page cache overlaps
the encoding instead of following it, and starts each block's writeback as soon as it is
written, so that the exporter's final fsync() finds little left to do.

C code included verbatim in each codec that cimports it (a ``.pxd`` used as a header):
one implementation, no extra module to import.
"""

cdef extern from *:
    """
    #include <fcntl.h>
    #include <unistd.h>
    #include <errno.h>
    #include <pthread.h>
    /* Start the disk write of a block just written (Linux; elsewhere nothing), so that the
       writeback overlaps the formatting of the next blocks and the exporter's final
       fsync() finds little left to do. Only a hint: errors are left to that fsync(). */
    #if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
    static void hs_start_writeback(int fd, long long offset, long long n) {
        (void)sync_file_range(fd, (off_t)offset, (off_t)n, SYNC_FILE_RANGE_WRITE);
    }
    #else
    static void hs_start_writeback(int fd, long long offset, long long n) { (void)fd; (void)offset; (void)n; }
    #endif
    /* All n bytes to fd (short writes and EINTR retried); -1 with errno on failure. */
    static int hs_write_all(int fd, const char* p, long long n) {
        while (n > 0) {
            ssize_t w = write(fd, p, (size_t)n);
            if (w < 0) {
                if (errno == EINTR) continue;
                return -1;
            }
            p += w;
            n -= w;
        }
        return 0;
    }
    /* One background thread that writes the block the formatter hands it (one at a time)
       while the formatter fills the other of two buffers: the kernel's copy into the page
       cache (about as long as the formatting) overlaps it instead of following it. */
    typedef struct {
        pthread_t thread;
        pthread_mutex_t mutex;
        pthread_cond_t cond;
        int fd, busy, stop, error, started;
        const char* data;
        long long length, offset;
    } hs_writer;
    static void* hs_writer_main(void* arg) {
        hs_writer* w = (hs_writer*)arg;
        pthread_mutex_lock(&w->mutex);
        for (;;) {
            while (!w->busy && !w->stop) pthread_cond_wait(&w->cond, &w->mutex);
            if (!w->busy) break;
            const char* data = w->data;
            long long length = w->length, offset = w->offset;
            pthread_mutex_unlock(&w->mutex);
            int error = hs_write_all(w->fd, data, length) ? errno : 0;
            if (!error) hs_start_writeback(w->fd, offset, length);
            pthread_mutex_lock(&w->mutex);
            if (error && !w->error) w->error = error;
            w->offset += length;
            w->busy = 0;
            pthread_cond_broadcast(&w->cond);
        }
        pthread_mutex_unlock(&w->mutex);
        return NULL;
    }
    /* 0, or an errno (the thread could not start). */
    static int hs_writer_start(hs_writer* w, int fd, long long offset) {
        w->fd = fd; w->busy = 0; w->stop = 0; w->error = 0; w->offset = offset; w->started = 0;
        pthread_mutex_init(&w->mutex, NULL);
        pthread_cond_init(&w->cond, NULL);
        int rc = pthread_create(&w->thread, NULL, hs_writer_main, w);
        if (rc) {
            pthread_mutex_destroy(&w->mutex);
            pthread_cond_destroy(&w->cond);
            return rc;
        }
        w->started = 1;
        return 0;
    }
    /* Wait for the block being written; returns the first write error (an errno) or 0. */
    static int hs_writer_wait(hs_writer* w) {
        pthread_mutex_lock(&w->mutex);
        while (w->busy) pthread_cond_wait(&w->cond, &w->mutex);
        int error = w->error;
        pthread_mutex_unlock(&w->mutex);
        return error;
    }
    /* Hand over a block (after the previous one is written); an errno if one failed. */
    static int hs_writer_submit(hs_writer* w, const char* data, long long length) {
        pthread_mutex_lock(&w->mutex);
        while (w->busy) pthread_cond_wait(&w->cond, &w->mutex);
        int error = w->error;
        if (!error) {
            w->data = data; w->length = length; w->busy = 1;
            pthread_cond_broadcast(&w->cond);
        }
        pthread_mutex_unlock(&w->mutex);
        return error;
    }
    /* Finish the last block, end the thread; the first write error or 0. */
    static int hs_writer_stop(hs_writer* w) {
        if (!w->started) return 0;
        int error = hs_writer_wait(w);
        pthread_mutex_lock(&w->mutex);
        w->stop = 1;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->mutex);
        pthread_join(w->thread, NULL);
        pthread_mutex_destroy(&w->mutex);
        pthread_cond_destroy(&w->cond);
        w->started = 0;
        return error;
    }
    """
    ctypedef struct hs_writer:
        pass
    int hs_writer_start(hs_writer* w, int fd, long long offset) nogil
    int hs_writer_submit(hs_writer* w, const char* data, long long length) nogil
    int hs_writer_stop(hs_writer* w) nogil
