/*
 * outfile.c — how adaptalloc's programs write their outputs (the replay
 * tool's export CSV and torch snapshot, suggest's policy, import's
 * database, the plots) without ever losing data; the rule of
 * adaptalloc/internal/outfile.h, whose Python twin is
 * python/adaptalloc/_outfile.py:
 *
 *   - aa__out_check refuses, before any work, an output that is one of the
 *     inputs (by file identity, st_dev and st_ino, so ./x.db and x.db,
 *     symlinks and hard links all count), a missing or unwritable directory,
 *     a directory, a dangling symlink;
 *   - aa__out_open / aa__out_open_db write into a temporary file in the target's
 *     directory (symlinks resolved, so the link stays a link) with the
 *     target's mode (new files: the caller's mode under the umask);
 *     aa__out_commit renames it into place, aa__out_abort removes it, so a failure
 *     leaves the old output as it was and creates nothing.
 *
 * An output that is not a regular file (stdout, /dev/null, a FIFO) is
 * written in place: there is nothing to rename over.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adaptalloc/common.h"
#include "adaptalloc/internal/outfile.h"

/* The last component of path. */
static const char *base_of(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

/* The directory part of path into buf ("." when there is none). */
static void dir_of(const char *path, char *buf, size_t cap) {
  const char *slash = strrchr(path, '/');

  if (slash == NULL)
    snprintf(buf, cap, ".");
  else if (slash == path)
    snprintf(buf, cap, "/");
  else
    snprintf(buf, cap, "%.*s", (int)(slash - path), path);
}

/* stat of an input: "-" is stdin. */
static int stat_input(const char *path, struct stat *sb) {
  if (strcmp(path, "-") == 0)
    return fstat(0, sb);
  return stat(path, sb);
}

int aa__out_check(const char *what, const char *path, const char *const *inputs,
                  size_t ninputs, char *err, size_t errcap) {
  struct stat ob, ib, lb;
  char dir[PATH_MAX];
  bool exists;
  size_t i;

  err[0] = '\0';
  if (path == NULL || path[0] == '\0') {
    snprintf(err, errcap, "%s: the output path is empty", what);
    return AA_EINVAL;
  }
  if (strcmp(path, "-") == 0) {
    exists = fstat(1, &ob) == 0;
  } else {
    exists = stat(path, &ob) == 0;
    if (!exists && errno != ENOENT) {
      snprintf(err, errcap, "%s: %s: %s", what, path, strerror(errno));
      return AA_EINVAL;
    }
    if (!exists && lstat(path, &lb) == 0) {
      snprintf(err, errcap, "%s: %s is a symlink to a missing file; name the file itself",
               what, path);
      return AA_EINVAL;
    }
  }
  if (exists && S_ISDIR(ob.st_mode)) {
    snprintf(err, errcap, "%s: %s is a directory", what, path);
    return AA_EINVAL;
  }
  /* Only a regular file can be lost by being overwritten: /dev/null or a
   * terminal on both sides is no conflict. */
  for (i = 0; exists && S_ISREG(ob.st_mode) && i < ninputs; i++) {
    if (inputs[i] == NULL || stat_input(inputs[i], &ib) != 0)
      continue;
    if (ib.st_dev == ob.st_dev && ib.st_ino == ob.st_ino) {
      snprintf(err, errcap,
               "%s: the output %s is the input %s (the same file); writing it would "
               "destroy the input: name another output",
               what, strcmp(path, "-") == 0 ? "(stdout)" : path,
               strcmp(inputs[i], "-") == 0 ? "(stdin)" : inputs[i]);
      return AA_EINVAL;
    }
  }
  if (strcmp(path, "-") == 0 || (exists && !S_ISREG(ob.st_mode)))
    return AA_OK; /* written in place */
  if (exists) {
    char real[PATH_MAX];
    if (realpath(path, real) == NULL) {
      snprintf(err, errcap, "%s: %s: %s", what, path, strerror(errno));
      return AA_EINVAL;
    }
    dir_of(real, dir, sizeof dir);
  } else {
    dir_of(path, dir, sizeof dir);
  }
  if (stat(dir, &ib) != 0 || !S_ISDIR(ib.st_mode)) {
    snprintf(err, errcap, "%s: cannot write %s: its directory %s %s", what, path, dir,
             errno == ENOENT || !S_ISDIR(ib.st_mode) ? "does not exist" : strerror(errno));
    return AA_EINVAL;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    snprintf(err, errcap, "%s: cannot write %s: its directory %s: %s", what, path, dir,
             strerror(errno));
    return AA_EINVAL;
  }
  return AA_OK;
}

/* The temporary file beside the target: dir/.base.XXXXXX with the target's
 * mode (or new_mode under the umask); fd open for writing. */
static int make_temp(aa__outfile *o, const char *path, mode_t new_mode, char *err,
                     size_t errcap) {
  struct stat sb;
  char dir[PATH_MAX];
  const char *target = path;
  char real[PATH_MAX];
  mode_t mode, um;
  bool exists = stat(path, &sb) == 0;
  int fd;

  if (exists) {
    if (realpath(path, real) == NULL) {
      snprintf(err, errcap, "%s: %s", path, strerror(errno));
      return -1;
    }
    target = real;
  }
  snprintf(o->target, sizeof o->target, "%s", target);
  dir_of(o->target, dir, sizeof dir);
  if (snprintf(o->tmp, sizeof o->tmp, "%s/.%s.XXXXXX", dir, base_of(o->target)) >=
      (int)sizeof o->tmp) {
    snprintf(err, errcap, "%s: the path is too long", path);
    o->tmp[0] = '\0';
    return -1;
  }
  fd = mkstemp(o->tmp);
  if (fd < 0) {
    snprintf(err, errcap, "%s: cannot create a temporary file in %s: %s", path, dir,
             strerror(errno));
    o->tmp[0] = '\0';
    return -1;
  }
  um = umask(0);
  umask(um);
  mode = exists ? sb.st_mode & 07777 : new_mode & ~um;
  if (fchmod(fd, mode) != 0) {
    snprintf(err, errcap, "%s: %s", o->tmp, strerror(errno));
    close(fd);
    unlink(o->tmp);
    o->tmp[0] = '\0';
    return -1;
  }
  return fd;
}

int aa__out_open(aa__outfile *o, const char *path, mode_t new_mode, char *err, size_t errcap) {
  struct stat sb;
  int fd;

  memset(o, 0, sizeof *o);
  o->path = path;
  err[0] = '\0';
  if (strcmp(path, "-") == 0) {
    o->f = stdout;
    return AA_OK;
  }
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
    o->f = fopen(path, "w"); /* /dev/null, a FIFO: in place */
    if (o->f == NULL) {
      snprintf(err, errcap, "%s: %s", path, strerror(errno));
      return AA_EIO;
    }
    return AA_OK;
  }
  fd = make_temp(o, path, new_mode, err, errcap);
  if (fd < 0)
    return AA_EIO;
  o->f = fdopen(fd, "w");
  if (o->f == NULL) {
    snprintf(err, errcap, "%s: %s", o->tmp, strerror(errno));
    close(fd);
    unlink(o->tmp);
    o->tmp[0] = '\0';
    return AA_EIO;
  }
  return AA_OK;
}

