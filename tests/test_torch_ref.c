// The C model against PyTorch: the same small DLRM, the same initial weights and batches, must
// give the same losses, gradients and parameters after several SGD steps (within float
// tolerance: the two use different summation orders).  tools/torch_ref.py writes the reference;
// the test is skipped, saying so, when no Python with torch is installed.
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "test.h"
#include "train.h"

typedef struct {
    char name[64];
    int ndim, dims[4];
    size_t n;
    float *data;
} tensor;

static int load_tensors(const char *path, tensor *ts, int cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char line[256];
    int n = 0;
    if (!fgets(line, sizeof line, f) || strcmp(line, "bagpipe-tensors 1\n") != 0) {
        fclose(f);
        return -1;
    }
    while (n < cap && fgets(line, sizeof line, f)) {
        tensor *t = &ts[n];
        line[strcspn(line, "\n")] = 0;
        snprintf(t->name, sizeof t->name, "%.63s", line);
        if (!fgets(line, sizeof line, f)) break;
        char *p = line;
        t->ndim = (int)strtol(p, &p, 10);
        t->n = 1;
        for (int d = 0; d < t->ndim && d < 4; d++) t->dims[d] = (int)strtol(p, &p, 10), t->n *= (size_t)t->dims[d];
        t->data = bp_xmalloc(t->n * sizeof(float) + 1);
        if (fread(t->data, sizeof(float), t->n, f) != t->n) {
            free(t->data);
            break;
        }
        n++;
    }
    fclose(f);
    return n;
}

static const tensor *get(const tensor *ts, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(ts[i].name, name) == 0) return &ts[i];
    return NULL;
}

// torch "bot.0.weight" -> ours "bot.0.W".
static void our_name(char *out, size_t cap, const char *torch_name) {
    snprintf(out, cap, "%s", torch_name);
    char *dot = strrchr(out, '.');
    if (dot && strcmp(dot, ".weight") == 0) strcpy(dot, ".W");
    else if (dot && strcmp(dot, ".bias") == 0) strcpy(dot, ".b");
}

static const char *python_with_torch(void) {
    static const char *cands[] = {"/usr/bin/python3", "python3"};
    for (size_t i = 0; i < BP_ARRAY_LEN(cands); i++)
        if (test_run(NULL, 120, "%s -c \"import torch\"", cands[i]) == 0) return cands[i];
    return NULL;
}

// Largest |a - b| / (1 + |b|) over n values.
static double max_rel(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = BP_MAX(m, fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i])));
    return m;
}

