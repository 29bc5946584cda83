/*
 * store_sqlite.c — what every store file needs around SQLite: sqlite3_exec
 * and sqlite3_step through the fault-injection counter (tests fail the Nth
 * call), the one-line failure message, the SQLite -> aa_err mapping and the
 * codes' names, and the wall clock. Entry points: the aa__store_* of
 * store_internal.h's store_sqlite.c section.
 */
#include <stdio.h>
#include <time.h>

#include "store_internal.h"

/* ------------------------------------------------------------------ faults */

bool aa__store_fault_hit(aa__store_fault *f) {
  if (f == NULL) return false;
  uint64_t r = atomic_load_explicit(&f->remaining, memory_order_relaxed);
  while (r != 0) {
    uint64_t next = r - 1;
    if (atomic_compare_exchange_weak_explicit(&f->remaining, &r, next,
                                              memory_order_relaxed,
                                              memory_order_relaxed)) {
      if (r == 1) {
        atomic_store_explicit(&f->fired, true, memory_order_relaxed);
        return true;
      }
      return false;
    }
  }
  return false;
}

void aa__store_fault_message(const aa__store_fault *f, sqlite3 *db, int rc,
                             const char *what, const char *path, char *msg,
                             size_t cap) {
  if (msg == NULL || cap == 0) return;
  bool injected = f != NULL && rc == AA__STORE_FAULT_RC &&
                  atomic_load_explicit(&f->fired, memory_order_relaxed);
  const char *detail = injected     ? "database or disk is full (injected fault)"
                       : db != NULL ? sqlite3_errmsg(db)
                                    : sqlite3_errstr(rc);
  snprintf(msg, cap, "%s failed on %s: %s (%s)", what, path, detail,
           aa__store_sqlite_code_name(rc));
}

int aa__store_exec(sqlite3 *db, aa__store_fault *fault, const char *sql) {
  if (aa__store_fault_hit(fault)) return AA__STORE_FAULT_RC;
  return sqlite3_exec(db, sql, NULL, NULL, NULL);
}

int aa__store_step(sqlite3_stmt *stmt, aa__store_fault *fault) {
  if (aa__store_fault_hit(fault)) return AA__STORE_FAULT_RC;
  return sqlite3_step(stmt);
}

/* ------------------------------------------------------------------ errors */

int aa__store_err_from_sqlite(int rc) {
  switch (rc & 0xff) {
  case SQLITE_OK:
  case SQLITE_DONE:
  case SQLITE_ROW:
    return AA_OK;
  case SQLITE_NOMEM:
    return AA_ENOMEM;
  case SQLITE_READONLY:
  case SQLITE_PERM:
  case SQLITE_AUTH:
    return AA_EPERM;
  case SQLITE_BUSY:
  case SQLITE_LOCKED:
    return AA_EBUSY;
  case SQLITE_CANTOPEN:
    return AA_ENOENT;
  case SQLITE_CORRUPT:
  case SQLITE_NOTADB:
    return AA_ECORRUPT;
  case SQLITE_MISUSE:
  case SQLITE_RANGE:
    return AA_EINVAL;
  default:
    return AA_EIO;
  }
}

const char *aa__store_sqlite_code_name(int rc) {
  /* clang-format off */
  switch (rc & 0xff) {
#define C(x) \
  case x:    \
    return #x;
    C(SQLITE_OK) C(SQLITE_ERROR) C(SQLITE_INTERNAL) C(SQLITE_PERM)
    C(SQLITE_ABORT) C(SQLITE_BUSY) C(SQLITE_LOCKED) C(SQLITE_NOMEM)
    C(SQLITE_READONLY) C(SQLITE_INTERRUPT) C(SQLITE_IOERR) C(SQLITE_CORRUPT)
    C(SQLITE_NOTFOUND) C(SQLITE_FULL) C(SQLITE_CANTOPEN) C(SQLITE_PROTOCOL)
    C(SQLITE_EMPTY) C(SQLITE_SCHEMA) C(SQLITE_TOOBIG) C(SQLITE_CONSTRAINT)
    C(SQLITE_MISMATCH) C(SQLITE_MISUSE) C(SQLITE_NOLFS) C(SQLITE_AUTH)
    C(SQLITE_FORMAT) C(SQLITE_RANGE) C(SQLITE_NOTADB) C(SQLITE_ROW)
    C(SQLITE_DONE)
#undef C
  default:
    return "SQLITE_UNKNOWN";
  }
}
/* clang-format on */

int64_t aa__store_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
