#include "data_bin.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common.h"

// Header field offsets.  Bytes not listed are zero; the last 4 bytes hold the CRC-32 of the
// preceding BP_DS_HEADER_SIZE - 4 bytes.
enum {
    H_MAGIC = 0,
    H_VERSION = 8,
    H_HEADER_SIZE = 12,
    H_ROWS = 16,
    H_N_DENSE = 24,
    H_N_SPARSE = 28,
    H_TRANSFORM = 32,
    H_FLAGS = 36,
    H_KIND = 40,
    H_IDMAP = 44,
    H_MIN_COUNT = 48,
    H_MAX_IND_RANGE = 56,
    H_SPLIT = 64,   // 3 x u64
    H_SEED = 88,
    H_OFF_LABEL = 96,
    H_OFF_DENSE = 104,
    H_OFF_SPARSE = 112,
    H_OFF_PROB = 120,
    H_FILE_SIZE = 128,
    H_CRC_LABEL = 136,
    H_CRC_DENSE = 140,
    H_CRC_SPARSE = 144,
    H_CRC_PROB = 148,
    H_VOCAB_FP = 152,
    H_CARD = 256,   // 64 x u64
    H_SOURCE = 768, // 256 bytes, NUL-padded
    H_CRC = BP_DS_HEADER_SIZE - 4,
};

static uint64_t align_up(uint64_t x) { return (x + BP_DS_ALIGN - 1) / BP_DS_ALIGN * BP_DS_ALIGN; }

void bp_ds_layout(bp_ds_info *in) {
    uint64_t off = BP_DS_HEADER_SIZE;
    in->off_label = off;
    off = align_up(off + in->rows);
    in->off_dense = off;
    off = align_up(off + in->rows * in->n_dense * 4);
    in->off_sparse = off;
    off += in->rows * in->n_sparse * 4;
    if (in->flags & BP_DS_HAS_PROB) {
        off = align_up(off);
        in->off_prob = off;
        off += in->rows * 4;
    } else {
        in->off_prob = 0;
    }
    in->file_size = off;
}

void bp_ds_header_encode(const bp_ds_info *in, uint8_t *b) {
    memset(b, 0, BP_DS_HEADER_SIZE);
    memcpy(b + H_MAGIC, BP_DS_MAGIC, 8);
    bp_put_u32(b + H_VERSION, BP_DS_VERSION);
    bp_put_u32(b + H_HEADER_SIZE, BP_DS_HEADER_SIZE);
    bp_put_u64(b + H_ROWS, in->rows);
    bp_put_u32(b + H_N_DENSE, in->n_dense);
    bp_put_u32(b + H_N_SPARSE, in->n_sparse);
    bp_put_u32(b + H_TRANSFORM, in->transform);
    bp_put_u32(b + H_FLAGS, in->flags);
    bp_put_u32(b + H_KIND, in->kind);
    bp_put_u32(b + H_IDMAP, in->idmap);
    bp_put_u32(b + H_MIN_COUNT, in->min_count);
    bp_put_u64(b + H_MAX_IND_RANGE, in->max_ind_range);
    for (int i = 0; i < 3; i++) bp_put_u64(b + H_SPLIT + 8 * i, in->split[i]);
    bp_put_u64(b + H_SEED, in->seed);
    bp_put_u64(b + H_OFF_LABEL, in->off_label);
    bp_put_u64(b + H_OFF_DENSE, in->off_dense);
    bp_put_u64(b + H_OFF_SPARSE, in->off_sparse);
    bp_put_u64(b + H_OFF_PROB, in->off_prob);
    bp_put_u64(b + H_FILE_SIZE, in->file_size);
    bp_put_u32(b + H_CRC_LABEL, in->crc_label);
    bp_put_u32(b + H_CRC_DENSE, in->crc_dense);
    bp_put_u32(b + H_CRC_SPARSE, in->crc_sparse);
    bp_put_u32(b + H_CRC_PROB, in->crc_prob);
    bp_put_u64(b + H_VOCAB_FP, in->vocab_fp);
    for (uint32_t f = 0; f < in->n_sparse && f < BP_DS_MAX_SPARSE; f++) bp_put_u64(b + H_CARD + 8 * f, in->card[f]);
    size_t slen = strnlen(in->source, sizeof in->source - 1);
    memcpy(b + H_SOURCE, in->source, slen);
    bp_put_u32(b + H_CRC, bp_crc32(0, b, H_CRC));
}

// The first bytes of the gzip stream b[0, n), decompressed into out[0, cap): how many came out.
static size_t gz_head(const uint8_t *b, size_t n, uint8_t *out, size_t cap) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 16) != Z_OK) return 0; // 16: a gzip header
    z.next_in = (Bytef *)(uintptr_t)b, z.avail_in = (uInt)BP_MIN(n, (size_t)1 << 30);
    z.next_out = out, z.avail_out = (uInt)cap;
    inflate(&z, Z_SYNC_FLUSH);
    const size_t got = cap - z.avail_out;
    inflateEnd(&z);
    return got;
}

