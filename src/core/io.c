/* io.c — whole-file reads, atomic writes (temp -> fsync -> close -> rename -> fsync dir) and mkdir -p.
 * Contract in include/cnn/io.h: every failure is a status with a one-line message naming the path; a failed or
 * discarded atomic write leaves neither a file at the final path nor a temporary file. POSIX only. */
#include "cnn/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* A malloc'd copy of s, or NULL with CNN_E_OOM recorded. */
static char *dup_str(const char *s, const char *what) {
    size_t n = strlen(s) + 1;
    char *d = cnn_malloc(n, what);
    if (d) memcpy(d, s, n);
    return d;
}

/* ---- reading ------------------------------------------------------------------------------------------ */

cnn_status cnn_read_file(const char *path, size_t max_bytes, uint8_t **out, size_t *len) {
    CNN_ASSERT(path && out && len);
    *out = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cnn_fail(CNN_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return cnn_fail(CNN_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(sb.st_mode)) {
        close(fd);
        return cnn_fail(CNN_E_IO, "%s: is a directory, not a file", path);
    }
    if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > max_bytes) {
        close(fd);
        return cnn_fail(CNN_E_FORMAT, "%s: file is %llu bytes, more than the limit of %zu", path,
                        (unsigned long long)sb.st_size, max_bytes);
    }
    if (max_bytes > SIZE_MAX - 2) max_bytes = SIZE_MAX - 2; /* room for the + 1s below */
    /* Regular files: the size is known (read one byte more to notice a file that grew). Pipes and /proc files
     * report 0, so the buffer grows by doubling, never past max_bytes + 1. */
    size_t cap = S_ISREG(sb.st_mode) ? (size_t)sb.st_size + 1 : 65536;
    if (cap > max_bytes + 1) cap = max_bytes + 1;
    uint8_t *buf = cnn_malloc(cap + 1, path); /* + 1 for the terminating NUL */
    if (!buf) {
        close(fd);
        return CNN_E_OOM;
    }
    size_t n = 0;
    for (;;) {
        if (n == cap) {
            if (n > max_bytes) break; /* read max_bytes + 1: too large */
            size_t ncap = cap > max_bytes / 2 ? max_bytes + 1 : cap * 2;
            uint8_t *nb = realloc(buf, ncap + 1);
            if (!nb) {
                free(buf);
                close(fd);
                return cnn_fail(CNN_E_OOM, "%s: out of host memory reading %zu bytes", path, ncap);
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(buf);
            close(fd);
            return cnn_fail(CNN_E_IO, "%s: read failed: %s", path, strerror(e));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    if (n > max_bytes) {
        free(buf);
        return cnn_fail(CNN_E_FORMAT, "%s: file is more than the limit of %zu bytes", path, max_bytes);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return CNN_OK;
}

/* ---- atomic writes ------------------------------------------------------------------------------------ */

static void afile_release(cnn_afile *f) {
    free(f->path);
    free(f->tmp);
    f->path = f->tmp = NULL;
    f->fd = -1;
}

cnn_status cnn_afile_open(cnn_afile *f, const char *path) {
    CNN_ASSERT(f && path);
    f->fd = -1;
    f->path = f->tmp = NULL;
    if (!path[0]) return cnn_fail(CNN_E_INVALID, "cannot write a file with an empty path");
    char suffix[32];
    int sn = snprintf(suffix, sizeof suffix, ".tmp.%ld", (long)getpid());
    size_t plen = strlen(path);
    f->path = dup_str(path, "file path");
    f->tmp = cnn_malloc(plen + (size_t)sn + 1, "temporary file path");
    if (!f->path || !f->tmp) {
        afile_release(f);
        return CNN_E_OOM;
    }
    memcpy(f->tmp, path, plen);
    memcpy(f->tmp + plen, suffix, (size_t)sn + 1);
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (f->fd < 0) {
        int e = errno;
        cnn_status st = cnn_fail(CNN_E_IO, "%s: cannot create temporary file %s: %s", path, f->tmp, strerror(e));
        afile_release(f);
        return st;
    }
    return CNN_OK;
}

cnn_status cnn_afile_write(cnn_afile *f, const void *buf, size_t n) {
    CNN_ASSERT(f);
    if (!f->tmp) return cnn_fail(CNN_E_INVALID, "write to an atomic file that is not open (failed or closed)");
    const uint8_t *p = buf;
    while (n > 0) {
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t w = write(f->fd, p, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            cnn_status st = cnn_fail(CNN_E_IO, "%s: write failed: %s", f->path, strerror(e));
            cnn_afile_discard(f);
            return st;
        }
        p += w;
        n -= (size_t)w;
    }
    return CNN_OK;
}

/* The directory holding path: "a/b/c" -> "a/b", "c" -> ".", "/c" -> "/". malloc'd. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return dup_str(".", "directory path");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = cnn_malloc(n + 1, "directory path");
    if (d) {
        memcpy(d, path, n);
        d[n] = 0;
    }
    return d;
}

cnn_status cnn_afile_commit(cnn_afile *f) {
    CNN_ASSERT(f);
    if (!f->tmp) return cnn_fail(CNN_E_INVALID, "commit of an atomic file that is not open (failed or closed)");
    const char *step = NULL;
    if (fsync(f->fd) != 0) step = "fsync failed";
    int e = errno;
    if (close(f->fd) != 0 && !step) {
        step = "close failed";
        e = errno;
    }
    f->fd = -1;
    if (!step && rename(f->tmp, f->path) != 0) {
        step = "rename failed";
        e = errno;
    }
    if (step) {
        cnn_status st = cnn_fail(CNN_E_IO, "%s: %s: %s", f->path, step, strerror(e));
        unlink(f->tmp);
        afile_release(f);
        return st;
    }
    /* The rename is durable only once the directory entry is on disk. */
    cnn_status st = CNN_OK;
    char *dir = dir_of(f->path);
    if (!dir) {
        st = CNN_E_OOM;
    } else {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) {
            st = cnn_fail(CNN_E_IO, "%s: cannot open directory %s to fsync it: %s", f->path, dir, strerror(errno));
        } else {
            /* EINVAL/ENOTSUP: this file system cannot sync directories; nothing more can be done. */
            if (fsync(dfd) != 0 && errno != EINVAL && errno != ENOTSUP)
                st = cnn_fail(CNN_E_IO, "%s: fsync of directory %s failed: %s (the new file is in place)", f->path, dir,
                              strerror(errno));
            close(dfd);
        }
        free(dir);
    }
    afile_release(f);
    return st;
}

void cnn_afile_discard(cnn_afile *f) {
    if (!f || !f->tmp) return;
    if (f->fd >= 0) close(f->fd);
    unlink(f->tmp);
    afile_release(f);
}

/* ---- directories -------------------------------------------------------------------------------------- */

/* mkdir one directory; an existing directory is fine. */
static cnn_status mkdir_one(const char *dir, const char *full) {
    if (mkdir(dir, 0777) == 0) return CNN_OK;
    int e = errno;
    struct stat sb;
    /* Existing directories may also answer EACCES or EROFS rather than EEXIST. */
    if (stat(dir, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) return CNN_OK;
        return cnn_fail(CNN_E_IO, "%s: cannot create directory: %s exists and is not a directory", full, dir);
    }
    return cnn_fail(CNN_E_IO, "%s: cannot create directory %s: %s", full, dir, strerror(e));
}

cnn_status cnn_mkdir_p(const char *path) {
    CNN_ASSERT(path);
    if (!path[0]) return cnn_fail(CNN_E_INVALID, "cannot create a directory with an empty path");
    char *p = dup_str(path, "directory path");
    if (!p) return CNN_E_OOM;
    cnn_status st = CNN_OK;
    /* Each prefix ending before a '/' (skipping the root and repeated slashes), then the whole path. */
    for (char *s = p + 1; *s && st == CNN_OK; s++) {
        if (*s != '/' || s[-1] == '/') continue;
        *s = 0;
        st = mkdir_one(p, path);
        *s = '/';
    }
    if (st == CNN_OK) st = mkdir_one(p, path);
    free(p);
    return st;
}

/* ---- locks and leftovers ------------------------------------------------------------------------------ */

cnn_status cnn_dir_lock(const char *dir, int *fd) {
    *fd = -1;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/.lock", dir) >= (int)sizeof path)
        return cnn_fail(CNN_E_INVALID, "%s: path too long", dir);
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (f < 0) return cnn_fail(CNN_E_IO, "%s: cannot create the lock file: %s", path, strerror(errno));
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = pread(f, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(f);
        if (e == EWOULDBLOCK)
            return cnn_fail(CNN_E_IO, "%s is in use by another run (pid %s): two runs cannot share an output directory",
                            dir, pid[0] ? pid : "unknown");
        return cnn_fail(CNN_E_IO, "%s: cannot lock: %s", path, strerror(e));
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(f, 0) != 0 || pwrite(f, pid, (size_t)n, 0) != n) {
        int e = errno;
        close(f);
        return cnn_fail(CNN_E_IO, "%s: cannot write the lock file: %s", path, strerror(e));
    }
    *fd = f;
    return CNN_OK;
}

void cnn_dir_unlock(int fd) {
    if (fd >= 0) close(fd); /* closing releases the flock */
}

/* The pid of a temporary file name "<name>.tmp.<pid>" or "<name>.tmp.<pid>.<n>", or 0. */
static long tmp_pid(const char *name) {
    const char *t = NULL;
    for (const char *p = strstr(name, ".tmp."); p; p = strstr(p + 1, ".tmp.")) t = p;
    if (!t || t == name) return 0;
    long pid = 0;
    const char *p = t + 5;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 10; p++, digits++) pid = pid * 10 + (*p - '0');
    if (digits == 0) return 0;
    if (*p == '.') {
        const char *q = p + 1;
        if (!*q) return 0;
        for (; *q; q++)
            if (*q < '0' || *q > '9') return 0;
    } else if (*p) {
        return 0;
    }
    return pid;
}

int cnn_remove_stale_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid = tmp_pid(e->d_name);
        if (pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to ask about): keep */
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        struct stat sb;
        if (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && unlink(path) == 0) {
            removed++;
            cnn_log(2, "cnn: removed %s (left by process %ld, which no longer runs)", path, pid);
        }
    }
    closedir(d);
    return removed;
}
