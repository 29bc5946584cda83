/*
 * store_schema.c — the schema, its migrations and connection setup.
 *
 * Owns the list of migration steps (kMigrations: step i brings PRAGMA
 * user_version from i-1 to i; all pending steps run in one transaction),
 * the pragmas every write connection gets and the read-only open and close
 * used by the readers (the close removes the -wal/-shm files the open made;
 * the SQLite helpers they use are store_sqlite.c's).
 * Entry points: aa__store_db_open_rw, aa__store_db_open_ro,
 * aa__store_db_close_ro.
 *
 * The schema is part of the user interface: docs/store.md documents every
 * table and column. Never edit a shipped step; append a new one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_internal.h"

/* ------------------------------------------------------------------ schema */

static const char *const kSchemaV1[] = {
    "CREATE TABLE meta ("
    "  key   TEXT PRIMARY KEY,"
    "  value TEXT NOT NULL"
    ") WITHOUT ROWID;",
    "CREATE TABLE runs ("
    "  id                INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  model             TEXT    NOT NULL,"
    "  started_ms        INTEGER NOT NULL,"
    "  ended_ms          INTEGER,"
    "  pid               INTEGER NOT NULL,"
    "  host              TEXT    NOT NULL,"
    "  rank              INTEGER,"
    "  policy_version    INTEGER NOT NULL DEFAULT 0,"
    "  config            TEXT,"
    "  library_version   TEXT    NOT NULL,"
    "  mono_origin_ns    INTEGER NOT NULL,"
    "  snapshots_written INTEGER NOT NULL DEFAULT 0,"
    "  snapshots_dropped INTEGER NOT NULL DEFAULT 0,"
    "  events_written    INTEGER NOT NULL DEFAULT 0,"
    "  events_dropped    INTEGER NOT NULL DEFAULT 0"
    ");",
    "CREATE TABLE snapshots ("
    "  id                   INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  run_id               INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,"
    "  ts_ms                INTEGER NOT NULL,"
    "  time_ns              INTEGER NOT NULL,"
    "  pool                 TEXT    NOT NULL,"
    "  backend              TEXT    NOT NULL,"
    "  device               INTEGER NOT NULL,"
    "  telemetry            INTEGER NOT NULL,"
    "  class_table_version  INTEGER NOT NULL,"
    "  bytes_in_use         INTEGER NOT NULL,"
    "  bytes_requested      INTEGER NOT NULL,"
    "  bytes_reserved       INTEGER NOT NULL,"
    "  peak_bytes_in_use    INTEGER NOT NULL,"
    "  peak_bytes_reserved  INTEGER NOT NULL,"
    "  limit_bytes          INTEGER NOT NULL,"
    "  allocs               INTEGER NOT NULL,"
    "  frees                INTEGER NOT NULL,"
    "  cache_hits           INTEGER NOT NULL,"
    "  cache_misses         INTEGER NOT NULL,"
    "  backend_allocs       INTEGER NOT NULL,"
    "  backend_frees        INTEGER NOT NULL,"
    "  backend_failures     INTEGER NOT NULL,"
    "  ooms                 INTEGER NOT NULL,"
    "  oom_retries          INTEGER NOT NULL,"
    "  invalid_frees        INTEGER NOT NULL,"
    "  pending_blocks       INTEGER NOT NULL,"
    "  large_allocs         INTEGER NOT NULL,"
    "  large_bytes_in_use   INTEGER NOT NULL,"
    "  large_bytes_reserved INTEGER NOT NULL,"
    "  large_segments       INTEGER NOT NULL,"
    "  class_count          INTEGER NOT NULL,"
    "  hh_count             INTEGER NOT NULL"
    ");",
    "CREATE INDEX snapshots_run_pool ON snapshots(run_id, pool, id);",
    "CREATE INDEX snapshots_ts ON snapshots(ts_ms);",
    "CREATE TABLE class_stats ("
    "  snapshot_id       INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,"
    "  idx               INTEGER NOT NULL,"
    "  block_size        INTEGER NOT NULL,"
    "  cache_limit       INTEGER NOT NULL,"
    "  prefill           INTEGER NOT NULL,"
    "  retiring          INTEGER NOT NULL,"
    "  slabs             INTEGER NOT NULL,"
    "  blocks_in_use     INTEGER NOT NULL,"
    "  blocks_free       INTEGER NOT NULL,"
    "  bytes_in_use      INTEGER NOT NULL,"
    "  bytes_requested   INTEGER NOT NULL,"
    "  bytes_reserved    INTEGER NOT NULL,"
    "  peak_bytes_in_use INTEGER NOT NULL,"
    "  allocs            INTEGER NOT NULL,"
    "  frees             INTEGER NOT NULL,"
    "  hits              INTEGER NOT NULL,"
    "  misses            INTEGER NOT NULL,"
    "  PRIMARY KEY (snapshot_id, idx)"
    ") WITHOUT ROWID;",
    "CREATE TABLE histograms ("
    "  snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,"
    "  bucket      INTEGER NOT NULL,"
    "  lower_bytes INTEGER NOT NULL,"
    "  count       INTEGER NOT NULL,"
    "  PRIMARY KEY (snapshot_id, bucket)"
    ") WITHOUT ROWID;",
    "CREATE TABLE heavy_hitters ("
    "  snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,"
    "  rank        INTEGER NOT NULL,"
    "  size        INTEGER NOT NULL,"
    "  count       INTEGER NOT NULL,"
    "  PRIMARY KEY (snapshot_id, rank)"
    ") WITHOUT ROWID;",
    "CREATE TABLE policy_changes ("
    "  id          INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  run_id      INTEGER REFERENCES runs(id) ON DELETE SET NULL,"
    "  ts_ms       INTEGER NOT NULL,"
    "  source      TEXT    NOT NULL,"
    "  old_version INTEGER NOT NULL,"
    "  new_version INTEGER NOT NULL,"
    "  reason      TEXT    NOT NULL,"
    "  policy      TEXT"
    ");",
    "CREATE INDEX policy_changes_run ON policy_changes(run_id, id);",
    "CREATE INDEX policy_changes_ts ON policy_changes(ts_ms);",
    /* No AUTOINCREMENT and no index: this is the volume table. Events of
     * a run are found through trace_batches (first_id..last_id). */
    "CREATE TABLE trace_events ("
    "  id      INTEGER PRIMARY KEY,"
    "  run_id  INTEGER NOT NULL,"
    "  time_ns INTEGER NOT NULL,"
    "  op      TEXT    NOT NULL,"
    "  ptr     INTEGER NOT NULL,"
    "  size    INTEGER NOT NULL,"
    "  stream  INTEGER NOT NULL,"
    "  thread  INTEGER NOT NULL"
    ");",
    "CREATE TABLE trace_batches ("
    "  id       INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  run_id   INTEGER NOT NULL,"
    "  ts_ms    INTEGER NOT NULL,"
    "  first_id INTEGER NOT NULL,"
    "  last_id  INTEGER NOT NULL,"
    "  events   INTEGER NOT NULL"
    ");",
    "CREATE INDEX trace_batches_ts ON trace_batches(ts_ms);",
    "CREATE INDEX trace_batches_run ON trace_batches(run_id, first_id);",
    "CREATE VIEW latest_snapshots AS"
    "  SELECT s.* FROM snapshots s"
    "  WHERE s.id = (SELECT max(id) FROM snapshots t"
    "                WHERE t.run_id = s.run_id AND t.pool = s.pool);",
    NULL};