int bp_ds_header_decode(bp_ds_info *out, const uint8_t *b, size_t n, const char *what) {
    bp_ds_info in;
    memset(&in, 0, sizeof in);
    static const char manifest[] = "bagpipe-manifest "; // a saved model's or checkpoint's first line (ckpt.c)
    if (n >= sizeof manifest - 1 && memcmp(b, manifest, sizeof manifest - 1) == 0)
        return bp_fail(BP_EFORMAT, "%s: the MANIFEST of a saved model or checkpoint, not a dataset; its directory "
                       "is what 'bagpipe eval --load DIR DATA' reads", what);
    const char *base = strrchr(what, '/');
    base = base ? base + 1 : what;
    unsigned idx;
    char tail;
    if (strcmp(base, "dense.bin") == 0 || strcmp(base, "emb.bin") == 0 || // the names a model's parts have
        ((sscanf(base, "server-%u.bi%c", &idx, &tail) == 2 || sscanf(base, "trainer-%u.bi%c", &idx, &tail) == 2) &&
         tail == 'n' && !strchr(base, '+') && strlen(strrchr(base, '.')) == 4)) {
        const int dataset = n >= BP_DS_HEADER_SIZE && memcmp(b + H_MAGIC, BP_DS_MAGIC, 8) == 0;
        if (!dataset && !(n >= 2 && b[0] == 0x1f && b[1] == 0x8b))
            return bp_fail(BP_EFORMAT, "%s: not a bagpipe dataset; by its name a part of a saved model or checkpoint, "
                           "whose directory is what 'bagpipe eval --load DIR DATA' reads", what);
    }
    if (n < BP_DS_HEADER_SIZE)
        return bp_fail(BP_ECORRUPT, "%s: too short for a bagpipe dataset header (%zu bytes)", what, n);
    if (memcmp(b + H_MAGIC, BP_DS_MAGIC, 8) != 0) {
        if (b[0] == 0x1f && b[1] == 0x8b) { // gzip: of a dataset, or of a raw log
            uint8_t head[8];
            if (gz_head(b, n, head, sizeof head) == sizeof head && memcmp(head, BP_DS_MAGIC, 8) == 0)
                return bp_fail(BP_EFORMAT, "%s: a gzip-compressed bagpipe dataset; a dataset is mapped as it is, not "
                               "read through gzip: decompress it first (gzip -d)", what);
            return bp_fail(BP_EFORMAT, "%s: not a bagpipe binary dataset but gzip data; a raw Criteo/Avazu log, plain "
                           "or gzip, must be converted first: bagpipe prep -o DATA.bin %s", what, what);
        }
        return bp_fail(BP_EFORMAT, "%s: not a bagpipe binary dataset (bad magic); a raw Criteo/Avazu log must be "
                       "converted first: bagpipe prep -o DATA.bin %s", what, what);
    }
    in.version = bp_get_u32(b + H_VERSION);
    int crc_ok = bp_get_u32(b + H_CRC) == bp_crc32(0, b, H_CRC);
    // A damaged version field must not pass for a dataset of another version.
    if (in.version != BP_DS_VERSION && !crc_ok)
        return bp_fail(BP_ECORRUPT, "%s: header checksum mismatch (file damaged, or a dataset version %u that this build, "
                       "which reads version %u, cannot check)", what, in.version, BP_DS_VERSION);
    if (in.version != BP_DS_VERSION)
        return bp_fail(BP_EVERSION, "%s: dataset version %u, this build reads version %u", what, in.version, BP_DS_VERSION);
    if (!crc_ok) return bp_fail(BP_ECORRUPT, "%s: header checksum mismatch (file damaged)", what);
    if (bp_get_u32(b + H_HEADER_SIZE) != BP_DS_HEADER_SIZE)
        return bp_fail(BP_ECORRUPT, "%s: bad header size", what);
    in.rows = bp_get_u64(b + H_ROWS);
    in.n_dense = bp_get_u32(b + H_N_DENSE);
    in.n_sparse = bp_get_u32(b + H_N_SPARSE);
    in.transform = bp_get_u32(b + H_TRANSFORM);
    in.flags = bp_get_u32(b + H_FLAGS);
    in.kind = bp_get_u32(b + H_KIND);
    in.idmap = bp_get_u32(b + H_IDMAP);
    in.min_count = bp_get_u32(b + H_MIN_COUNT);
    in.max_ind_range = bp_get_u64(b + H_MAX_IND_RANGE);
    for (int i = 0; i < 3; i++) in.split[i] = bp_get_u64(b + H_SPLIT + 8 * i);
    in.seed = bp_get_u64(b + H_SEED);
    in.off_label = bp_get_u64(b + H_OFF_LABEL);
    in.off_dense = bp_get_u64(b + H_OFF_DENSE);
    in.off_sparse = bp_get_u64(b + H_OFF_SPARSE);
    in.off_prob = bp_get_u64(b + H_OFF_PROB);
    in.file_size = bp_get_u64(b + H_FILE_SIZE);
    in.crc_label = bp_get_u32(b + H_CRC_LABEL);
    in.crc_dense = bp_get_u32(b + H_CRC_DENSE);
    in.crc_sparse = bp_get_u32(b + H_CRC_SPARSE);
    in.crc_prob = bp_get_u32(b + H_CRC_PROB);
    in.vocab_fp = bp_get_u64(b + H_VOCAB_FP);
    memcpy(in.source, b + H_SOURCE, sizeof in.source - 1);

    if (in.n_dense > BP_DS_MAX_DENSE || in.n_sparse > BP_DS_MAX_SPARSE || in.n_sparse == 0)
        return bp_fail(BP_ECORRUPT, "%s: bad feature counts (%u dense, %u sparse)", what, in.n_dense, in.n_sparse);
    if (in.transform > BP_TRANSFORM_LOG1P || in.kind > BP_KIND_SYNTH || in.idmap > BP_IDMAP_HASH ||
        (in.flags & ~(uint32_t)BP_DS_HAS_PROB))
        return bp_fail(BP_ECORRUPT, "%s: unknown transform, kind, id mapping or flags", what);
    // rows * (1 + 4 Nd + 4 F + 4) must not overflow: 2^48 rows is far beyond any real dataset.
    if (in.rows > ((uint64_t)1 << 48))
        return bp_fail(BP_ECORRUPT, "%s: implausible row count %llu", what, (unsigned long long)in.rows);
    if (in.split[0] > in.rows || in.split[1] > in.rows - in.split[0] ||
        in.split[2] != in.rows - in.split[0] - in.split[1])
        return bp_fail(BP_ECORRUPT, "%s: split sizes do not add up to the row count", what);
    for (uint32_t f = 0; f < in.n_sparse; f++) {
        in.card[f] = bp_get_u64(b + H_CARD + 8 * f);
        if (in.card[f] == 0 || in.card[f] > ((uint64_t)1 << 32))
            return bp_fail(BP_ECORRUPT, "%s: table %u has bad cardinality %llu", what, f, (unsigned long long)in.card[f]);
    }
    bp_ds_info want = in;
    bp_ds_layout(&want);
    if (want.off_label != in.off_label || want.off_dense != in.off_dense || want.off_sparse != in.off_sparse ||
        want.off_prob != in.off_prob || want.file_size != in.file_size)
        return bp_fail(BP_ECORRUPT, "%s: section layout does not match the header's sizes", what);
    *out = in;
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Writer

enum { SEC_LABEL, SEC_DENSE, SEC_SPARSE, SEC_PROB, N_SEC };

struct bp_ds_writer {
    bp_ds_info info;
    char *path;
    int spill[N_SEC];      // unspilled: unlinked temporary files, one per section
    bp_afile af;           // sized: the temporary file under its final layout (af.fd >= 0)
    uint64_t expect;       // sized: the row count promised to open
    uint32_t crc[N_SEC];
    uint64_t rows;
    uint32_t *max_id;      // (F) largest id seen per table, +1 (0 = none)
    bp_ds_sparse_map map;  // renumbers the sparse ids at finish (bp_ds_writer_map_sparse)
    void *map_ctx;
};

static int open_spill(const char *path, int *fd) {
    size_t n = strlen(path) + 32;
    char *tmpl = bp_xmalloc(n);
    snprintf(tmpl, n, "%s.spill.XXXXXX", path);
    *fd = mkstemp(tmpl);
    int rc = 0;
    if (*fd < 0) rc = bp_fail(BP_EIO, "%s: cannot create temporary file: %s", path, strerror(errno));
    else unlink(tmpl); // lives until closed; a crash leaves nothing behind
    free(tmpl);
    return rc;
}

int bp_ds_replace_check(const char *path, int text) {
    // Missing: created; not a regular file: bp_afile_target refuses it; empty: nothing to lose.
    // Through a symlink, the file it names is what would be replaced.
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) // the rename over it needs no right on the file itself: what it holds must be known
        return bp_fail(BP_EUSAGE, "%s: exists and cannot be read to check what it holds (%s); only a %s is "
                       "replaced: remove it first or choose another output name", path, strerror(errno),
                       text ? "text file" : "bagpipe dataset");
    uint8_t head[4096];
    const ssize_t n = read(fd, head, sizeof head);
    close(fd);
    if (n <= 0) return 0;
    const char *held = n >= 8 && memcmp(head, BP_DS_MAGIC, 8) == 0 ? "a bagpipe dataset"
                       : n >= 2 && head[0] == 0x1f && head[1] == 0x8b ? "gzip data"
                       : memchr(head, 0, (size_t)n)                   ? "binary data"
                                                                      : "text";
    if (!text && strcmp(held, "a bagpipe dataset") != 0)
        return bp_fail(BP_EUSAGE, "%s: exists and is not a bagpipe dataset (it holds %s); only a dataset is replaced: "
                       "remove it first or choose another output name", path, held);
    if (text && strcmp(held, "text") != 0 && !(text == 2 && strcmp(held, "gzip data") == 0))
        return bp_fail(BP_EUSAGE, "%s: exists and is not a text file (it holds %s); only a text file%s is replaced: "
                       "remove it first or choose another output name", path, held,
                       text == 2 ? ", plain or gzip," : "");
    return 0;
}

