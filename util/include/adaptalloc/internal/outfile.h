/*
 * adaptalloc/internal/outfile.h — the one rule for the files adaptalloc's
 * programs write (util/src/outfile.c; its Python twin is
 * python/adaptalloc/_outfile.py): an output is never one of the inputs (by
 * file identity: ./x, a symlink and a hard link all count), checked before
 * any work, and written through a temporary file created exclusively
 * (mkstemp: O_EXCL, a random name) in the target's directory, then renamed
 * over it, so a failure leaves the old output as it was and a link planted
 * at a predictable name is never followed. Internal (aa__), never
 * installed: programs reach it through the CMake target aa_util_headers.
 *
 * Glossary:
 *   target   the file the rename replaces: the output's path with its
 *            symlinks resolved (a link stays a link).
 *   in place an output that is not a regular file (stdout, /dev/null, a
 *            FIFO) is written directly: there is nothing to rename over.
 */
#ifndef AA_INTERNAL_OUTFILE_H
#define AA_INTERNAL_OUTFILE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

typedef struct aa__outfile {
  const char *path;      /* as given */
  char target[PATH_MAX]; /* the file the rename replaces (symlinks resolved) */
  char tmp[PATH_MAX];    /* the temporary file; "" when written in place */
  FILE *f;               /* aa__out_open: where to write */
  bool db;               /* aa__out_open_db: a copy of the database to import into */
  bool had;              /* the database existed: its size and mtime */
  uint64_t size, mtime_ns;
} aa__outfile;

/* Before any work: refuses (AA_EINVAL, err names what is wrong, prefixed by
 * what) an output that is one of inputs[0..n) by file identity (only
 * regular files count; "-" is stdin/stdout; NULL inputs are skipped), a
 * directory, a dangling symlink, a missing or unwritable directory, an
 * empty path. AA_OK when the output can be written. */
int aa__out_check(const char *what, const char *path, const char *const *inputs,
                  size_t ninputs, char *err, size_t errcap);
/* A temporary file beside path (its mode, or new_mode under the umask);
 * "-" is stdout and a non-regular file is written in place. AA_OK or
 * AA_EIO with err filled in. The caller ends it with aa__out_commit or
 * aa__out_abort. */
int aa__out_open(aa__outfile *o, const char *path, mode_t new_mode, char *err, size_t errcap);
/* For an import: o->tmp is a copy of the database at path (empty, mode
 * 0600, when there is none) for the store to open. AA_EBUSY when path-wal
 * exists (the database is open elsewhere). */
int aa__out_open_db(aa__outfile *o, const char *path, char *err, size_t errcap);
/* Flushes, syncs, closes and renames the temporary into place; on failure
 * removes it (the old output is as it was). */
int aa__out_commit(aa__outfile *o, char *err, size_t errcap);
/* Closes and removes the temporary file (and SQLite's side files). */
void aa__out_abort(aa__outfile *o);

#endif /* AA_INTERNAL_OUTFILE_H */
