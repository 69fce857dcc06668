// ckpt: saved models and checkpoints as a directory of parts plus a manifest.
//
//   DIR/MANIFEST   text, committed last and atomically; it names every part with its size and
//                  CRC-32, carries the configuration as "key value" lines, and ends with a line
//                  holding the CRC-32 of everything before it.
//   DIR/<part>     binary parts, each written atomically (temp + fsync + rename).
//
// A directory whose MANIFEST is missing, damaged, or disagrees with a part's size or checksum
// does not hold a valid save; loading says which file is wrong.
#ifndef BP_CKPT_H
#define BP_CKPT_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_MAX_FILES 256
#define CKPT_MAX_KV 128
#define CKPT_NAME_MAX 64
#define CKPT_VAL_MAX 512

typedef struct {
    char name[CKPT_NAME_MAX];
    uint64_t size;
    uint32_t crc;
} ckpt_file;

typedef struct {
    int n_kv;
    char key[CKPT_MAX_KV][CKPT_NAME_MAX];
    char val[CKPT_MAX_KV][CKPT_VAL_MAX];
    int n_files;
    ckpt_file files[CKPT_MAX_FILES];
} ckpt_manifest;

// Creates dir if missing (one level).
int ckpt_mkdir(const char *dir);
// Checks, before any work, that ckpt_mkdir(dir) and writing into dir can succeed: dir is a
// writable directory, or does not exist and its parent is one; "writable" is tried (a directory
// made and removed), not asked of access().  Leaves nothing behind.  Returns 0 or BP_EINVAL /
// BP_EIO with a message naming dir.
int ckpt_dir_check(const char *dir);
// For --save dir, before any work: a dir/MANIFEST that is not empty and not a bagpipe manifest
// (another tool's file of that name) would be replaced by the saved model's, or removed with the
// model it seems to be: refused (BP_EUSAGE, naming it), as is a dense.bin or emb.bin without a
// MANIFEST (not a model's part: the dataset, another file).  0 when there is none or it is bagpipe's.
int ckpt_save_dir_check(const char *dir);

// Writes one part from n buffers laid end to end; fills *out (name, size, crc).
int ckpt_write_part(const char *dir, const char *name, const void *const *bufs, const size_t *lens, int n,
                    ckpt_file *out);