// A writer with no file open yet in *out, or an error (and *out NULL) when tmpl or path cannot
// make a dataset.
static int writer_new(bp_ds_writer **out, const char *path, const bp_ds_info *tmpl) {
    *out = NULL;
    if (tmpl->n_dense > BP_DS_MAX_DENSE || tmpl->n_sparse == 0 || tmpl->n_sparse > BP_DS_MAX_SPARSE)
        return bp_fail(BP_EINVAL, "%s: a dataset needs 0-%d dense and 1-%d sparse features (got %u, %u)", path,
                       BP_DS_MAX_DENSE, BP_DS_MAX_SPARSE, tmpl->n_dense, tmpl->n_sparse);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return bp_fail(BP_EINVAL, "%s: is a directory, expected a file name for the dataset", path);
    char *target; // a device, FIFO or socket at path is refused now, not after the work
    int rc = bp_afile_target(path, &target);
    if (rc) return rc;
    free(target);
    if ((rc = bp_ds_replace_check(path, 0)) != 0) return rc;
    // A dataset is mapped, never read through gzip, so it is written uncompressed; under a .gz name
    // gzip, zcat and every tool that goes by the name would take it for what it is not.
    const size_t len = strlen(path);
    if (len > 3 && strcmp(path + len - 3, ".gz") == 0)
        return bp_fail(BP_EUSAGE, "%s: a bagpipe dataset is written uncompressed (it is mapped, not read through "
                       "gzip); give --out a name without '.gz'", path);
    bp_ds_writer *w = *out = bp_xcalloc(1, sizeof *w);
    w->info = *tmpl;
    w->info.version = BP_DS_VERSION;
    w->path = bp_xstrdup(path);
    w->af.fd = -1;
    for (int s = 0; s < N_SEC; s++) w->spill[s] = -1;
    w->max_id = bp_xcalloc(tmpl->n_sparse, sizeof *w->max_id);
    return 0;
}

