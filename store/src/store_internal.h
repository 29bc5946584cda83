/*
 * store_internal.h — what the store's source files share.
 *
 * Glossary:
 *   store      one aa_store: a write connection owned by the writer thread,
 *              a mutex-protected bounded queue of items and a lock-free trace
 *              ring.
 *   item       one queued unit of work for the writer: a snapshot copy, a
 *              policy change, the end of a run.
 *   ring       the bounded multi-producer single-consumer trace ring (one slot
 *              per aa_trace_event, sequence-numbered per slot).
 *   migration  one step of the schema list in store_schema.c; step i brings
 *              PRAGMA user_version from i-1 to i.
 *
 * Files: store.c (handle, queue, ring, writer thread, faults), store_schema.c
 * (migrations, connection setup, error mapping), store_read.c (readers).
 */
#ifndef AA_STORE_INTERNAL_H
#define AA_STORE_INTERNAL_H

#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "adaptalloc/store.h"

/* Counts SQLite calls for fault injection; shared by the writer's calls and
 * the open path. `remaining` 0 = disarmed; when it reaches 1 the call fails. */
typedef struct aa__store_fault {
  _Atomic uint64_t remaining;
  _Atomic bool fired; /* an injected fault has fired */
} aa__store_fault;

/* Returns true when this call must fail (and disarms). */
bool aa__store_fault_hit(aa__store_fault *f);

/* Writes "<what> failed on <path>: <reason> (<SQLITE_CODE>)" into msg. */
void aa__store_fault_message(const aa__store_fault *f, sqlite3 *db, int rc,
                             const char *what, const char *path, char *msg,
                             size_t cap);

/* Opens a connection and brings it to a usable state: busy timeout, WAL,
 * synchronous=NORMAL, foreign keys, incremental auto-vacuum on a new file,
 * migrations. On failure returns an aa_err, writes a one-line reason into
 * msg (without the log prefix) and *out is NULL. `uri` is true for the
 * in-memory shared-cache URI (no WAL there). */
int aa__store_db_open_rw(const char *path, bool uri, uint32_t busy_timeout_ms,
                         aa__store_fault *fault, sqlite3 **out, char *msg,
                         size_t msg_cap);

/* Opens a read-only connection for a reader and checks the schema version.
 * Errors as for the public readers. */
int aa__store_db_open_ro(const char *path, sqlite3 **out);

/* sqlite3_exec / sqlite3_step through the fault counter (fault may be NULL). */
int aa__store_exec(sqlite3 *db, aa__store_fault *fault, const char *sql);
int aa__store_step(sqlite3_stmt *stmt, aa__store_fault *fault);

/* Maps a SQLite result code to an aa_err. */
int aa__store_err_from_sqlite(int rc);

/* Symbolic name of a primary SQLite code ("SQLITE_FULL"). */
const char *aa__store_sqlite_code_name(int rc);

/* The SQL result code that an injected fault pretends to be. */
#define AA__STORE_FAULT_RC SQLITE_FULL

/* Wall clock, Unix epoch milliseconds. */
int64_t aa__store_wall_ms(void);

#endif /* AA_STORE_INTERNAL_H */
