// Multi-rank tests of the distributed runtime (mode sync): bit-identity with the local trainer,
// reproducibility, optimizer state on the servers, wrong rank counts, dead ranks, bad input.
// Every job is started through the binary (it launches mpirun itself) under a timeout.
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "data_bin.h"
#include "msg.h"
#include "test.h"

#define OMPI_ENV                                                                                     \
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_hwloc_base_binding_policy=none " \
    "OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_vader_single_copy_mechanism=none"
#define TINY_MODEL                                                                                   \
    "--arch-mlp-bot 4-8-4 --arch-mlp-top 8-1 --arch-sparse-feature-size 4 --batch-size 24 "         \
    "--learning-rate 0.05 --print-every 100 --eval-rows 200"

// A small dataset: 4 dense features, 3 tables, ids drawn with a power-law-ish skew
// (id = card * u^3), labels from a planted logistic model.
static int write_dataset(const char *path, uint64_t n, uint64_t seed) {
    bp_ds_info t = {0};
    t.n_dense = 4, t.n_sparse = 3, t.kind = BP_KIND_CUSTOM;
    snprintf(t.source, sizeof t.source, "test_dist");
    bp_ds_writer *w;
    int rc = bp_ds_writer_open(&w, path, &t);
    if (rc) return rc;
    const uint64_t card[3] = {40, 300, 2000};
    bp_rng rng;
    bp_rng_seed(&rng, seed, 7);
    for (uint64_t r = 0; r < n && !rc; r++) {
        float d[4];
        uint32_t s[3];
        double z = -0.5;
        for (int k = 0; k < 4; k++) d[k] = bp_rng_uniformf(&rng), z += (k - 1.5) * d[k];
        for (int f = 0; f < 3; f++) {
            double u = bp_rng_uniform(&rng);
            s[f] = (uint32_t)((double)card[f] * u * u * u);
            z += ((bp_mix64(s[f] * 3u + (uint64_t)f) & 255) / 255.0 - 0.5);
        }
        uint8_t lab = bp_rng_uniform(&rng) < 1.0 / (1.0 + exp(-2.0 * z));
        rc = bp_ds_writer_append(w, 1, &lab, d, s, NULL);
    }
    if (rc) {
        bp_ds_writer_abort(w);
        return rc;
    }
    uint64_t split[3] = {n * 8 / 10, n / 10, n - n * 8 / 10 - n / 10};
    return bp_ds_writer_finish(w, card, split);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

// 1 when DIR_A/name and DIR_B/name exist and are byte-identical.
static int same_file(const char *a, const char *b, const char *name) {
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/%s", a, name), snprintf(pb, sizeof pb, "%s/%s", b, name);
    size_t la, lb;
    char *x = read_file(pa, &la), *y = read_file(pb, &lb);
    int same = x && y && la == lb && la > 0 && memcmp(x, y, la) == 0;
    free(x), free(y);
    return same;
}

// Trains and saves to DIR; returns the exit code and the output in *out (caller frees).
static int train(char **out, const char *data, const char *dir, const char *mode_args, const char *extra) {
    return test_run(out, 60, OMPI_ENV " %s train %s " TINY_MODEL " %s --save %s %s", test_bin(), mode_args, extra,
                    dir, data);
}

#define TRAIN_OK(data, dir, mode, extra)                                                          \
    do {                                                                                          \
        char *o_ = NULL;                                                                          \
        int rc_ = train(&o_, data, dir, mode, extra);                                             \
        if (rc_ != 0) {                                                                           \
            test_fail(__FILE__, __LINE__, "train %s exited %d:\n%s", mode, rc_, o_ ? o_ : "");    \
            free(o_);                                                                             \
            return;                                                                               \
        }                                                                                         \
        free(o_);                                                                                 \
    } while (0)

TEST(dist_msg_decode_validates) {
    // A well-formed push round-trips; truncation, wrong kind, unsorted keys, keys of another
    // server and out-of-range keys are refused.
    uint64_t buf[64] = {0};
    msg_header h = {MSG_GRAD_PUSH, 0, 5, 3, 2};
    uint64_t *k;
    float *r;
    msg_encode(buf, &h, &k, &r);
    uint64_t keys[3];
    int n = 0;
    for (uint64_t key = 0; n < 3; key++)
        if (msg_server_of(key, 2) == 1) keys[n++] = key;
    memcpy(k, keys, sizeof keys);
    for (int i = 0; i < 6; i++) r[i] = (float)i;
    size_t len = msg_bytes(MSG_GRAD_PUSH, 3, 2);
    msg_expect ex = {.kind = MSG_GRAD_PUSH, .width = 2, .max_n = 10, .iter = 5, .rows = 1000, .server = 1, .S = 2};
    msg_header g;
    const uint64_t *gk;
    const float *gr;
    ASSERT_OK(msg_decode(buf, len, 3, &ex, &g, &gk, &gr));
    ASSERT_EQ(g.n, 3);
    ASSERT_EQ(gk[2], keys[2]);
    ASSERT_TRUE(gr[5] == 5.0f);
    ASSERT_EQ(msg_decode(buf, len - 4, 3, &ex, &g, &gk, &gr), BP_EFORMAT);
    ASSERT_EQ(msg_decode(buf, 10, 3, &ex, &g, &gk, &gr), BP_EFORMAT);
    msg_expect ex2 = ex;
    ex2.iter = 6;
    ASSERT_EQ(msg_decode(buf, len, 3, &ex2, &g, &gk, &gr), BP_EFORMAT);
    ex2 = ex, ex2.kind = MSG_ROW_REQ;
    ASSERT_EQ(msg_decode(buf, len, 3, &ex2, &g, &gk, &gr), BP_EFORMAT);
    ex2 = ex, ex2.server = 0;
    ASSERT_EQ(msg_decode(buf, len, 3, &ex2, &g, &gk, &gr), BP_EFORMAT);
    ex2 = ex, ex2.rows = keys[2];
    ASSERT_EQ(msg_decode(buf, len, 3, &ex2, &g, &gk, &gr), BP_EFORMAT);
    ex2 = ex, ex2.max_n = 2;
    ASSERT_EQ(msg_decode(buf, len, 3, &ex2, &g, &gk, &gr), BP_EFORMAT);
    k[1] = k[2];
    ASSERT_EQ(msg_decode(buf, len, 3, &ex, &g, &gk, &gr), BP_EFORMAT);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EFORMAT), "rank 3");
}