int bp_ds_writer_open(bp_ds_writer **out, const char *path, const bp_ds_info *tmpl) {
    int rc = writer_new(out, path, tmpl);
    if (rc) return rc;
    bp_ds_writer *w = *out;
    int nsec = (tmpl->flags & BP_DS_HAS_PROB) ? N_SEC : SEC_PROB;
    for (int s = 0; s < nsec; s++) {
        if ((rc = open_spill(path, &w->spill[s])) != 0) {
            bp_ds_writer_abort(w);
            *out = NULL;
            return rc;
        }
    }
    return 0;
}

uint64_t bp_ds_writer_rows(const bp_ds_writer *w) { return w->rows; }

void bp_ds_writer_set_vocab_fp(bp_ds_writer *w, uint64_t fp) { w->info.vocab_fp = fp; }

void bp_ds_writer_map_sparse(bp_ds_writer *w, bp_ds_sparse_map map, void *ctx) {
    BP_ASSERTF(w->af.fd < 0, "a sized dataset writer renumbers no ids");
    w->map = map, w->map_ctx = ctx;
}

static int spill_write(bp_ds_writer *w, int s, const void *buf, size_t n) {
    return bp_write_all(w->spill[s], buf, n, w->path);
}

// Sized writer: the open temporary file, pre-sized to the final layout.
int bp_ds_writer_open_sized(bp_ds_writer **out, const char *path, const bp_ds_info *tmpl, uint64_t rows) {
    int rc = writer_new(out, path, tmpl);
    if (rc) return rc;
    bp_ds_writer *w = *out;
    w->info.rows = w->expect = rows;
    bp_ds_layout(&w->info);
    rc = bp_afile_open(&w->af, path);
    if (!rc && ftruncate(w->af.fd, (off_t)w->info.file_size) != 0)
        rc = bp_fail(BP_EIO, "%s: cannot size the file to %llu bytes: %s", path,
                     (unsigned long long)w->info.file_size, strerror(errno));
    if (rc) {
        bp_ds_writer_abort(w);
        *out = NULL;
    }
    return rc;
}