/* The -wal, -shm and -journal files SQLite may leave beside path. */
static void unlink_sqlite_side(const char *path) {
  static const char *const sfx[] = {"-wal", "-shm", "-journal"};
  char p[PATH_MAX + 16];
  size_t i;

  for (i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
    snprintf(p, sizeof p, "%s%s", path, sfx[i]);
    unlink(p);
  }
}

int aa__out_open_db(aa__outfile *o, const char *path, char *err, size_t errcap) {
  char side[PATH_MAX + 16];
  char buf[1 << 16];
  struct stat sb;
  int in = -1, fd = -1, rc = AA_EIO;
  bool exists;

  memset(o, 0, sizeof *o);
  o->path = path;
  o->db = true;
  err[0] = '\0';
  exists = stat(path, &sb) == 0;
  if (exists && !S_ISREG(sb.st_mode)) {
    snprintf(err, errcap, "%s: not a regular file; a database is a file", path);
    return AA_EINVAL;
  }
  {
    /* SQLite names the -wal file after a link's target */
    char *real = exists ? realpath(path, NULL) : NULL;
    snprintf(side, sizeof side, "%s-wal", real != NULL ? real : path);
    free(real);
  }
  if (exists && access(side, F_OK) == 0) {
    snprintf(err, errcap,
             "%s: the database is open in another process, or was not closed cleanly "
             "(%s exists): import when no process has it open, or into another file",
             path, side);
    return AA_EBUSY;
  }
  fd = make_temp(o, path, 0600, err, errcap);
  if (fd < 0)
    return AA_EIO;
  if (exists) {
    in = open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0) {
      snprintf(err, errcap, "%s: %s", path, strerror(errno));
      goto out;
    }
    for (;;) {
      ssize_t n = read(in, buf, sizeof buf), w = 0;
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0) {
        snprintf(err, errcap, "%s: %s", path, strerror(errno));
        goto out;
      }
      if (n == 0)
        break;
      while (w < n) {
        ssize_t k = write(fd, buf + w, (size_t)(n - w));
        if (k < 0 && errno == EINTR)
          continue;
        if (k < 0) {
          snprintf(err, errcap, "%s: %s", o->tmp, strerror(errno));
          goto out;
        }
        w += k;
      }
    }
    o->size = (uint64_t)sb.st_size;
    o->mtime_ns = (uint64_t)sb.st_mtim.tv_sec * 1000000000ull + (uint64_t)sb.st_mtim.tv_nsec;
    o->had = true;
  }
  if (fsync(fd) != 0) {
    snprintf(err, errcap, "%s: %s", o->tmp, strerror(errno));
    goto out;
  }
  rc = AA_OK;