// (a) T = 1, S = 1 gives the local trainer's model bit for bit.
TEST(dist_sync_t1_matches_local) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 3000, 1));
    TRAIN_OK(data, test_path("local"), "--mode local", "--iters 300");
    char *out = NULL;
    int rc = test_run(&out, 60, OMPI_ENV " %s train --mode sync --trainers 1 --servers 1 " TINY_MODEL
                      " --iters 300 --save %s --metrics %s %s", test_bin(), test_path("sync"), test_path("m.jsonl"), data);
    ASSERT_MSG(rc == 0, "sync exited %d:\n%s", rc, out);
    ASSERT_STR_CONTAINS(out, "layout: 3 ranks");
    ASSERT_STR_CONTAINS(out, "val   AUC");
    free(out);
    ASSERT_TRUE(same_file(test_path("local"), test_path("sync"), "dense.bin"));
    ASSERT_TRUE(same_file(test_path("local"), test_path("sync"), "emb.bin"));
    size_t len;
    char *m = read_file(test_path("m.jsonl"), &len);
    ASSERT_TRUE(m != NULL);
    ASSERT_STR_CONTAINS(m, "\"event\":\"summary\"");
    ASSERT_STR_CONTAINS(m, "\"bytes_row_fetch\"");
    ASSERT_STR_CONTAINS(m, "\"wait_rows_s\"");
    free(m);
}

// (b) For a given T the model is the same for any S, and a run repeats bit for bit.
TEST(dist_sync_reproducible) {
    char data[512];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(write_dataset(data, 3000, 2));
    TRAIN_OK(data, test_path("t2s1"), "--mode sync --trainers 2 --servers 1", "--iters 150 --no-eval");
    TRAIN_OK(data, test_path("t2s2"), "--mode sync --trainers 2 --servers 2", "--iters 150 --no-eval");
    ASSERT_TRUE(same_file(test_path("t2s1"), test_path("t2s2"), "dense.bin"));
    ASSERT_TRUE(same_file(test_path("t2s1"), test_path("t2s2"), "emb.bin"));
    TRAIN_OK(data, test_path("t3a"), "--mode sync --trainers 3 --servers 2", "--iters 150 --no-eval");
    TRAIN_OK(data, test_path("t3b"), "--mode sync --trainers 3 --servers 2", "--iters 150 --no-eval");
    ASSERT_TRUE(same_file(test_path("t3a"), test_path("t3b"), "dense.bin"));
    ASSERT_TRUE(same_file(test_path("t3a"), test_path("t3b"), "emb.bin"));
    // A different T sums in a different order (and trains at all): the tables differ.
    ASSERT_TRUE(!same_file(test_path("t2s1"), test_path("t3a"), "emb.bin"));
}