/* v2: trace events carry the core's sequence number (the replay order:
 * the write order is not the order of the operations across threads), and
 * a run records the first sequence number its trace lost, below which the
 * trace is complete. */
static const char *const kSchemaV2[] = {
    "ALTER TABLE trace_events ADD COLUMN seq INTEGER;",
    "ALTER TABLE runs ADD COLUMN trace_cut_seq INTEGER;",
    NULL};

/* v3: a snapshot names the region its pool serves (runtime regions,
 * "kv_cache"); NULL for a backend's own pool and in older rows. */
static const char *const kSchemaV3[] = {
    "ALTER TABLE snapshots ADD COLUMN region TEXT;",
    NULL};

/* v4: out-of-memory records (a pool's OOM observer through the runtime):
 * the figures one filters on as columns, the whole record as JSON. IF NOT
 * EXISTS: a database whose user_version was set back by hand keeps its rows. */
static const char *const kSchemaV4[] = {
    "CREATE TABLE IF NOT EXISTS ooms ("
    "  id             INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  run_id         INTEGER REFERENCES runs(id) ON DELETE CASCADE,"
    "  ts_ms          INTEGER NOT NULL,"
    "  pool           TEXT    NOT NULL,"
    "  request        INTEGER NOT NULL,"
    "  bytes_reserved INTEGER NOT NULL,"
    "  bytes_in_use   INTEGER NOT NULL,"
    "  limit_bytes    INTEGER NOT NULL,"
    "  record         TEXT    NOT NULL"
    ");",
    "CREATE INDEX IF NOT EXISTS ooms_run ON ooms(run_id, id);",
    NULL};