out:
  if (in >= 0)
    close(in);
  if (close(fd) != 0 && rc == AA_OK) {
    snprintf(err, errcap, "%s: %s", o->tmp, strerror(errno));
    rc = AA_EIO;
  }
  if (rc != AA_OK) {
    unlink(o->tmp);
    o->tmp[0] = '\0';
  }
  return rc;
}

void aa__out_abort(aa__outfile *o) {
  if (o->f != NULL && o->f != stdout)
    fclose(o->f);
  o->f = NULL;
  if (o->tmp[0] != '\0') {
    unlink(o->tmp);
    if (o->db)
      unlink_sqlite_side(o->tmp);
  }
  o->tmp[0] = '\0';
}

int aa__out_commit(aa__outfile *o, char *err, size_t errcap) {
  int rc = AA_OK;

  err[0] = '\0';
  if (o->f == stdout) {
    o->f = NULL;
    if (fflush(stdout) != 0) {
      snprintf(err, errcap, "stdout: %s", strerror(errno));
      return AA_EIO;
    }
    return AA_OK;
  }
  if (o->f != NULL) {
    FILE *f = o->f;
    o->f = NULL;
    if (fflush(f) != 0 || ferror(f) || (o->tmp[0] != '\0' && fsync(fileno(f)) != 0)) {
      snprintf(err, errcap, "%s: %s", o->path, strerror(errno != 0 ? errno : EIO));
      fclose(f);
      rc = AA_EIO;
    } else if (fclose(f) != 0) {
      snprintf(err, errcap, "%s: %s", o->path, strerror(errno));
      rc = AA_EIO;
    }
  }
  if (rc == AA_OK && o->db && o->had) {
    /* the original must be what was copied: another writer in between
     * would lose its work to the rename */
    struct stat sb;
    if (stat(o->target, &sb) != 0 || (uint64_t)sb.st_size != o->size ||
        (uint64_t)sb.st_mtim.tv_sec * 1000000000ull + (uint64_t)sb.st_mtim.tv_nsec !=
            o->mtime_ns) {
      snprintf(err, errcap, "%s: the database changed while importing; nothing was "
                            "written (run the import again)",
               o->path);
      rc = AA_EBUSY;
    }
  }
  if (rc == AA_OK && o->tmp[0] != '\0' && rename(o->tmp, o->target) != 0) {
    snprintf(err, errcap, "%s: cannot rename %s into place: %s", o->path, o->tmp,
             strerror(errno));
    rc = AA_EIO;
  }
  if (rc != AA_OK) {
    aa__out_abort(o);
    return rc;
  }
  o->tmp[0] = '\0';
  return AA_OK;
}
