/*
 * runtime_token.c — the server's credential when the operator set none: a
 * token of 32 random bytes (getrandom), written to a file only the job's
 * user can read, named in the start-up line (docs/security.md "The token
 * file"). Entry points: aa__rt_token_generate, aa__rt_token_file_write,
 * aa__rt_token_file_remove, aa__rt_token_file_arm_exit, aa_rt_token_file.
 *
 * Where: <dir>/<port>.token, dir = $XDG_RUNTIME_DIR/adaptalloc when
 * XDG_RUNTIME_DIR is an absolute path, else /tmp/adaptalloc-<uid>. The
 * directory is made 0700 and must be a real directory (not a link) owned by
 * this user with no group or other access, else nothing is written. The
 * file is written under a name of its own (O_CREAT | O_EXCL | O_NOFOLLOW,
 * 0600) and linked into place, so a reader never sees half a token; a file
 * already at the final name belongs to a job that held this port before
 * (this process holds it now) and is replaced. XDG_RUNTIME_DIR is the
 * session's, not an adaptalloc setting, so it is read here, where the file
 * is made, and not by aa_runtime_config_from_env.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime_internal.h"

#define TOKEN_BYTES 32

int aa__rt_token_generate(char *out, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  unsigned char raw[TOKEN_BYTES];
  size_t got = 0;
  int rc = AA_OK;

  if (out == NULL || cap < 2 * TOKEN_BYTES + 1)
    return AA_EINVAL;
  out[0] = '\0';
  while (got < sizeof(raw)) {
    ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      rc = AA_EIO;
      goto done;
    }
    got += (size_t)n;
  }
  for (size_t i = 0; i < sizeof(raw); i++) {
    out[2 * i] = hex[raw[i] >> 4];
    out[2 * i + 1] = hex[raw[i] & 15];
  }
  out[2 * TOKEN_BYTES] = '\0';
done:
  explicit_bzero(raw, sizeof(raw));
  return rc;
}

/* The token directory (made when missing) into dir; AA_OK, or an error with
 * why saying the rule and dir empty. */
static int token_dir(char *dir, size_t cap, char *why, size_t whycap) {
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  struct stat st;
  int n;

  if (xdg != NULL && xdg[0] == '/')
    n = snprintf(dir, cap, "%s/adaptalloc", xdg);
  else
    n = snprintf(dir, cap, "/tmp/adaptalloc-%lu", (unsigned long)geteuid());
  if (n < 0 || (size_t)n >= cap) {
    snprintf(why, whycap, "the directory's path is over %zu bytes", cap - 1);
    goto fail;
  }
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    snprintf(why, whycap, "cannot make %s: %s", dir, strerror(errno));
    goto fail;
  }
  if (lstat(dir, &st) != 0) {
    snprintf(why, whycap, "%s: %s", dir, strerror(errno));
    goto fail;
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    snprintf(why, whycap,
             "%s is not a directory of this user's with no group or other access "
             "(mode %03o, owner %lu)",
             dir, (unsigned)(st.st_mode & 0777), (unsigned long)st.st_uid);
    goto fail;
  }
  return AA_OK;
fail:
  dir[0] = '\0';
  return AA_EPERM;
}

int aa__rt_token_file_write(const char *token, int port, char *path, size_t cap,
                            char *why, size_t whycap) {
  char dir[1024], tmp[1100];
  int fd = -1, rc = AA_OK, n;
  size_t len = strlen(token);
  bool tmp_made = false;

  if (path == NULL || cap == 0 || why == NULL || whycap == 0)
    return AA_EINVAL;
  path[0] = '\0';
  why[0] = '\0';
  rc = token_dir(dir, sizeof(dir), why, whycap);
  if (rc != AA_OK)
    goto done;
  n = snprintf(path, cap, "%s/%d.token", dir, port);
  if (n < 0 || (size_t)n >= cap) {
    snprintf(why, whycap, "the file's path is over %zu bytes", cap - 1);
    rc = AA_ERANGE;
    goto done;
  }
  snprintf(tmp, sizeof(tmp), "%s/.%d.token.%ld", dir, port, (long)getpid());
  unlink(tmp); /* a leftover of this pid's earlier life; ours alone (0700) */
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(why, whycap, "cannot create %s: %s", tmp, strerror(errno));
    rc = AA_EIO;
    goto done;
  }
  tmp_made = true;
  /* whatever the umask: 0600, no more and no less */
  if (fchmod(fd, 0600) != 0 || write(fd, token, len) != (ssize_t)len ||
      write(fd, "\n", 1) != 1) {
    snprintf(why, whycap, "cannot write %s: %s", tmp, strerror(errno));
    rc = AA_EIO;
    goto done;
  }
  if (close(fd) != 0) {
    fd = -1;
    snprintf(why, whycap, "cannot write %s: %s", tmp, strerror(errno));
    rc = AA_EIO;
    goto done;
  }
  fd = -1;
  /* link() never replaces: a file at the name is an earlier job's on this
   * port (this process holds the port now); it goes, once */
  if (link(tmp, path) != 0 && (errno != EEXIST || unlink(path) != 0 || link(tmp, path) != 0)) {
    snprintf(why, whycap, "cannot create %s: %s", path, strerror(errno));
    rc = AA_EIO;
    goto done;
  }
done:
  if (fd >= 0)
    close(fd);
  if (tmp_made)
    unlink(tmp);
  if (rc != AA_OK)
    path[0] = '\0';
  return rc;
}

/* The default runtime's file goes at exit too (a process that never calls
 * aa_runtime_shutdown: PyTorch's); a fork()ed child leaves it alone. A job
 * killed outright leaves its file: the next job on that port replaces it. */
static pid_t exit_pid;

static void token_at_exit(void) {
  if (getpid() == exit_pid)
    aa__rt_token_file_remove(aa__rt_default());
}

void aa__rt_token_file_arm_exit(aa_runtime *rt) {
  static bool armed;
  if (rt == NULL || !rt->is_default || armed)
    return;
  exit_pid = getpid();
  armed = atexit(token_at_exit) == 0;
}

void aa__rt_token_file_remove(aa_runtime *rt) {
  char buf[sizeof(((aa_runtime *)0)->token) + 2];
  int fd;
  ssize_t n;

  if (rt == NULL || rt->svc.token_file[0] == '\0')
    return;
  /* only while it still holds this process's token: a later job on the
   * same port may have replaced it */
  fd = open(rt->svc.token_file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n > 0) {
      buf[n] = '\0';
      buf[strcspn(buf, "\n")] = '\0';
      if (strcmp(buf, rt->token) == 0)
        unlink(rt->svc.token_file);
    }
    explicit_bzero(buf, sizeof(buf));
  }
  rt->svc.token_file[0] = '\0';
}

int aa_rt_token_file(aa_runtime *rt, char *buf, size_t cap) {
  int n;
  if (rt == NULL || buf == NULL || cap == 0)
    return AA_EINVAL;
  buf[0] = '\0';
  if (rt->svc.token_file[0] == '\0')
    return AA_ENOTSUP;
  n = snprintf(buf, cap, "%s", rt->svc.token_file);
  if (n < 0 || (size_t)n >= cap) {
    buf[0] = '\0';
    return AA_ERANGE;
  }
  return AA_OK;
}

int aa_runtime_token_file(char *buf, size_t cap) {
  return aa_rt_token_file(aa__rt_default(), buf, cap);
}
