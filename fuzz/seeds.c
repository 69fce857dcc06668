// seeds: writes the binary seed inputs of the fuzz targets (fuzz/corpus/NAME/) with the project's
// own encoders, so every seed is a valid input that the fuzzer then mutates.  Each input starts
// with the target's mode byte (see the target's comment).  Run by `scripts/fuzz.sh seeds`.
//   seeds OUTDIR
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"
#include "common.h"
#include "data_bin.h"
#include "msg.h"
#include "plan.h"

static const char *outdir;

// Writes mode byte + data[0, n) to OUTDIR/target/name.
static void put(const char *target, const char *name, int mode, const void *data, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", outdir, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", outdir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    if (mode >= 0) fputc(mode, f);
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n + 1); // (n) the file
    if (fread(b, 1, *n, f) != *n) exit(1);
    fclose(f);
    return b;
}

static void check(int rc) {
    if (rc) {
        fprintf(stderr, "seeds: %s\n", bp_errmsg(rc));
        exit(1);
    }
}

// A tiny dataset: 6 rows, 2 dense, 3 sparse features, with or without click probabilities.
static void seeds_dataset(const char *tmp, int with_prob) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tiny%d.bpd", tmp, with_prob);
    bp_ds_info t;
    memset(&t, 0, sizeof t);
    t.n_dense = 2, t.n_sparse = 3, t.transform = BP_TRANSFORM_LOG1P, t.kind = BP_KIND_SYNTH;
    t.flags = with_prob ? BP_DS_HAS_PROB : 0;
    t.seed = 7;
    snprintf(t.source, sizeof t.source, "fuzz seed");
    bp_ds_writer *w;
    check(bp_ds_writer_open(&w, path, &t));
    uint8_t labels[6] = {0, 1, 1, 0, 0, 1};
    float dense[6 * 2] = {0, 1, 2, 3, 4, 5, 0.5f, 0.25f, 1e3f, 0, 7, 8};
    uint32_t sparse[6 * 3] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 0, 0, 3, 3, 3};
    float prob[6] = {0.1f, 0.9f, 0.5f, 0.2f, 0.3f, 0.7f};
    check(bp_ds_writer_append(w, 6, labels, dense, sparse, with_prob ? prob : NULL));
    uint64_t card[3] = {4, 4, 4}, split[3] = {4, 1, 1};
    check(bp_ds_writer_finish(w, card, split));
    size_t n;
    uint8_t *b = slurp(path, &n);
    put("ds_header", with_prob ? "valid_prob" : "valid", 0, b, BP_DS_HEADER_SIZE);
    put("ds_open", with_prob ? "valid_prob" : "valid", 0, b, n);
    put("ds_open", with_prob ? "valid_prob_verify" : "valid_verify", 2, b, n);
    if (!with_prob) {
        put("ds_open", "truncated", 0, b, n - 5);
        put("ds_open", "repair_verify", 4 | 2, b, n);
    }
    free(b);
}

static void seeds_manifest(const char *tmp) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/ckpt", tmp);
    check(ckpt_mkdir(dir));
    static ckpt_manifest m;
    ckpt_manifest_init(&m);
    ckpt_set(&m, "model", "%s", "--model dlrm --arch-mlp-bot 13-64-16 --arch-mlp-top 64-1");
    ckpt_set(&m, "iter", "%d", 1200);
    ckpt_set(&m, "rows", "%lld", -5LL);
    ckpt_file f = {"dense.bin", 4096, 0xdeadbeefu};
    ckpt_add_file(&m, &f);
    ckpt_file g = {"emb.0", 123456789012ull, 0x1u};
    ckpt_add_file(&m, &g);
    check(ckpt_manifest_commit(dir, &m));
    char path[1100];
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    size_t n;
    uint8_t *b = slurp(path, &n);
    put("manifest", "valid", 0, b, n);
    // The body without its end line, for mode 1 (the target appends a correct one).
    put("manifest", "body", 1, b, n - 13);
    free(b);
}

