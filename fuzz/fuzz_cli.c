// Fuzz target: command-line parsing.  Byte 0 picks the parser, the rest is its input:
//   0  cli_parse with a table of every option type; args separated by NUL bytes
//   1  cli_parse_dims on the rest as one string
//   2  cli_parse_u64_list on the rest as one string
//   3  model_config_parse on the rest (byte 1 gives Nd, byte 2 gives F); a parsed config must
//      format (model_config_format) to flags that parse back to the same config
// Parsed values must lie within the table's bounds.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "fuzz_util.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fuzz_cli_table(char *s, size_t n) {
    int batch = 0, flag = 0, choice = 0;
    int64_t rows = 0;
    double lr = 0;
    const char *out = NULL, *name = NULL;
    const cli_opt opts[] = {
        CLI_INT("batch-size", 'b', &batch, 128, 1, 1 << 24, "global batch size"),
        CLI_I64("rows", 'n', &rows, 1000, 0, INT64_MAX, "rows"),
        CLI_DBL("lr", 0, &lr, 0.1, 1e-9, 10.0, "learning rate"),
        CLI_STR("out", 'o', &out, NULL, "output file"),
        CLI_STR("name", 0, &name, "x", "a name"),
        CLI_FLAG("verify", 'v', &flag, "verify"),
        CLI_CHOICE("mode", 'm', &choice, 1, "local|sync|bagpipe", "mode"),
        CLI_END,
    };
    char *argv[257];
    int argc = 0;
    argv[argc++] = "fuzz";
    size_t start = 0;
    while (start < n && argc < 256) { // s[n] == 0
        argv[argc++] = s + start;
        start += strlen(s + start) + 1;
    }
    argv[argc] = NULL;
    char **pos = NULL;
    int npos = -1;
    int rc = cli_parse("fuzz", "[options] ARG...", opts, argc, argv, &pos, &npos);
    FUZZ_CHECK(rc == 0 || rc == 1 || rc == BP_EUSAGE);
    if (rc == 0) {
        FUZZ_CHECK(batch >= 1 && batch <= (1 << 24) && rows >= 0 && lr >= 1e-9 && lr <= 10.0);
        FUZZ_CHECK(flag == 0 || flag == 1);
        FUZZ_CHECK(choice >= 0 && choice <= 2);
        FUZZ_CHECK(npos >= 0 && npos < argc);
        for (int i = 0; i < npos; i++) FUZZ_CHECK(pos[i] != NULL);
    }
    free(pos);
    return rc;
}

// s is one or more runs of decimal digits separated by single `sep` characters.
static int well_formed(const char *s, char sep) {
    int digits = 0;
    for (; *s; s++) {
        if (*s >= '0' && *s <= '9') digits++;
        else if (*s == sep && digits) digits = 0;
        else return 0;
    }
    return digits > 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    unsigned mode = data[0] % 4;
    size_t n = size - 1;
    char *s = malloc(n + 1); // (n + 1): the bytes and a terminating NUL
    if (!s) return 0;
    memcpy(s, data + 1, n);
    s[n] = 0;
    if (mode == 0) {
        fuzz_cli_table(s, n);
    } else if (mode == 1) {
        int dims[8];
        int k = cli_parse_dims("dims", s, dims, 8);
        FUZZ_CHECK(k == BP_EUSAGE || (k >= 1 && k <= 8));
        for (int i = 0; i < k; i++) FUZZ_CHECK(dims[i] >= 1 && dims[i] <= (1 << 24));
        // Accepted text is exactly sizes joined by '-': digits only, no sign or blank.
        if (k > 0) FUZZ_CHECK(well_formed(s, '-'));
    } else if (mode == 2) {
        uint64_t vals[8];
        int k = cli_parse_u64_list("list", s, vals, 8);
        FUZZ_CHECK(k == BP_EUSAGE || (k >= 1 && k <= 8));
        if (k > 0) FUZZ_CHECK(well_formed(s, ','));
    } else if (n >= 2) {
        int Nd = (uint8_t)s[0] % 70, F = (uint8_t)s[1] % 70;
        model_config cfg, again;
        int rc = model_config_parse(&cfg, s + 2, Nd, F);
        FUZZ_CHECK(rc == 0 || rc == BP_EUSAGE);
        if (rc == 0) {
            char f1[2048], f2[2048];
            int len = model_config_format(&cfg, f1, sizeof f1);
            FUZZ_CHECK(len > 0 && (size_t)len < sizeof f1);
            FUZZ_CHECK(model_config_validate(&cfg) == 0);
            rc = model_config_parse(&again, f1, Nd, F);
            if (rc) fprintf(stderr, "'%s': %s\n", f1, bp_errmsg(rc));
            FUZZ_CHECK(rc == 0);
            model_config_format(&again, f2, sizeof f2);
            FUZZ_CHECK(strcmp(f1, f2) == 0);
        }
    }
    free(s);
    return 0;
}