/* v5: a run records where it ran in a distributed job beside its rank
 * (RANK): the local rank on its host (LOCAL_RANK) and the world size
 * (WORLD_SIZE); NULL when unset and in older rows. */
static const char *const kSchemaV5[] = {
    "ALTER TABLE runs ADD COLUMN local_rank INTEGER;",
    "ALTER TABLE runs ADD COLUMN world_size INTEGER;",
    NULL};

/* v6: a run counts its out-of-memory records, written and dropped (the
 * store's ooms_written and ooms_dropped over the run), as it counts its
 * snapshots and trace events; 0 in older rows. */
static const char *const kSchemaV6[] = {
    "ALTER TABLE runs ADD COLUMN ooms_written INTEGER NOT NULL DEFAULT 0;",
    "ALTER TABLE runs ADD COLUMN ooms_dropped INTEGER NOT NULL DEFAULT 0;",
    NULL};

/* v7: bounded live tracing. trace_events.frame: a 'c' event's call stack,
 * by id; trace_frames: the stacks' texts per run; runs.events_evicted: the
 * run's rows deleted by the trace bound (trace_max_events). */
static const char *const kSchemaV7[] = {
    "ALTER TABLE trace_events ADD COLUMN frame INTEGER;",
    "CREATE TABLE IF NOT EXISTS trace_frames ("
    " run_id INTEGER NOT NULL,"
    " id INTEGER NOT NULL,"
    " frames TEXT NOT NULL,"
    " PRIMARY KEY (run_id, id)) WITHOUT ROWID;",
    "ALTER TABLE runs ADD COLUMN events_evicted INTEGER NOT NULL DEFAULT 0;",
    NULL};

typedef struct migration {
  int version;
  const char *const *sql; /* statements, NULL-terminated */
} migration;

/* Append only. The last entry's version is AA_STORE_SCHEMA_VERSION. */
static const migration kMigrations[] = {
    {1, kSchemaV1},
    {2, kSchemaV2},
    {3, kSchemaV3},
    {4, kSchemaV4},
    {5, kSchemaV5},
    {6, kSchemaV6},
    {7, kSchemaV7},
};
#define AA__N_MIGRATIONS (sizeof kMigrations / sizeof kMigrations[0])

_Static_assert(sizeof kMigrations / sizeof kMigrations[0] ==
                   AA_STORE_SCHEMA_VERSION,
               "one migration step per schema version");

/* ------------------------------------------------------------------ helpers */

/* Reads one integer pragma (user_version, page_count...). */
static int pragma_int(sqlite3 *db, aa__store_fault *fault, const char *sql,
                      int64_t *out) {
  sqlite3_stmt *stmt = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, NULL);
  if (rc != SQLITE_OK) goto out;
  rc = aa__store_step(stmt, fault);
  if (rc == SQLITE_ROW) {
    *out = sqlite3_column_int64(stmt, 0);
    rc = SQLITE_OK;
  } else if (rc == SQLITE_DONE) {
    *out = 0;
    rc = SQLITE_OK;
  }
out:
  sqlite3_finalize(stmt);
  return rc;
}