static void seeds_plan(void) {
    plan p;
    plan_init(&p);
    for (int wide = 0; wide < 2; wide++) {
        plan_reset(&p, 3);
        p.iter = 5, p.P = 2, p.W = 10, p.B = 12, p.row0 = 60, p.capacity = 100;
        p.n_keys = wide ? ((uint64_t)1 << 40) : 1000;
        p.slice[1] = 4, p.slice[2] = 8, p.slice[3] = 12;
        plan_add_fetch(&p, (plan_fetch){7, 7, 4, 1, 2, 0});
        plan_add_fetch(&p, (plan_fetch){8, 7, PLAN_NEVER, 2, PLAN_NO_WRITER, PLAN_PRIVATE});
        plan_add_evict(&p, (plan_evict){9, 0, PLAN_WB_NEXT});
        plan_add_evict(&p, (plan_evict){10, 2, PLAN_PRIVATE});
        plan_reserve_private(&p, 3);
        p.priv_key[0] = 1, p.priv_key[1] = 2, p.priv_key[2] = 3, p.n_private = 3;
        p.priv_off[1] = 1, p.priv_off[2] = 1, p.priv_off[3] = 3;
        plan_add_sync_now(&p, 11);
        plan_add_sync_later(&p, (plan_sync){12, 5, 6});
        plan_add_sync_later(&p, (plan_sync){13, 4, 7});
        uint8_t buf[1024];
        int64_t n = plan_encode(&p, buf, sizeof buf);
        if (n < 0) check((int)n);
        put("plan", wide ? "valid_k8" : "valid_k4", 0, buf, (size_t)n);
        put("plan", wide ? "stamp_k8" : "stamp_k4", 1, buf, (size_t)n);
    }
    plan_reset(&p, 1);
    p.iter = 0, p.P = 0, p.W = 0, p.B = 1, p.capacity = 1, p.n_keys = 1, p.flags = PLAN_LAST;
    p.slice[1] = 1;
    uint8_t buf[256];
    int64_t n = plan_encode(&p, buf, sizeof buf);
    if (n < 0) check((int)n);
    put("plan", "minimal", 0, buf, (size_t)n);
    plan_free(&p);
}

// msg target input: 32 bytes of expectations, then the message.
static void seeds_msg(void) {
    static const uint32_t kinds[] = {MSG_ROW_REQ, MSG_ROW_REPLY, MSG_GRAD_PUSH, MSG_DUMP_ROWS, MSG_DONE, MSG_FETCH, MSG_WB};
    for (size_t i = 0; i < BP_ARRAY_LEN(kinds); i++) {
        uint32_t kind = kinds[i], n = kind == MSG_DONE ? 0 : 3, width = 4;
        uint8_t in[32 + 24 + 3 * 8 + 3 * 4 * 4 + 8];
        memset(in, 0, sizeof in);
        in[1] = (uint8_t)(kind - 1); // ex.kind = 1 + in[1] % 15
        in[2] = (uint8_t)width;
        bp_put_u32(in + 8, 100);       // max_n
        in[3] = 1 | 4;                 // any iteration, no owner check
        bp_put_u64(in + 20, 1000);     // rows
        uint64_t al[(sizeof in) / 8 + 1];
        msg_header h = {kind, kind == MSG_DUMP_ROWS ? MSG_F_LAST : 0, 42, n, width};
        uint64_t *keys;
        float *rows;
        msg_encode(al, &h, &keys, &rows);
        for (uint32_t j = 0; keys && j < n; j++) keys[j] = 10 * j + 1;
        for (uint32_t j = 0; rows && j < n * width; j++) rows[j] = (float)j * 0.5f;
        size_t len = msg_bytes(kind, n, width);
        memcpy(in + 32, al, len);
        char name[32];
        snprintf(name, sizeof name, "kind%u", kind);
        put("msg", name, -1, in, 32 + len);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: seeds OUTDIR\n");
        return 2;
    }
    outdir = argv[1];
    char tmp[] = "/tmp/bpseeds.XXXXXX";
    if (!mkdtemp(tmp)) return 1;
    seeds_dataset(tmp, 0);
    seeds_dataset(tmp, 1);
    seeds_manifest(tmp);
    seeds_plan();
    seeds_msg();
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    return system(cmd) == 0 ? 0 : 1;
}