void ckpt_manifest_init(ckpt_manifest *m);
void ckpt_set(ckpt_manifest *m, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void ckpt_add_file(ckpt_manifest *m, const ckpt_file *f);
const char *ckpt_get(const ckpt_manifest *m, const char *key); // NULL when absent
// Reads key as an integer; BP_ECORRUPT naming dir and key when absent or malformed.
int ckpt_get_i64(const ckpt_manifest *m, const char *dir, const char *key, int64_t *v);
const ckpt_file *ckpt_find(const ckpt_manifest *m, const char *name);

// Commits dir/MANIFEST atomically, once every part it lists is in dir at its size (BP_EIO naming
// a part missing or of another size: a directory the rank that wrote it and this process see
// differently).
int ckpt_manifest_commit(const char *dir, const ckpt_manifest *m);
// The write of ckpt_manifest_commit without its check of the parts: for a manifest whose parts
// are elsewhere by design (the manifest fuzzer's round trip).
int ckpt_manifest_write(const char *dir, const ckpt_manifest *m);

// Replacing a saved model as a whole.  Writing new parts over the old ones would leave, until the
// new MANIFEST is committed, a directory that holds neither model (a crash, Ctrl-C or full disk
// there loses the old one), and writing them into a directory of no model would leave, killed
// there, parts without a MANIFEST.  So where dir is a directory:
//   ckpt_stage_begin makes the sibling directory <dir>.saving-<pid>, to write the new model into
//   (its path in stage), and returns 1; it returns 0, stage empty, where the model is to be
//   written into dir itself (dir is a symbolic link, "." or "..", or the sibling cannot be made,
//   e.g. in a directory this user cannot write to);
//   ckpt_stage_commit puts it in dir's place: the two directories are exchanged at once
//   (renameat2 RENAME_EXCHANGE), then the old model's files (its MANIFEST, the parts it names,
//   temporary files) are removed and anything else that was in dir is moved back.  Where the
//   file system cannot exchange, the new files are renamed into dir one by one, the MANIFEST last;
//   ckpt_stage_abort removes the staged directory after a failed write.
int ckpt_stage_begin(const char *dir, char *stage, size_t cap);
int ckpt_stage_commit(const char *dir, const char *stage);
void ckpt_stage_abort(const char *stage);
// A new directory (dir does not exist) is staged too, so that even a kill -9 leaves no dir
// without a MANIFEST: ckpt_stage_new makes <dir>.saving-<pid> (its path in stage; 0, or an error
// naming dir), and ckpt_stage_commit_new renames it to dir, or where dir has appeared meanwhile
// puts it in dir's place as ckpt_stage_commit does.
int ckpt_stage_new(const char *dir, char *stage, size_t cap);
int ckpt_stage_commit_new(const char *dir, const char *stage);
// A save killed between the exchange and the end of ckpt_stage_commit leaves <dir>.saving-<pid>
// holding what dir held before (the older model, and any other files not yet moved back).  This
// names each such directory of a process that is gone, on stderr, with its number of entries; it
// moves and removes nothing (which files matter is the user's to say).  Returns how many it named.
int ckpt_stage_warn_leftovers(const char *dir);
// Parses and validates DIR/MANIFEST (format, checksum line, field syntax).
int ckpt_manifest_load(const char *dir, ckpt_manifest *m);
// Reads part `name` whole into n buffers of the given lengths (which must add up to its size)
// and checks its CRC.
int ckpt_read_part(const char *dir, const ckpt_manifest *m, const char *name, void *const *bufs, const size_t *lens,
                   int n);

// ---------------------------------------------------------------------------------------------
// Training checkpoints (docs/checkpoints.md): ROOT/ckpt-<iteration, 12 digits>/ is a directory as
// above whose manifest says "kind checkpoint" and "iteration K" (the state after iterations
// 0..K-1).  A checkpoint exists only once its MANIFEST is committed and every part it names has
// its size and CRC; anything else in ROOT is ignored by loading.

#define CKPT_DIR_PREFIX "ckpt-"

enum { CKPT_ON_ERROR_STOP = 0, CKPT_ON_ERROR_CONTINUE = 1 };

// The checkpoint flags of `bagpipe train` (CKPT_CLI_OPTS in ckpt_run.h) and, when resuming, what
// was found.
typedef struct {
    const char *dir;     // --checkpoint-dir ROOT (NULL: no checkpoints are written)
    int64_t every;       // --checkpoint-every N iterations (0: off)
    double minutes;      // --checkpoint-minutes M (0: off)
    int keep;            // --keep K newest valid checkpoints
    int on_error;        // --on-checkpoint-error stop|continue
    int naive;           // --checkpoint-naive: flush every row to one writer (the baseline)
    const char *resume;  // --resume ROOT (NULL: a fresh start)
    int64_t start_iter;  // resuming: the checkpoint's iteration (0 otherwise)
    char from[4096];     // resuming: the checkpoint directory
    char run_id[64];     // writing: this run's name in its manifests ("run"; pid, host and start time)
} ckpt_opts;
// ROOT/ckpt-<iter>.
void ckpt_dir_path(char *buf, size_t cap, const char *root, int64_t iter);
// Creates ROOT (if missing) and ROOT/ckpt-<iter>; several ranks may call it at once.
int ckpt_dir_create(const char *root, int64_t iter, char *dir, size_t cap);
// Loads dir's manifest and checks every part it lists (size and CRC, reading each whole).
// BP_ECORRUPT / BP_EIO naming the file that is wrong.
int ckpt_verify(const char *dir, ckpt_manifest *m);
// The newest valid checkpoint under root: its directory, iteration and manifest.  Each newer
// candidate that fails ckpt_verify is reported once on stderr (with the reason; not below
// BP_LOG_WARN) and skipped.
// BP_EIO when root cannot be read or holds no valid checkpoint (the message names root and the
// newest invalid candidate's problem).
int ckpt_latest(const char *root, char *dir, size_t cap, int64_t *iter, ckpt_manifest *m);
// ckpt_latest for a reader beside a live job that writes into root (its pid in root's lock): when
// no checkpoint there is valid, because the job's newest is unfinished (no MANIFEST) and the one
// before was pruned while it was read, it waits for that one's commit, scanning again every 0.1 s
// for up to wait_s seconds (said once on stderr), or scans once more if it was committed
// meanwhile.  Fails as ckpt_latest when no job is writing, root holds no checkpoint yet, or the
// newest is committed and still nothing is valid (damaged checkpoints are not waited for).
int ckpt_latest_wait(const char *root, char *dir, size_t cap, int64_t *iter, ckpt_manifest *m, double wait_s);
// The newest checkpoint under root whose MANIFEST loads and names its iteration, without reading
// its parts (ckpt_latest verifies them): for a message, not for loading.  Quiet; BP_EIO if none.
int ckpt_latest_committed(const char *root, char *dir, size_t cap, int64_t *iter);
// After the commit of checkpoint `committed` (-1: none) by the run named run_id (NULL: any), which
// began at iteration `since` (the checkpoint it resumed from; -1 for a fresh run): keeps the `keep`
// newest checkpoints whose manifest loads and whose parts have their sizes, removes the older ones
// and any older leftover without a valid manifest.  Never removes one of the `keep` newest valid
// ones, nor anything newer than the newest valid one, nor `committed`; checkpoints newer than
// `committed` (of a history this run left: it resumed from an older one because they were
// damaged) are neither kept nor removed, so that one of them cannot push out what this run writes.
// Between `since` and `committed` only this run's own (their manifest's "run" is run_id) count as
// valid: one there that it did not write is what it skipped as damaged when it resumed (a flipped
// byte passes the size check), and counting it kept one valid checkpoint fewer than `keep`.
// Returns the number of directories removed, or a negative code.
int ckpt_prune(const char *root, int keep, int64_t committed, int64_t since, const char *run_id);
// Locks the checkpoint root for the rest of this process's life (flock on ROOT/.lock, which says
// the holder's pid; ROOT created first if `create`): a second job writing or resuming the same
// root is refused with BP_EUSAGE naming `flag`, ROOT and that pid, where two jobs used to prune
// each other's checkpoints.  A root that cannot be created or opened is left to the checks that
// follow (0).  One process per job takes it: the launcher, the process of a local run, or rank 0
// under the user's own mpirun/srun.  A lock file it created goes at its normal exit when the root
// then holds no checkpoint.
int ckpt_lock_root(const char *root, int create, const char *flag);
// Removes now the lock files this process created in roots without a checkpoint, as its exit
// would (a job that failed at start-up, before a peer's exit ends this process).
void ckpt_drop_created_locks(void);
// 1 when dir holds no MANIFEST but ckpt-<iteration> directories (a --checkpoint-dir root).
int ckpt_is_root(const char *dir);
// The iteration of the newest checkpoint under root that looks valid (its manifest loads and its
// parts have their sizes), or -1: none, or no such directory.
int64_t ckpt_newest_valid(const char *root);
// Removes a checkpoint directory (its files, then itself).
int ckpt_remove_dir(const char *dir);

#endif