/* Reads PRAGMA journal_mode=WAL's answer. */
static int set_wal(sqlite3 *db, aa__store_fault *fault, bool *is_wal) {
  sqlite3_stmt *stmt = NULL;
  *is_wal = false;
  int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &stmt, NULL);
  if (rc != SQLITE_OK) goto out;
  rc = aa__store_step(stmt, fault);
  if (rc == SQLITE_ROW) {
    const unsigned char *mode = sqlite3_column_text(stmt, 0);
    *is_wal = mode != NULL && strcmp((const char *)mode, "wal") == 0;
    rc = SQLITE_OK;
  }
out:
  sqlite3_finalize(stmt);
  return rc;
}

static int newer_schema(const char *path, int64_t have, char *msg,
                        size_t cap) {
  snprintf(msg, cap,
           "%s has schema version %lld, newer than this adaptalloc supports "
           "(%d); upgrade adaptalloc or point ADAPTALLOC_DB at another file",
           path, (long long)have, AA_STORE_SCHEMA_VERSION);
  return AA_ESTALE;
}

static int migrate(sqlite3 *db, aa__store_fault *fault, const char *path,
                   char *msg, size_t cap) {
  int64_t have = 0;
  int err = AA_OK;
  const char *what = "reading the schema version";
  int rc = pragma_int(db, fault, "PRAGMA user_version", &have);
  if (rc != SQLITE_OK) goto sqlfail;
  if (have > AA_STORE_SCHEMA_VERSION) goto newer;
  if (have == AA_STORE_SCHEMA_VERSION) goto out;

  what = "starting the migration";
  rc = aa__store_exec(db, fault, "BEGIN IMMEDIATE");
  if (rc != SQLITE_OK) goto sqlfail;
  /* Another process may have migrated between the read and the lock. */
  what = "reading the schema version";
  rc = pragma_int(db, fault, "PRAGMA user_version", &have);
  if (rc != SQLITE_OK) goto rollback;
  if (have > AA_STORE_SCHEMA_VERSION) {
    aa__store_exec(db, NULL, "ROLLBACK");
    goto newer;
  }
  for (size_t i = 0; i < AA__N_MIGRATIONS; i++) {
    if (kMigrations[i].version <= have) continue;
    what = "applying a schema migration";
    for (const char *const *q = kMigrations[i].sql; *q != NULL; q++) {
      rc = aa__store_exec(db, fault, *q);
      if (rc != SQLITE_OK) goto rollback;
    }
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version=%d", kMigrations[i].version);
    rc = aa__store_exec(db, fault, sql);
    if (rc != SQLITE_OK) goto rollback;
  }
  what = "recording the schema version";
  {
    char sql[256];
    snprintf(sql, sizeof sql,
             "INSERT OR REPLACE INTO meta(key, value) VALUES"
             " ('schema_version', '%d'),"
             " ('library_version', '%d.%d.%d'),"
             " ('migrated_ms', '%lld')",
             AA_STORE_SCHEMA_VERSION, AA_VERSION_MAJOR, AA_VERSION_MINOR,
             AA_VERSION_PATCH, (long long)aa__store_wall_ms());
    rc = aa__store_exec(db, fault, sql);
    if (rc != SQLITE_OK) goto rollback;
    if (have == 0) {
      snprintf(sql, sizeof sql,
               "INSERT OR IGNORE INTO meta(key, value) VALUES"
               " ('created_ms', '%lld')",
               (long long)aa__store_wall_ms());
      rc = aa__store_exec(db, fault, sql);
      if (rc != SQLITE_OK) goto rollback;
    }
  }
  what = "committing the migration";
  rc = aa__store_exec(db, fault, "COMMIT");
  if (rc != SQLITE_OK) goto rollback;
  goto out;

newer:
  err = newer_schema(path, have, msg, cap);
  goto out;
rollback:
  aa__store_fault_message(fault, db, rc, what, path, msg, cap);
  err = aa__store_err_from_sqlite(rc);
  aa__store_exec(db, NULL, "ROLLBACK");
  goto out;
sqlfail:
  aa__store_fault_message(fault, db, rc, what, path, msg, cap);
  err = aa__store_err_from_sqlite(rc);
out:
  return err;
}

/* ------------------------------------------------------------------ opens */