void bp_ds_rows_summarize(const bp_ds_info *shape, size_t n, const uint8_t *labels, const float *dense,
                          const uint32_t *sparse, const float *prob, bp_ds_rows_sum *sum) {
    const uint32_t F = shape->n_sparse, Nd = shape->n_dense;
    BP_ASSERT(F >= 1 && F <= BP_DS_MAX_SPARSE);
    memset(sum, 0, sizeof *sum);
    for (size_t i = 0; i < n; i++) BP_ASSERTF(labels[i] <= 1, "label %u is not 0 or 1", labels[i]);
    for (size_t i = 0; i < n; i++)
        for (uint32_t f = 0; f < F; f++) {
            uint32_t id1 = sparse[i * F + f] + 1;
            if (id1 == 0) id1 = UINT32_MAX; // id 2^32 - 1: beyond any cardinality
            if (id1 > sum->max_id1[f]) sum->max_id1[f] = id1;
        }
    sum->crc[SEC_LABEL] = bp_crc32(0, labels, n);
    if (Nd) sum->crc[SEC_DENSE] = bp_crc32(0, dense, n * Nd * sizeof(float));
    sum->crc[SEC_SPARSE] = bp_crc32(0, sparse, n * F * sizeof(uint32_t));
    if (shape->flags & BP_DS_HAS_PROB) {
        BP_ASSERT(prob);
        sum->crc[SEC_PROB] = bp_crc32(0, prob, n * sizeof(float));
    }
}

int bp_ds_writer_append(bp_ds_writer *w, size_t n, const uint8_t *labels, const float *dense,
                        const uint32_t *sparse, const float *prob) {
    bp_ds_rows_sum sum;
    bp_ds_rows_summarize(&w->info, n, labels, dense, sparse, prob, &sum);
    return bp_ds_writer_append_summed(w, n, labels, dense, sparse, prob, &sum);
}

int bp_ds_writer_append_summed(bp_ds_writer *w, size_t n, const uint8_t *labels, const float *dense,
                               const uint32_t *sparse, const float *prob, const bp_ds_rows_sum *sum) {
    const uint32_t F = w->info.n_sparse, Nd = w->info.n_dense;
    const int has_prob = (w->info.flags & BP_DS_HAS_PROB) != 0;
    const void *src[N_SEC] = {labels, dense, sparse, prob};
    const size_t width[N_SEC] = {1, (size_t)Nd * sizeof(float), (size_t)F * sizeof(uint32_t), sizeof(float)};
    const int sized = w->af.fd >= 0;
    if (sized && n > w->expect - w->rows)
        return bp_fail(BP_EINVAL, "%s: %llu rows appended to a dataset sized for %llu", w->path,
                       (unsigned long long)(w->rows + n), (unsigned long long)w->expect);
    const uint64_t off[N_SEC] = {w->info.off_label, w->info.off_dense, w->info.off_sparse, w->info.off_prob};
    int rc = 0;
    for (int s = 0; s < N_SEC && !rc; s++) {
        if (width[s] == (size_t)0 || (s == SEC_DENSE && !Nd) || (s == SEC_PROB && !has_prob)) continue;
        size_t len = n * width[s];
        if (sized) {
            const uint64_t at = off[s] + w->rows * width[s];
            rc = bp_pwrite_all(w->af.fd, src[s], len, at, w->path);
            // Start writing the pages back now, so the fsync of the commit has little left to do.
            if (!rc) (void)sync_file_range(w->af.fd, (off64_t)at, (off64_t)len, SYNC_FILE_RANGE_WRITE);
        } else {
            rc = spill_write(w, s, src[s], len);
        }
        if (!rc) w->crc[s] = bp_crc32_combine(w->crc[s], sum->crc[s], len);
    }
    if (rc) return rc;
    for (uint32_t f = 0; f < F; f++)
        if (sum->max_id1[f] > w->max_id[f]) w->max_id[f] = sum->max_id1[f];
    w->rows += n;
    return 0;
}

// Copies the whole spill file src into dst at offset off, a piece at a time, each piece's disk
// space in src given back (a hole punched) once copied: the dataset then needs its own size on
// the disk, not twice that (spills and dataset side by side until the spills closed).  Where the
// file system punches no holes, the spill holds its space until it is closed.
// The pieces are 16 MiB (test hook BAGPIPE_TEST_COPY_PIECE=BYTES: smaller, for a small disk).
static uint64_t copy_piece(void) {
    const char *e = getenv("BAGPIPE_TEST_COPY_PIECE");
    const uint64_t v = e ? strtoull(e, NULL, 10) : 0;
    return v >= 4096 ? v / 4096 * 4096 : (uint64_t)16 << 20;
}