// Runs tools/torch_ref.py with args and repeats its run on the C trainer.
static void torch_check(const char *args_py) {
    const char *py = python_with_torch();
    if (!py) {
        test_skip("no Python with torch (Debian package python3-torch): PyTorch reference check not run");
        return;
    }
    const char *ref = test_path("ref.bin");
    char *out = NULL;
    int st = test_run(&out, 300, "%s tools/torch_ref.py --out %s --steps 6 --batch 8 %s", py, ref, args_py);
    ASSERT_MSG(st == 0, "tools/torch_ref.py failed: %s", out);
    free(out);
    tensor ts[128];
    int nt = load_tensors(ref, ts, 128);
    ASSERT_TRUE(nt > 10);
    const tensor *cfgt = get(ts, nt, "config"), *card_t = get(ts, nt, "card");
    const int Nd = (int)cfgt->data[0], F = (int)cfgt->data[1], D = (int)cfgt->data[2], B = (int)cfgt->data[3],
              S = (int)cfgt->data[4];
    const double lr = cfgt->data[5] / 1e6;
    const tensor *sch = get(ts, nt, "lr_schedule"), *rate_t = get(ts, nt, "lr");
    ASSERT_TRUE(sch && sch->n == 3 && rate_t && (int)rate_t->n == S);
    const tensor *bot = get(ts, nt, "bot_dims"), *top = get(ts, nt, "top_dims");
    char args[256];
    size_t len = (size_t)snprintf(args, sizeof args, "--model dlrm --arch-sparse-feature-size %d --arch-mlp-bot ", D);
    for (size_t i = 0; i < bot->n; i++) len += (size_t)snprintf(args + len, sizeof args - len, "%s%d", i ? "-" : "", (int)bot->data[i]);
    len += (size_t)snprintf(args + len, sizeof args - len, " --arch-mlp-top ");
    for (size_t i = 0; i < top->n; i++) len += (size_t)snprintf(args + len, sizeof args - len, "%s%d", i ? "-" : "", (int)top->data[i]);
    model_config mc;
    ASSERT_OK(model_config_parse(&mc, args, Nd, F));
    uint64_t card[8];
    for (int f = 0; f < F; f++) card[f] = (uint64_t)card_t->data[f];
    emb_opt eopt = emb_opt_make(EMB_OPT_SGD, (float)lr, mc.E);
    dense_opt dopt = dense_opt_make(DENSE_OPT_SGD, (float)lr);
    emb_layout_cfg lc = {.F = F, .card = card, .D = D, .E = mc.E, .S = 0, .seed = 1};
    trainer tr;
    ASSERT_OK(trainer_init(&tr, &mc, &lc, &dopt, &eopt, B, 0));
    tr.sched = (lr_schedule){(int64_t)sch->data[0], (int64_t)sch->data[1], (int64_t)sch->data[2]};
    tr.lr = tr.emb_lr = lr;
    // The rate of every step, bit for bit (the reference's Python doubles rounded to float).
    for (int s = 0; s < S; s++)
        ASSERT_MSG(lr_schedule_rate(&tr.sched, lr, s) == rate_t->data[s], "step %d: rate %.9g, torch's %.9g", s + 1,
                   (double)lr_schedule_rate(&tr.sched, lr, s), (double)rate_t->data[s]);

    // Load the initial weights: every model tensor and every table must be in the file.
    int loaded = 0;
    for (int i = 0; i < nt; i++) {
        if (strncmp(ts[i].name, "init.", 5) != 0) continue;
        const char *tn = ts[i].name + 5;
        if (strncmp(tn, "emb.", 4) == 0) {
            int f = atoi(tn + 4);
            for (uint64_t r = 0; r < card[f]; r++)
                memcpy(emb_table_row(&tr.table, emb_key(&tr.L, f, (uint32_t)r)), ts[i].data + r * D, (size_t)D * 4);
        } else {
            char nm[64];
            our_name(nm, sizeof nm, tn);
            const model_param *p = model_param_find(&tr.m, nm);
            ASSERT_MSG(p && p->n == ts[i].n, "parameter %s missing or of another size", nm);
            memcpy(tr.m.params + p->off, ts[i].data, p->n * sizeof(float));
        }
        loaded++;
    }
    ASSERT_EQ(loaded, tr.m.n_ptab + F);

    const tensor *dense = get(ts, nt, "batch.dense"), *ids_t = get(ts, nt, "batch.ids"),
                 *lab_t = get(ts, nt, "batch.label"), *loss_t = get(ts, nt, "loss");
    uint32_t *ids = bp_xmalloc((size_t)B * F * sizeof *ids);
    uint8_t *lab = bp_xmalloc((size_t)B);
    for (int s = 0; s < S; s++) {
        for (int i = 0; i < B * F; i++) ids[i] = (uint32_t)ids_t->data[(size_t)s * B * F + i];
        for (int i = 0; i < B; i++) lab[i] = lab_t->data[(size_t)s * B + i] > 0.5f;
        double loss = trainer_step(&tr, s, dense->data + (size_t)s * B * Nd, ids, lab, B);
        ASSERT_NEAR(loss, loss_t->data[s], 2e-6 * (1 + fabs(loss)));
        if (s > 0) continue;
        // Step 0: every gradient against torch's.
        for (int i = 0; i < nt; i++) {
            if (strncmp(ts[i].name, "grad0.", 6) != 0) continue;
            const char *tn = ts[i].name + 6;
            if (strncmp(tn, "emb.", 4) == 0) {
                int f = atoi(tn + 4);
                for (uint64_t r = 0; r < card[f]; r++) {
                    uint64_t key = emb_key(&tr.L, f, (uint32_t)r);
                    const float *want = ts[i].data + r * D;
                    const float *got = NULL;
                    for (int k = 0; k < tr.g.n; k++)
                        if (tr.g.keys[k] == key) got = tr.g.rows + (size_t)k * tr.g.E;
                    for (int d = 0; d < D; d++)
                        ASSERT_MSG(fabs((got ? got[d] : 0.0f) - want[d]) <= 1e-6 + 1e-5 * fabs(want[d]),
                                   "%s row %llu [%d]: %g vs torch %g", ts[i].name, (unsigned long long)r, d,
                                   got ? got[d] : 0.0, want[d]);
                }
            } else {
                char nm[64];
                our_name(nm, sizeof nm, tn);
                const model_param *p = model_param_find(&tr.m, nm);
                double e = max_rel(tr.m.grads + p->off, ts[i].data, p->n);
                ASSERT_MSG(e < 1e-5, "gradient of %s differs from torch by %g", nm, e);
            }
        }
    }
    // Parameters after all the steps.
    for (int i = 0; i < nt; i++) {
        if (strncmp(ts[i].name, "final.", 6) != 0) continue;
        const char *tn = ts[i].name + 6;
        if (strncmp(tn, "emb.", 4) == 0) {
            int f = atoi(tn + 4);
            for (uint64_t r = 0; r < card[f]; r++) {
                double e = max_rel(emb_table_row(&tr.table, emb_key(&tr.L, f, (uint32_t)r)), ts[i].data + r * D, (size_t)D);
                ASSERT_MSG(e < 1e-5, "table %d row %llu differs from torch by %g", f, (unsigned long long)r, e);
            }
        } else {
            char nm[64];
            our_name(nm, sizeof nm, tn);
            const model_param *p = model_param_find(&tr.m, nm);
            double e = max_rel(tr.m.params + p->off, ts[i].data, p->n);
            ASSERT_MSG(e < 1e-5, "%s after %d steps differs from torch by %g", nm, S, e);
        }
    }
    printf("    losses match torch over %d SGD steps (first %.6f, last %.6f)\n", S, loss_t->data[0], loss_t->data[S - 1]);
    free(ids), free(lab);
    trainer_free(&tr);
    for (int i = 0; i < nt; i++) free(ts[i].data);
}

TEST(torch_reference_dlrm) { torch_check(""); }

// The DLRM reference's learning-rate schedule: steps 1-2 warm up, step 3 holds the warmup's last
// rate until the decay starts at 4, steps 4-6 decay, 7-9 hold the decay's last rate.
TEST(torch_reference_dlrm_lr_schedule) {
    torch_check("--steps 9 --lr-warmup 3 --lr-decay-start 4 --lr-decay-steps 3");
}