static const char *file_kind(mode_t m) {
  return S_ISDIR(m)                 ? "a directory"
         : S_ISFIFO(m)              ? "a FIFO"
         : S_ISSOCK(m)              ? "a socket"
         : S_ISCHR(m) || S_ISBLK(m) ? "a device"
                                    : "not a file";
}

/* Makes sure the database file is a regular file, creating it owner-only
 * (0600) when it does not exist, before SQLite opens anything: SQLite would
 * create a missing file with the umask's mode (0644), through a dangling
 * symbolic link at its target, and a journal beside a device
 * (/dev/null-journal, world-writable). A link to an existing regular file
 * is followed; a dangling one is refused (the store creates nothing
 * through a link). What was created is checked: a umask that takes the
 * owner's bits (0200 leaves 0400) is overridden with fchmod, and a mode
 * that still is not 0600 removes the file again. */
static int db_file_prepare(const char *path, char *msg, size_t cap) {
  struct stat st;
  int fd = -1, err = AA_OK;

  for (int tries = 0; tries < 2; tries++) {
    if (lstat(path, &st) == 0) {
      if (S_ISLNK(st.st_mode) && stat(path, &st) != 0) {
        snprintf(msg, cap,
                 "%s is a symbolic link to a file that does not exist; the "
                 "store creates no file through a link: create the target "
                 "(mode 0600) or name it directly",
                 path);
        return AA_EINVAL;
      }
      if (!S_ISREG(st.st_mode)) {
        snprintf(msg, cap, "%s is not a regular file (%s); a database is a file",
                 path, file_kind(st.st_mode));
        return AA_EINVAL;
      }
      return AA_OK; /* it exists: its mode is the owner's choice */
    }
    if (errno != ENOENT) {
      snprintf(msg, cap, "cannot check %s: %s", path, strerror(errno));
      return errno == EACCES ? AA_EPERM : AA_EIO;
    }
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0)
      break;
    if (errno != EEXIST) {
      snprintf(msg, cap, "cannot create %s: %s", path, strerror(errno));
      return errno == EACCES ? AA_EPERM : AA_EIO;
    }
    /* made (or linked) by someone else since the lstat: check it again */
  }
  if (fd < 0) {
    snprintf(msg, cap, "cannot create %s: it keeps changing", path);
    return AA_EIO;
  }
  memset(&st, 0, sizeof st);
  if (fchmod(fd, 0600) != 0 || fstat(fd, &st) != 0 || (st.st_mode & 0777) != 0600) {
    snprintf(msg, cap, "created %s but cannot make it owner-only (mode %03o); removed it",
             path, (unsigned)(st.st_mode & 0777));
    unlink(path);
    err = AA_EPERM;
  }
  close(fd);
  return err;
}