static int copy_section(int dst, uint64_t off, int src, uint64_t len, const char *what) {
    int rc = 0, kernel_copy = 1;
    char *buf = NULL;
    const uint64_t step = copy_piece();
    for (uint64_t done = 0; !rc && done < len;) {
        const uint64_t piece = BP_MIN(len - done, step);
        uint64_t k = 0;
        while (kernel_copy && k < piece) {
            loff_t in_off = (loff_t)(done + k), out_off = (loff_t)(off + done + k);
            ssize_t got = copy_file_range(src, &in_off, dst, &out_off, piece - k, 0);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) kernel_copy = 0; // not supported here, or a short copy: read/write the rest
            else k += (uint64_t)got;
        }
        if (k < piece && !buf) buf = bp_xmalloc(1 << 20);
        while (!rc && k < piece) {
            const size_t chunk = (size_t)BP_MIN(piece - k, (uint64_t)1 << 20);
            rc = bp_pread_all(src, buf, chunk, done + k, what);
            if (!rc) rc = bp_pwrite_all(dst, buf, chunk, off + done + k, what);
            k += chunk;
        }
        if (!rc) fallocate(src, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)done, (off_t)piece);
        done += piece;
    }
    free(buf);
    return rc;
}

// The sparse section's copy into place through w->map: its CRC into *crc and each table's largest
// id + 1 into w->max_id.
static int copy_sparse_mapped(bp_ds_writer *w, int dst, uint64_t off, uint64_t len, uint32_t *crc) {
    const uint32_t F = w->info.n_sparse;
    const size_t chunk_vals = ((size_t)1 << 18) / F * F; // whole rows
    uint32_t *buf = bp_xmalloc(chunk_vals * sizeof *buf);
    memset(w->max_id, 0, F * sizeof *w->max_id);
    uint32_t c = 0;
    int rc = 0;
    for (uint64_t done = 0; !rc && done < len;) {
        const size_t bytes = (size_t)BP_MIN(len - done, (uint64_t)chunk_vals * sizeof *buf), n = bytes / sizeof *buf;
        rc = bp_pread_all(w->spill[SEC_SPARSE], buf, bytes, done, w->path);
        if (rc) break;
        w->map(w->map_ctx, buf, n, done / sizeof *buf);
        for (size_t i = 0; i < n; i++) { // (chunks hold whole rows: buf[i] is table i % F)
            const uint32_t f = (uint32_t)(i % F), id1 = buf[i] + 1;
            if (id1 > w->max_id[f]) w->max_id[f] = id1;
        }
        c = bp_crc32(c, buf, bytes);
        rc = bp_pwrite_all(dst, buf, bytes, off + done, w->path);
        done += bytes;
    }
    free(buf);
    *crc = c;
    return rc;
}

int bp_ds_writer_finish(bp_ds_writer *w, const uint64_t *card, const uint64_t split[3]) {
    bp_ds_info *in = &w->info;
    int rc = 0;
    in->rows = w->rows;
    for (uint32_t f = 0; f < in->n_sparse; f++) {
        in->card[f] = card[f];
        if (card[f] == 0 || card[f] > ((uint64_t)1 << 32) || (!w->map && w->max_id[f] > card[f])) {
            rc = bp_fail(BP_ERANGE, "%s: table %u: ids up to %u do not fit its cardinality %llu", w->path, f,
                         w->max_id[f] - 1, (unsigned long long)card[f]);
            bp_ds_writer_abort(w);
            return rc;
        }
    }
    if (split) {
        if (split[0] + split[1] + split[2] != w->rows) {
            rc = bp_fail(BP_EINVAL, "%s: split sizes do not add up to %llu rows", w->path, (unsigned long long)w->rows);
            bp_ds_writer_abort(w);
            return rc;
        }
        memcpy(in->split, split, sizeof in->split);
    } else {
        in->split[0] = w->rows, in->split[1] = in->split[2] = 0;
    }
    bp_ds_layout(in);
    in->crc_label = w->crc[SEC_LABEL];
    in->crc_dense = w->crc[SEC_DENSE];
    in->crc_sparse = w->crc[SEC_SPARSE];
    in->crc_prob = w->crc[SEC_PROB];

    const int sized = w->af.fd >= 0;
    if (sized && w->rows != w->expect) {
        rc = bp_fail(BP_EINVAL, "%s: %llu rows written to a dataset sized for %llu", w->path,
                     (unsigned long long)w->rows, (unsigned long long)w->expect);
        bp_ds_writer_abort(w);
        return rc;
    }
    bp_afile af;
    if (sized) {
        af = w->af;
        w->af = (bp_afile){.fd = -1}; // af owns it now
    } else {
        rc = bp_afile_open(&af, w->path);
        if (rc) {
            bp_ds_writer_abort(w);
            return rc;
        }
    }
    const uint64_t off[N_SEC] = {in->off_label, in->off_dense, in->off_sparse, in->off_prob};
    const uint64_t len[N_SEC] = {in->rows, in->rows * in->n_dense * 4, in->rows * in->n_sparse * 4, in->rows * 4};
    if (w->map && len[SEC_SPARSE]) { // renumbered first: the header holds its CRC
        rc = copy_sparse_mapped(w, af.fd, off[SEC_SPARSE], len[SEC_SPARSE], &in->crc_sparse);
        for (uint32_t f = 0; f < in->n_sparse && !rc; f++)
            if (w->max_id[f] > card[f])
                rc = bp_fail(BP_ERANGE, "%s: table %u: renumbered ids up to %u do not fit its cardinality %llu",
                             w->path, f, w->max_id[f] - 1, (unsigned long long)card[f]);
    }
    uint8_t *hdr = bp_xmalloc(BP_DS_HEADER_SIZE);
    bp_ds_header_encode(in, hdr);
    if (!rc) rc = bp_afile_pwrite(&af, hdr, BP_DS_HEADER_SIZE, 0);
    free(hdr);
    for (int s = 0; s < N_SEC && !rc && !sized; s++)
        if (w->spill[s] >= 0 && len[s] && !(s == SEC_SPARSE && w->map))
            rc = copy_section(af.fd, off[s], w->spill[s], len[s], w->path);
    if (!rc && ftruncate(af.fd, (off_t)in->file_size) != 0)
        rc = bp_fail(BP_EIO, "%s: cannot set file size: %s", w->path, strerror(errno));
    if (!rc) rc = bp_afile_commit(&af);
    else bp_afile_abort(&af);
    bp_ds_writer_abort(w); // frees the spills and w
    return rc;
}

