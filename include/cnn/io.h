/* io.h — whole-file reads, atomic file writes and mkdir -p.
 *
 * Every failure returns a cnn_status with a one-line message that names the path and the problem, e.g.
 *     runs/x/model.safetensors: rename failed: No such file or directory
 *
 * Atomic writes follow the write-temp -> fsync(file) -> close -> rename -> fsync(dir)
 * sequence: the data goes to "<path>.tmp.<pid>" and only a successful cnn_afile_commit() puts it at <path>.
 * A failed or discarded write leaves no file at <path> and no temporary file; an old file at <path>, if any,
 * stays intact until the rename replaces it whole. Without the first fsync a power loss could leave a
 * correctly named file full of zeros.
 *
 *     cnn_afile f;
 *     CNN_TRY(cnn_afile_open(&f, "runs/x/state.json"));
 *     cnn_status st = cnn_afile_write(&f, text, strlen(text));
 *     if (st == CNN_OK) return cnn_afile_commit(&f);   // commit cleans up on failure too
 *     cnn_afile_discard(&f);
 *     return st;
 */
#ifndef CNN_IO_H
#define CNN_IO_H

#include "cnn/cnn.h"

/* Read a whole file. Fails with CNN_E_IO naming the path (missing, unreadable, a directory) or CNN_E_FORMAT when
 * the file holds more than max_bytes. On success *out is malloc'd (the caller frees it) and holds *len bytes
 * followed by one NUL byte that *len does not count, so a text file can be used as a C string. */
cnn_status cnn_read_file(const char *path, size_t max_bytes, uint8_t **out, size_t *len);

/* An atomic write in progress. `tmp` is NULL when no write is open (after a failed open, commit or discard). */
typedef struct cnn_afile {
    int fd;
    char *path; /* the final name                  */
    char *tmp;  /* "<path>.tmp.<pid>", written first */
} cnn_afile;

/* Create "<path>.tmp.<pid>" (truncating a stale one). On failure *f is left closed (discard is a no-op). */
cnn_status cnn_afile_open(cnn_afile *f, const char *path);
/* Append n bytes; retries short writes and EINTR. On failure (ENOSPC, EFBIG, EIO, ...) returns CNN_E_IO and
 * discards the write: the temporary file is removed and later calls on f fail. */
cnn_status cnn_afile_write(cnn_afile *f, const void *buf, size_t n);
/* fsync(file) -> close -> rename to path -> fsync(directory). On any failure before the rename the temporary
 * file is removed and the old file at path is untouched. Either way f is closed afterwards. */
cnn_status cnn_afile_commit(cnn_afile *f);
/* Abandon the write: close and remove the temporary file. Safe on a closed, failed or committed cnn_afile. */
void cnn_afile_discard(cnn_afile *f);

/* Lock directory dir for this process: an exclusive flock on dir/.lock, which then holds our pid. The lock goes
 * with the process (a killed run leaves no stale lock). Held by another process: CNN_E_IO naming its pid.
 * *fd receives the descriptor to pass to cnn_dir_unlock. */
cnn_status cnn_dir_lock(const char *dir, int *fd);
void cnn_dir_unlock(int fd);

/* Remove the temporary files "<name>.tmp.<pid>" and "<name>.tmp.<pid>.<n>" in dir (left by atomic writes that
 * never finished) whose process no longer exists. Returns how many were removed; a directory that cannot be
 * read counts none. */
int cnn_remove_stale_tmp(const char *dir);

/* Create a directory and any missing parents, like `mkdir -p`. An existing directory is fine; an existing
 * non-directory is CNN_E_IO. */
cnn_status cnn_mkdir_p(const char *path);

#endif
