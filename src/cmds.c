// Shared command plumbing and the small `info` command.
#include "cmds.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "common.h"
#include "data_bin.h"

int cmd_exit(int rc) {
    if (rc == 0) return 0;
    fflush(stdout); // what the run printed (its memory plan...) comes before the error in a shared log
    fprintf(stderr, "bagpipe: %s\n", bp_errmsg(rc));
    return rc == BP_EUSAGE ? 2 : 1;
}

int cmd_open_dataset(bp_dataset *ds, const char *path) {
    return bp_ds_open(ds, path, BP_DS_VERIFY); // a raw log's message says how to convert it (bp_ds_header_decode)
}

int cmd_info(int argc, char **argv) {
    int no_verify = 0;
    const cli_opt opts[] = {
        CLI_FLAG("no-verify", 0, &no_verify, "skip the section checksums (header and sizes are always checked)"),
        CLI_END,
    };
    char **pos;
    int npos;
    int rc = cli_parse("bagpipe info", "[options] DATASET", opts, argc, argv, &pos, &npos);
    if (rc == 1) return 0;
    if (rc) return cmd_exit(rc);
    if (npos != 1) {
        free(pos);
        return cmd_exit(bp_fail(BP_EUSAGE, "info: expected one dataset file (see 'bagpipe info --help')"));
    }
    bp_dataset ds;
    rc = bp_ds_open(&ds, pos[0], no_verify ? 0 : BP_DS_VERIFY);
    if (rc) {
        free(pos);
        return cmd_exit(rc);
    }
    const bp_ds_info *in = &ds.info;
    char b[32];
    printf("dataset     %s (%s)\n", pos[0], bp_fmt_bytes(b, sizeof b, (double)in->file_size));
    printf("kind        %s, version %u%s\n", bp_ds_kind_name(in->kind), in->version,
           no_verify ? "" : ", checksums verified");
    printf("source      %s\n", in->source);
    printf("rows        %llu (train %llu, val %llu, test %llu)\n", (unsigned long long)in->rows,
           (unsigned long long)in->split[0], (unsigned long long)in->split[1], (unsigned long long)in->split[2]);
    if (in->n_dense) // the transform says nothing without dense features (Avazu)
        printf("features    %u dense (%s), %u sparse\n", in->n_dense,
               in->transform == BP_TRANSFORM_LOG1P ? "log(1+max(x,0))" : "raw", in->n_sparse);
    else
        printf("features    0 dense, %u sparse\n", in->n_sparse);
    printf("id mapping  %s", bp_ds_idmap_name(in->idmap));
    if (in->idmap == BP_IDMAP_FREQ) printf(" (min count %u)", in->min_count);
    if (in->idmap == BP_IDMAP_FREQ && in->vocab_fp) printf(", vocabulary digest %016llx", (unsigned long long)in->vocab_fp);
    if (in->idmap == BP_IDMAP_HASH) printf(" (modulo %llu)", (unsigned long long)in->max_ind_range);
    if (in->idmap == BP_IDMAP_HASH && in->vocab_fp)
        printf(", the residues present numbered in order (prep --compact), digest %016llx",
               (unsigned long long)in->vocab_fp);
    printf("\ntables      %llu rows in all:", (unsigned long long)bp_ds_total_card(in));
    for (uint32_t f = 0; f < in->n_sparse; f++) printf("%s%llu", f ? "," : " ", (unsigned long long)in->card[f]);
    printf("\n");
    if (ds.prob) printf("truth       per-sample click probability present (synthetic)\n");
    bp_ds_close(&ds);
    free(pos);
    return 0;
}