void bp_ds_writer_abort(bp_ds_writer *w) {
    if (!w) return;
    for (int s = 0; s < N_SEC; s++)
        if (w->spill[s] >= 0) close(w->spill[s]);
    if (w->af.fd >= 0) bp_afile_abort(&w->af);
    free(w->max_id);
    free(w->path);
    free(w);
}

// ---------------------------------------------------------------------------------------------
// Reader

int bp_ds_open(bp_dataset *ds, const char *path, unsigned flags) {
    memset(ds, 0, sizeof *ds);
    // O_NONBLOCK: a FIFO without a writer is refused below instead of waiting forever in open.
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return bp_fail(BP_EIO, "%s: cannot open dataset: %s", path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = bp_fail(BP_EIO, "%s: cannot stat: %s", path, strerror(errno));
        goto out_close;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = bp_fail(BP_EINVAL, "%s: is a directory, expected a dataset file", path);
        goto out_close;
    }
    if (!S_ISREG(st.st_mode)) { // a pipe (<(...)) read as "empty", a FIFO hung
        rc = bp_fail(BP_EINVAL, "%s: not a regular file (%s); a dataset is mapped in place: give the dataset file "
                     "itself", path, bp_file_kind(st.st_mode));
        goto out_close;
    }
    uint8_t hdr[BP_DS_HEADER_SIZE] = {0}; // a short file leaves zeros (the gzip sniff reads it whole)
    size_t have = st.st_size < BP_DS_HEADER_SIZE ? (size_t)st.st_size : BP_DS_HEADER_SIZE;
    if (have < 8 || (rc = bp_pread_all(fd, hdr, have, 0, path)) != 0) {
        if (!rc) rc = bp_fail(BP_ECORRUPT, "%s: empty or truncated dataset (%lld bytes)", path, (long long)st.st_size);
        goto out_close;
    }
    if (memcmp(hdr, BP_DS_MAGIC, 8) != 0) { // before any size check: a short text file is no dataset
        rc = bp_ds_header_decode(&ds->info, hdr, BP_DS_HEADER_SIZE, path);
        goto out_close;
    }
    rc = bp_ds_header_decode(&ds->info, hdr, have, path);
    if (rc) goto out_close;
    if ((uint64_t)st.st_size != ds->info.file_size) {
        rc = bp_fail(BP_ECORRUPT, "%s: file is %lld bytes but its header says %llu (truncated or damaged)", path,
                     (long long)st.st_size, (unsigned long long)ds->info.file_size);
        goto out_close;
    }
    ds->map_size = (size_t)st.st_size;
    ds->map = mmap(NULL, ds->map_size, PROT_READ, MAP_SHARED, fd, 0);
    if (ds->map == MAP_FAILED) {
        ds->map = NULL;
        rc = bp_fail(BP_EIO, "%s: cannot map: %s", path, strerror(errno));
        goto out_close;
    }
    const uint8_t *base = ds->map;
    const bp_ds_info *in = &ds->info;
    ds->label = base + in->off_label;
    ds->dense = (const float *)(base + in->off_dense);
    ds->sparse = (const uint32_t *)(base + in->off_sparse);
    ds->prob = (in->flags & BP_DS_HAS_PROB) ? (const float *)(base + in->off_prob) : NULL;
    ds->path = bp_xstrdup(path);
    if (flags & BP_DS_VERIFY) {
        madvise(ds->map, ds->map_size, MADV_SEQUENTIAL);
        const struct { const char *name; const void *p; uint64_t n; uint32_t crc; } sec[] = {
            {"label", ds->label, in->rows, in->crc_label},
            {"dense", ds->dense, in->rows * in->n_dense * 4, in->crc_dense},
            {"sparse", ds->sparse, in->rows * in->n_sparse * 4, in->crc_sparse},
            {"prob", ds->prob, ds->prob ? in->rows * 4 : 0, in->crc_prob},
        };
        for (size_t s = 0; s < BP_ARRAY_LEN(sec) && !rc; s++)
            if (sec[s].p && bp_crc32(0, sec[s].p, sec[s].n) != sec[s].crc)
                rc = bp_fail(BP_ECORRUPT, "%s: %s section checksum mismatch (file damaged)", path, sec[s].name);
        for (uint64_t r = 0; r < in->rows && !rc; r++) {
            if (ds->label[r] > 1) rc = bp_fail(BP_ECORRUPT, "%s: row %llu: label %u", path, (unsigned long long)r, ds->label[r]);
            // prep and synth write finite values; another writer's NaN would make every metric NaN
            const float *dv = ds->dense + r * in->n_dense;
            for (uint32_t f = 0; f < in->n_dense && !rc; f++)
                if (!isfinite(dv[f]))
                    rc = bp_fail(BP_ECORRUPT, "%s: row %llu: dense feature %u is %s, expected a finite value", path,
                                 (unsigned long long)r, f, isnan(dv[f]) ? "NaN" : "infinite");
            const uint32_t *row = ds->sparse + r * in->n_sparse;
            for (uint32_t f = 0; f < in->n_sparse && !rc; f++)
                if (row[f] >= in->card[f])
                    rc = bp_fail(BP_ECORRUPT, "%s: row %llu: id %u of table %u is outside its %llu rows", path,
                                 (unsigned long long)r, row[f], f, (unsigned long long)in->card[f]);
        }
        madvise(ds->map, ds->map_size, MADV_NORMAL);
    }
    if (rc) {
        bp_ds_close(ds);
        goto out_close;
    }
out_close:
    close(fd);
    return rc;
}