int aa__store_db_open_rw(const char *path, bool uri, uint32_t busy_timeout_ms,
                         aa__store_fault *fault, sqlite3 **out, char *msg,
                         size_t cap) {
  sqlite3 *db = NULL;
  int err = AA_OK;
  const char *what = "opening";
  int64_t tables = 0;
  bool is_wal = false;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
              SQLITE_OPEN_NOMUTEX | (uri ? SQLITE_OPEN_URI : 0);

  *out = NULL;
  /* The database holds the audit log and, with tracing, every allocation
   * address: create it owner-only. SQLite gives the -wal and -shm files the
   * main file's mode, and never changes the mode of an existing file. */
  if (!uri && strcmp(path, ":memory:") != 0) {
    err = db_file_prepare(path, msg, cap);
    if (err != AA_OK)
      goto out;
  }
  int rc = sqlite3_open_v2(path, &db, flags, NULL);
  if (rc != SQLITE_OK) goto sqlfail;
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, (int)busy_timeout_ms);
  if (sqlite3_db_readonly(db, "main") == 1) {
    snprintf(msg, cap, "%s is read-only: cannot write telemetry", path);
    err = AA_EPERM;
    goto out;
  }
  /* Incremental auto-vacuum lets retention give pages back to the file
   * system; it can only be chosen before the first table exists. */
  what = "reading the schema";
  rc = pragma_int(db, fault, "SELECT count(*) FROM sqlite_master", &tables);
  if (rc != SQLITE_OK) goto sqlfail;
  if (tables > 0) {
    /* Tables but no schema version: somebody else's database. Refuse
     * before anything (journal mode included) is changed in it. */
    int64_t ver = 0;
    what = "reading the schema version";
    rc = pragma_int(db, fault, "PRAGMA user_version", &ver);
    if (rc != SQLITE_OK) goto sqlfail;
    if (ver == 0) {
      snprintf(msg, cap,
               "%s is not an adaptalloc database (it has %lld tables and no "
               "schema version); point ADAPTALLOC_DB at another file",
               path, (long long)tables);
      err = AA_EEXIST;
      goto out;
    }
    /* A newer schema is refused before anything changes in the file: not
     * even its journal mode (a rollback-journal file stays one). */
    if (ver > AA_STORE_SCHEMA_VERSION) {
      err = newer_schema(path, ver, msg, cap);
      goto out;
    }
  }
  if (tables == 0) {
    what = "setting auto_vacuum";
    rc = aa__store_exec(db, fault, "PRAGMA auto_vacuum=INCREMENTAL");
    if (rc != SQLITE_OK) goto sqlfail;
  }
  if (!uri) {
    what = "switching to WAL";
    rc = set_wal(db, fault, &is_wal);
    if (rc != SQLITE_OK) goto sqlfail;
    if (!is_wal) {
      snprintf(msg, cap, "%s: cannot switch to WAL journal mode", path);
      err = AA_EIO;
      goto out;
    }
  }
  what = "setting pragmas";
  rc = aa__store_exec(db, fault,
                      "PRAGMA synchronous=NORMAL;"
                      "PRAGMA foreign_keys=ON;"
                      "PRAGMA journal_size_limit=8388608;");
  if (rc != SQLITE_OK) goto sqlfail;
  err = migrate(db, fault, path, msg, cap);
  goto out;

sqlfail:
  aa__store_fault_message(fault, db, rc, what, path, msg, cap);
  err = aa__store_err_from_sqlite(rc);
  if (err == AA_ENOENT && !uri) {
    /* SQLITE_CANTOPEN: a missing directory (AA_ENOENT) or one we may not
     * write (AA_EPERM)? */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL) {
      snprintf(dir, sizeof dir, ".");
    } else if (slash == dir) {
      dir[1] = '\0';
    } else {
      *slash = '\0';
    }
    int e = db != NULL ? sqlite3_system_errno(db) : 0;
    if (e == EACCES || e == EPERM || e == EROFS ||
        (access(dir, F_OK) == 0 && access(dir, W_OK) != 0)) {
      err = AA_EPERM;
      snprintf(msg, cap, "cannot create %s: directory %s is read-only", path,
               dir);
    }
  }
out:
  if (err != AA_OK) {
    sqlite3_close_v2(db);
  } else {
    *out = db;
  }
  return err;
}

/* "file:<percent-encoded path>?immutable=1" for a read-only copy. */
static char *immutable_uri(const char *path) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = strlen(path);
  char *u = malloc(5 + 3 * n + 13);
  if (u == NULL) return NULL;
  char *w = u;
  memcpy(w, "file:", 5);
  w += 5;
  for (const unsigned char *p = (const unsigned char *)path; *p != '\0'; p++) {
    unsigned char ch = *p;
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
        (ch >= '0' && ch <= '9') || ch == '/' || ch == '-' || ch == '_' ||
        ch == '.' || ch == '~') {
      *w++ = (char)ch;
    } else {
      *w++ = '%';
      *w++ = hex[ch >> 4];
      *w++ = hex[ch & 15];
    }
  }
  memcpy(w, "?immutable=1", 13);
  return u;
}

