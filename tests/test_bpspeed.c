// Mode bagpipe's background reduction of sync-later gradients (role_bagpipe.c, step 5): with it
// (the default) and without it (BAGPIPE_SYNC_LATER_NOW=1) the saved model is bit-identical to
// mode sync's at T = 2 and T = 3, and the default run did reduce keys in the background.
// 300 iterations; a job's time-out is sized for ASan (scripts/sanitize.sh) on a loaded machine.
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "dist_util.h"
#include "test.h"

#define BPS_MODEL                                                                                 \
    "--arch-mlp-bot 4-8-4 --arch-mlp-top 8-1 --arch-sparse-feature-size 4 --batch-size 16 "      \
    "--learning-rate 0.05 --print-every 100 --no-eval --iters 300"

static int bps_job(char **out, const char *env, const char *data, const char *dir, const char *metrics,
                   const char *mode) {
    return test_run(out, 240, "%s %s %s train %s " BPS_MODEL " --metrics %s --save %s %s", env, dist_test_env(),
                    test_bin(), mode, metrics, dir, data);
}

#define BPS_OK(env, data, dir, metrics, mode)                                                          \
    do {                                                                                               \
        char *out_ = NULL;                                                                             \
        int rc_ = bps_job(&out_, env, data, dir, metrics, mode);                                       \
        ASSERT_MSG(rc_ == 0, "%s train %s exited %d:\n%s", env, mode, rc_, out_ ? out_ : "");          \
        free(out_);                                                                                    \
    } while (0)

static void bps_check(int T, int S, const char *bagpipe_flags) {
    char data[512], s[512], b[512], f[512], ms[512], mb[512], mf[512], mode[256];
    snprintf(data, sizeof data, "%s", test_path("d.bin"));
    ASSERT_OK(dist_test_dataset(data, 12000, 5, 11));
    snprintf(s, sizeof s, "%s", test_path("sync"));
    snprintf(b, sizeof b, "%s", test_path("bg"));
    snprintf(f, sizeof f, "%s", test_path("fg"));
    snprintf(ms, sizeof ms, "%s", test_path("sync.jsonl"));
    snprintf(mb, sizeof mb, "%s", test_path("bg.jsonl"));
    snprintf(mf, sizeof mf, "%s", test_path("fg.jsonl"));
    snprintf(mode, sizeof mode, "--mode sync --trainers %d --servers %d", T, S);
    BPS_OK("", data, s, ms, mode);
    snprintf(mode, sizeof mode, "--mode bagpipe --trainers %d --servers %d %s", T, S, bagpipe_flags);
    BPS_OK("", data, b, mb, mode);
    BPS_OK("BAGPIPE_SYNC_LATER_NOW=1", data, f, mf, mode);
    DIST_SAME_MODEL("sync", "bg");
    DIST_SAME_MODEL("sync", "fg");
    double bg = dist_test_summary_num(mb, "sync_background_keys"), now = dist_test_summary_num(mb, "sync_now_keys");
    ASSERT_MSG(bg > 0 && now > 0, "T = %d: keys reduced in the background %g, now %g", T, bg, now);
    double fbg = dist_test_summary_num(mf, "sync_background_keys"), fnow = dist_test_summary_num(mf, "sync_now_keys");
    ASSERT_MSG(fbg == 0 && fnow == bg + now, "T = %d, BAGPIPE_SYNC_LATER_NOW=1: background %g, now %g (default: %g + %g)",
               T, fbg, fnow, bg, now);
}

TEST(bagpipe_background_sync_t2) { bps_check(2, 1, "--prefetch 2 --lookahead 16 --cache-rows 110"); }

TEST(bagpipe_background_sync_t3) { bps_check(3, 2, "--prefetch 1 --lookahead 8 --cache-rows 100"); }