void bp_ds_close(bp_dataset *ds) {
    if (ds->map) munmap(ds->map, ds->map_size);
    free(ds->path);
    memset(ds, 0, sizeof *ds);
}

void bp_ds_split_range(const bp_dataset *ds, bp_split s, uint64_t *begin, uint64_t *end) {
    const uint64_t *sp = ds->info.split;
    switch (s) {
    case BP_SPLIT_TRAIN: *begin = 0, *end = sp[0]; break;
    case BP_SPLIT_VAL: *begin = sp[0], *end = sp[0] + sp[1]; break;
    case BP_SPLIT_TEST: *begin = sp[0] + sp[1], *end = ds->info.rows; break;
    default: *begin = 0, *end = ds->info.rows; break;
    }
}

void bp_ds_split_last(uint64_t rows, uint64_t last, uint64_t split[3]) {
    BP_ASSERT(last <= rows);
    split[0] = rows - last;
    split[1] = (last + 1) / 2;
    split[2] = last / 2;
}

void bp_ds_split_kaggle(uint64_t rows, uint64_t split[3]) {
    bp_ds_split_last(rows, rows / 7, split); // the rows % 7 < 7 extra rows went to days 0-5
}

static uint64_t frac_rows(double f, uint64_t rows) {
    double x = f * (double)rows + 1e-6; // absorbs the rounding of f (0.29 * 100 = 28.999...)
    return x >= (double)rows ? rows : (uint64_t)x;
}

void bp_ds_split_ratio(uint64_t rows, const double ratio[3], uint64_t split[3]) {
    split[0] = frac_rows(ratio[0], rows);
    split[1] = BP_MIN(frac_rows(ratio[1], rows), rows - split[0]);
    split[2] = rows - split[0] - split[1];
    if (ratio[2] == 0) split[ratio[1] > 0 ? 1 : 0] += split[2], split[2] = 0;
}

uint64_t bp_ds_total_card(const bp_ds_info *info) {
    uint64_t t = 0;
    for (uint32_t f = 0; f < info->n_sparse; f++) t += info->card[f];
    return t;
}

const char *bp_ds_kind_name(uint32_t kind) {
    static const char *names[] = {"custom", "criteo", "avazu", "synth"};
    return kind < BP_ARRAY_LEN(names) ? names[kind] : "unknown";
}

const char *bp_ds_idmap_name(uint32_t idmap) {
    static const char *names[] = {"raw", "frequency", "hash"};
    return idmap < BP_ARRAY_LEN(names) ? names[idmap] : "unknown";
}

const char *bp_split_name(bp_split s) {
    static const char *names[] = {"train", "val", "test", "all"};
    return (unsigned)s < BP_ARRAY_LEN(names) ? names[s] : "unknown";
}