static int open_ro_once(const char *path, sqlite3 **out, int *sqlite_rc) {
  sqlite3 *db = NULL;
  int64_t ver = 0;
  int err = AA_OK;

  *out = NULL;
  int rc = sqlite3_open_v2(path, &db,
                           SQLITE_OPEN_READONLY | SQLITE_OPEN_URI |
                               SQLITE_OPEN_NOMUTEX,
                           NULL);
  if (rc == SQLITE_OK) {
    sqlite3_busy_timeout(db, 2000);
    rc = pragma_int(db, NULL, "PRAGMA user_version", &ver);
  }
  *sqlite_rc = rc;
  if (rc != SQLITE_OK) {
    switch (rc & 0xff) {
    case SQLITE_CANTOPEN:
    case SQLITE_NOTADB:
      err = AA_ENOENT; /* missing, or not a database */
      break;
    default:
      err = aa__store_err_from_sqlite(rc);
      if (err == AA_OK) err = AA_EIO;
    }
  } else if (ver == 0) {
    err = AA_ENOENT; /* empty or not an adaptalloc database */
  } else if (ver > AA_STORE_SCHEMA_VERSION) {
    err = AA_ESTALE;
  }
  if (err != AA_OK) {
    sqlite3_close_v2(db);
  } else {
    *out = db;
  }
  return err;
}

/* Whether path's -wal or -shm file exists. SQLite names them after the
 * file a symbolic link leads to (x.db -> t.db gets t.db-wal), so they are
 * looked for beside the link's target: looked for beside the link, a
 * read through it saw none before or after and left the target's behind. */
static bool wal_files_exist(const char *path) {
  char side[4200];
  char *real = realpath(path, NULL);
  const char *base = real != NULL ? real : path;
  bool found;
  int n = snprintf(side, sizeof side, "%s-wal", base);
  found = n > 0 && (size_t)n < sizeof side && access(side, F_OK) == 0;
  if (!found) {
    n = snprintf(side, sizeof side, "%s-shm", base);
    found = n > 0 && (size_t)n < sizeof side && access(side, F_OK) == 0;
  }
  free(real);
  return found;
}

/* A plain file name, beside which SQLite makes its -wal and -shm files (not
 * a URI, not an in-memory database). */
static bool plain_file(const char *path) {
  return path[0] != '\0' && strncmp(path, "file:", 5) != 0 && strcmp(path, ":memory:") != 0;
}

/* SQLite's own safe way to remove a WAL database's -wal and -shm files
 * (its documentation: open the database, then close it): the last
 * connection to close takes the exclusive lock, checkpoints and deletes
 * them; while any other connection has the database open its close leaves
 * them. A read-only connection never deletes them, so this one is
 * read-write: it only reads the header, and without SQLITE_OPEN_CREATE it
 * never makes a database that has gone; on a file it may not write, SQLite
 * opens it read-only and the files stay. */
static void wal_tidy(const char *path) {
  sqlite3 *db = NULL;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) == SQLITE_OK)
    (void)sqlite3_exec(db, "PRAGMA user_version", NULL, NULL, NULL);
  sqlite3_close_v2(db);
}

void aa__store_db_close_ro(const char *path, sqlite3 *db, bool tidy) {
  sqlite3_close_v2(db);
  if (tidy)
    wal_tidy(path);
}

int aa__store_db_open_ro(const char *path, sqlite3 **out, bool *tidy) {
  int rc = SQLITE_OK;
  bool had_files = !plain_file(path) || wal_files_exist(path);
  int err = open_ro_once(path, out, &rc);
  /* The -wal and -shm files appeared during the open: ours (or a writer's
   * that started meanwhile, which the tidy-up leaves alone). */
  *tidy = !had_files && wal_files_exist(path);
  if (err != AA_OK && *tidy) {
    wal_tidy(path);
    *tidy = false;
  }
  /* A WAL database in a directory we cannot write (a copy on read-only
   * media, another user's file) cannot get its -shm file. With no -wal file
   * beside it and no way to create one, nobody can be writing it: read it as
   * immutable. */
  if (err != AA_OK &&
      ((rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_READONLY) &&
      strncmp(path, "file:", 5) != 0 && access(path, R_OK) == 0) {
    char wal[4200];
    snprintf(wal, sizeof wal, "%s-wal", path);
    if (access(wal, F_OK) != 0) {
      char *uri = immutable_uri(path);
      if (uri == NULL) return AA_ENOMEM;
      err = open_ro_once(uri, out, &rc);
      free(uri);
    }
  }
  return err;
}
