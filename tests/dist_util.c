#include "dist_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "data_bin.h"
#include "test.h"

const char *dist_test_env(void) {
    static char env[1024];
    const char *supp = test_path("lsan.supp");
    FILE *f = fopen(supp, "w");
    if (f) {
        // scripts/lsan.supp's entries: Open MPI's libraries, and glibc's pthread_getattr_np buffer that
        // ASan keeps when a thread starts (a child's worker pool hit it under the sanitizer pass)
        fputs("leak:libmpi.so\nleak:libopen-pal.so\nleak:libopen-rte.so\nleak:libpmix.so\nleak:libhwloc.so\n"
              "leak:libevent\nleak:mca_\nleak:GetThreadStackTopAndBottom\n", f);
        fclose(f);
    }
    snprintf(env, sizeof env,
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_hwloc_base_binding_policy=none "
             "OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_btl_vader_single_copy_mechanism=none "
             "LSAN_OPTIONS=fast_unwind_on_malloc=0:print_suppressions=0:suppressions=%s", supp);
    return env;
}

int dist_test_dataset(const char *path, uint64_t n, uint64_t seed, uint64_t stream) {
    bp_ds_info t = {0};
    t.n_dense = 4, t.n_sparse = 3, t.kind = BP_KIND_CUSTOM;
    snprintf(t.source, sizeof t.source, "multi-rank test data");
    bp_ds_writer *w;
    int rc = bp_ds_writer_open(&w, path, &t);
    if (rc) return rc;
    const uint64_t card[3] = {40, 300, 2000};
    bp_rng rng;
    bp_rng_seed(&rng, seed, stream);
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

char *dist_test_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = 0, cap = 4096, k;
    char *b = bp_xmalloc(cap);
    while ((k = fread(b + n, 1, cap - n - 1, f)) > 0) { // /proc files report no size: read to EOF
        n += k;
        if (cap - n < 2) b = bp_xrealloc(b, cap *= 2);
    }
    fclose(f);
    b[n] = 0;
    if (len) *len = n;
    return b;
}

int dist_test_files_equal(const char *a, const char *b) {
    size_t la = 0, lb = 0;
    char *x = dist_test_slurp(a, &la), *y = dist_test_slurp(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x), free(y);
    return same;
}

int dist_test_same_file(const char *a, const char *b, const char *name) {
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/%s", a, name), snprintf(pb, sizeof pb, "%s/%s", b, name);
    struct stat st;
    return stat(pa, &st) == 0 && st.st_size > 0 && dist_test_files_equal(pa, pb);
}

// The last summary line of a metrics file, or NULL; *m gets the file (free it).
static const char *summary_line(const char *path, char **m) {
    size_t len;
    *m = dist_test_slurp(path, &len);
    const char *s = NULL;
    for (const char *p = *m; p && (p = strstr(p, "\"event\":\"summary\"")); p++) s = p;
    return s;
}

double dist_test_summary_num(const char *path, const char *key) {
    char *m, pat[96];
    const char *s = summary_line(path, &m);
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = s ? strstr(s, pat) : NULL;
    double v = p ? strtod(p + strlen(pat), NULL) : NAN;
    free(m);
    return v;
}

int dist_test_summary_str(const char *path, const char *key, char *buf, size_t cap) {
    char *m, pat[96];
    const char *s = summary_line(path, &m);
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = s ? strstr(s, pat) : NULL;
    int rc = -1;
    if (p) {
        p += strlen(pat);
        size_t n = strcspn(p, "\"");
        if (n < cap) memcpy(buf, p, n), buf[n] = 0, rc = 0;
    }
    free(m);
    return rc;
}

int dist_test_train(char **out, const char *model, const char *data, const char *dir, const char *args) {
    return test_run(out, 60, "%s %s train %s %s --save %s %s", dist_test_env(), test_bin(), model, args, test_path(dir),
                    data);
}

long dist_test_num_before(const char *out, const char *line, const char *what) {
    const char *l = strstr(out, line);
    if (!l) return -1;
    const char *e = strchr(l, '\n'), *w = strstr(l, what);
    if (!w || (e && w > e)) return -1;
    while (w > l && w[-1] == ' ') w--;
    while (w > l && w[-1] >= '0' && w[-1] <= '9') w--;
    return strtol(w, NULL, 10);
}

int dist_test_said_once(const char *out, const char *msg) {
    const char *first = out ? strstr(out, msg) : NULL;
    return first && !strstr(first + 1, msg);
}
