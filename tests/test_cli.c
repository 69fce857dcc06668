#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "dist_util.h"
#include "test.h"

// cli_usage's text of opts (through a file, as --help prints it) into text; 0 on an I/O error.
static int usage_text(const cli_opt *opts, char *text, size_t cap) {
    FILE *f = fopen(test_path("help.txt"), "w+");
    if (!f) return 0;
    cli_usage("p", "[options]", opts, f);
    rewind(f);
    size_t n = fread(text, 1, cap - 1, f);
    text[n] = 0;
    fclose(f);
    return 1;
}

TEST(cli_parses_table) {
    int batch, flag, choice;
    double lr;
    const char *out;
    const cli_opt opts[] = {
        CLI_INT("batch-size", 'b', &batch, 128, 1, 1 << 20, "batch"),
        CLI_DBL("learning-rate", 0, &lr, 0.1, 0, 10, "lr"),
        CLI_STR("out", 'o', &out, "x", "output"),
        CLI_FLAG("verbose", 'v', &flag, "verbose"),
        CLI_CHOICE("mode", 0, &choice, 1, "local|sync|bagpipe", "mode"),
        CLI_END,
    };
    char *argv[] = {"p", "-b", "64", "--learning-rate=0.5", "in1", "--mode", "bagpipe", "-v", "in2", NULL};
    char **pos;
    int npos;
    ASSERT_OK(cli_parse("p", "", opts, 9, argv, &pos, &npos));
    ASSERT_EQ(batch, 64);
    ASSERT_NEAR(lr, 0.5, 0);
    ASSERT_TRUE(flag == 1 && choice == 2 && npos == 2);
    ASSERT_TRUE(strcmp(out, "x") == 0 && strcmp(pos[1], "in2") == 0);
    free(pos);

    char *bad1[] = {"p", "--batch-size", "0"};
    ASSERT_EQ(cli_parse("p", "", opts, 3, bad1, &pos, &npos), BP_EUSAGE);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EUSAGE), "--batch-size");
    char *bad2[] = {"p", "--mode", "fast"};
    ASSERT_EQ(cli_parse("p", "", opts, 3, bad2, &pos, &npos), BP_EUSAGE);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EUSAGE), "local|sync|bagpipe");
    char *bad3[] = {"p", "--nope"};
    ASSERT_EQ(cli_parse("p", "", opts, 2, bad3, &pos, &npos), BP_EUSAGE);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EUSAGE), "--nope");
    char *bad4[] = {"p", "--learning-rate"};
    ASSERT_EQ(cli_parse("p", "", opts, 2, bad4, &pos, &npos), BP_EUSAGE);
    // A bound that only guards arithmetic is not printed (it was "[0, 4611686018427387903]").
    int64_t iters;
    const cli_opt big[] = {CLI_I64("iters", 'n', &iters, 0, 0, INT64_MAX / 2, "iters"), CLI_END};
    char *bad5[] = {"p", "-n", "-5"};
    ASSERT_EQ(cli_parse("p", "", big, 3, bad5, &pos, &npos), BP_EUSAGE);
    ASSERT_TRUE(strcmp(bp_errmsg(BP_EUSAGE), "--iters: -5 is out of range (at least 0)") == 0);
}

// Numbers are decimal: a leading zero is not octal, 0x is not hex (strtol with base 0 read
// "010" as 8, "0x10" as 16 and refused "09").
TEST(cli_numbers_are_decimal) {
    int n;
    int64_t m;
    double x;
    const cli_opt opts[] = {
        CLI_INT("batch-size", 'b', &n, 128, -100, 1 << 20, "batch"),
        CLI_I64("iters", 0, &m, 0, 0, INT64_MAX / 2, "iters"),
        CLI_DBL("learning-rate", 0, &x, 0.1, -10, 10, "lr"),
        CLI_END,
    };
    char **pos;
    int npos;
    static const struct {
        const char *flag, *val;
        double want; // NAN: refused
    } cases[] = {
        {"--batch-size", "010", 10},   {"--batch-size", "09", 9},      {"--batch-size", "0x10", NAN},
        {"--batch-size", "0X1f", NAN}, {"--batch-size", "-007", -7},   {"--batch-size", "+5", 5},
        {"--batch-size", " 5", NAN},   {"--batch-size", "5 ", NAN},    {"--batch-size", "1e3", NAN},
        {"--batch-size", "", NAN},     {"--batch-size", "-", NAN},     {"--iters", "0100", 100},
        {"--iters", "0x100", NAN},     {"--learning-rate", "0.5", 0.5}, {"--learning-rate", ".5", 0.5},
        {"--learning-rate", "5.", 5},  {"--learning-rate", "1e-3", 1e-3}, {"--learning-rate", "010", 10},
        {"--learning-rate", "0x1p-3", NAN}, {"--learning-rate", "inf", NAN}, {"--learning-rate", "nan", NAN},
        {"--learning-rate", "1e", NAN}, {"--learning-rate", ".", NAN},  {"--learning-rate", " 1", NAN},
    };
    for (size_t i = 0; i < BP_ARRAY_LEN(cases); i++) {
        char *argv[] = {"p", (char *)cases[i].flag, (char *)cases[i].val, NULL};
        int rc = cli_parse("p", "", opts, 3, argv, &pos, &npos);
        if (isnan(cases[i].want)) {
            ASSERT_MSG(rc == BP_EUSAGE, "%s '%s' was accepted", cases[i].flag, cases[i].val);
            ASSERT_STR_CONTAINS(bp_errmsg(BP_EUSAGE), "expected a decimal");
            continue;
        }
        ASSERT_MSG(rc == 0, "%s '%s': %s", cases[i].flag, cases[i].val, bp_errmsg(rc));
        free(pos);
        double got = cases[i].flag[2] == 'b' ? n : cases[i].flag[2] == 'i' ? (double)m : x;
        ASSERT_MSG(got == cases[i].want, "%s '%s' read as %g, expected %g", cases[i].flag, cases[i].val, got,
                   cases[i].want);
    }
    char *end;
    ASSERT_NEAR(cli_strtod("0x10", &end), 0, 0);
    ASSERT_TRUE(*end == 'x');
    ASSERT_NEAR(cli_strtod("2.5e1,3", &end), 25, 0);
    ASSERT_TRUE(*end == ',');
}

// cli_parse_given tells a flag given at its default value from one not given; groups are
// headings in --help, not flags.
TEST(cli_given_and_groups) {
    int batch, flag;
    double lr;
    const cli_opt opts[] = {
        CLI_INT("batch-size", 'b', &batch, 128, 1, 1 << 20, "batch"),
        CLI_GROUP("more flags"),
        CLI_DBL("learning-rate", 0, &lr, 0.1, 0, 10, "lr"),
        CLI_FLAG("verbose", 'v', &flag, "verbose"),
        CLI_INT("cache", 0, &batch, 0, 1, 100, "cache (not given: 0)"),
        CLI_END,
    };
    char **pos;
    int npos;
    cli_given g;
    char *argv[] = {"p", "-b", "128", "--no-verbose", "x", NULL};
    ASSERT_OK(cli_parse_given("p", "", opts, 5, argv, &pos, &npos, &g));
    free(pos);
    ASSERT_TRUE(cli_was_given(&g, opts, "batch-size") && cli_was_given(&g, opts, "verbose"));
    ASSERT_TRUE(!cli_was_given(&g, opts, "learning-rate") && !cli_was_given(&g, opts, "cache"));
    char *bad[] = {"p", "--=x", NULL}; // a group's empty name is no flag
    ASSERT_EQ(cli_parse_given("p", "", opts, 2, bad, &pos, &npos, &g), BP_EUSAGE);
    char text[2048];
    ASSERT_TRUE(usage_text(opts, text, sizeof text));
    ASSERT_STR_CONTAINS(text, "-h, --help                     show this help\n\nmore flags:\n");
    ASSERT_STR_CONTAINS(text, "cache (not given: 0)\n"); // no "(default 0)": 0 is outside [1, 100]
    ASSERT_STR_CONTAINS(text, "batch (default 128)");
}

// Another tool's spelling: an alias sets its target (reported given under the target's name,
// messages name the flag as typed, --help lists it); a hint refuses the flag with what to use
// instead and is not listed; an unknown flag names the nearest known one.
// The DLRM reference's -1 for "unset" (--test-freq -1, --test-mini-batch-size -1, its defaults,
// which scripts pass): under such an alias a negative value is the target's default, as not giving
// it; under the flag's own name, or another negative value form, it stays out of range.
TEST(cli_alias_negative_is_unset) {
    int every, batch;
    const cli_opt opts[] = {
        CLI_INT("eval-every", 0, &every, 0, 0, 1000, "every"),
        CLI_ALIAS_NEG_UNSET("test-freq", "eval-every", "other name"),
        CLI_INT("eval-batch-size", 0, &batch, 4096, 1, 1 << 20, "batch"),
        CLI_ALIAS_NEG_UNSET("test-mini-batch-size", "eval-batch-size", "other name"),
        CLI_END,
    };
    char **pos;
    int npos;
    cli_given g;
    char *argv[] = {"p", "--test-freq", "20", "--test-freq=-1", "--eval-batch-size", "8",
                    "--test-mini-batch-size", "-1", "D", NULL};
    ASSERT_OK(cli_parse_given("p", "", opts, 9, argv, &pos, &npos, &g));
    ASSERT_TRUE(npos == 1 && strcmp(pos[0], "D") == 0);
    free(pos);
    ASSERT_EQ(every, 0);
    ASSERT_EQ(batch, 4096);
    ASSERT_TRUE(!cli_was_given(&g, opts, "eval-every") && !cli_was_given(&g, opts, "eval-batch-size"));
    ASSERT_STR_EQ(g.overridden, // two names, two values: the slip's warning, as for any alias
                  "--eval-batch-size 8 and --test-mini-batch-size -1 name one option (--eval-batch-size): the "
                  "last, -1 (the default, 4096), is used");
    // The note names the value used: the last giving's, after three (it named the second's).
    char *three[] = {"p", "--eval-every", "5", "--test-freq", "7", "--eval-every", "10", NULL};
    ASSERT_OK(cli_parse_given("p", "", opts, 7, three, &pos, &npos, &g));
    free(pos);
    ASSERT_EQ(every, 10);
    ASSERT_STR_EQ(g.overridden,
                  "--test-freq 7 and --eval-every 10 name one option (--eval-every): the last, 10, is used");
    char *later[] = {"p", "--test-freq", "-1", "--test-freq", "30", NULL};
    ASSERT_OK(cli_parse_given("p", "", opts, 5, later, &pos, &npos, &g));
    free(pos);
    ASSERT_TRUE(every == 30 && cli_was_given(&g, opts, "eval-every"));
    char *own[] = {"p", "--eval-every", "-1", NULL};
    ASSERT_EQ(cli_parse("p", "", opts, 3, own, &pos, &npos), BP_EUSAGE);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EUSAGE), "--eval-every");
    char *odd[] = {"p", "--test-freq", "-x", NULL};
    ASSERT_EQ(cli_parse("p", "", opts, 3, odd, &pos, &npos), BP_EUSAGE);
    ASSERT_STR_CONTAINS(bp_errmsg(BP_EUSAGE), "--test-freq");
    FILE *f = tmpfile();
    cli_usage("p", "", opts, f);
    rewind(f);
    char text[2048] = "";
    text[fread(text, 1, sizeof text - 1, f)] = 0;
    fclose(f);
    ASSERT_STR_CONTAINS(text, "same as --eval-every (other name; -1: its default)");
}

TEST(cli_aliases_hints_and_suggestions) {
    int batch, flag;
    double lr;
    const cli_opt opts[] = {
        CLI_INT("batch-size", 'b', &batch, 128, 1, 1 << 20, "batch"),
        CLI_ALIAS("mini-batch-size", "batch-size", "other name"),
        CLI_DBL("learning-rate", 0, &lr, 0.1, 0, 10, "lr"),
        CLI_FLAG("verbose", 'v', &flag, "verbose"),
        CLI_ALIAS("chatty", "verbose", "other name"),
        CLI_HINT("num-batches", "use --iters"),
        CLI_INT("a-flag-with-a-very-long-name", 0, &batch, 1, 0, 9, "long"),
        CLI_FLAG("no-verify", 0, &flag, "skip checks"),
        CLI_END,
    };
    char **pos;
    int npos;
    cli_given g;
    char *argv[] = {"p", "--mini-batch-size=64", "--chatty", NULL};
    ASSERT_OK(cli_parse_given("p", "", opts, 3, argv, &pos, &npos, &g));
    free(pos);
    ASSERT_TRUE(batch == 64 && flag == 1 && cli_was_given(&g, opts, "batch-size"));
    char *neg[] = {"p", "--chatty", "--no-chatty", NULL};
    ASSERT_OK(cli_parse("p", "", opts, 3, neg, &pos, &npos));
    free(pos);
    ASSERT_EQ(flag, 0);
    // The last value counts; one option given two values under two names (likely a slip) is also
    // noted for a warning (it used to pass without a word); under one name (long or short), or
    // with the same value, nothing is noted.
    char *two[] = {"p", "--mini-batch-size=64", "-b", "32", "--verbose", "--no-chatty", NULL};
    ASSERT_OK(cli_parse_given("p", "", opts, 6, two, &pos, &npos, &g));
    free(pos);
    ASSERT_TRUE(batch == 32 && flag == 0);
    ASSERT_STR_EQ(g.overridden, "--mini-batch-size 64 and -b 32 name one option (--batch-size): the last, 32, is used");
    char *flags[] = {"p", "--verbose", "--no-chatty", NULL};
    ASSERT_OK(cli_parse_given("p", "", opts, 3, flags, &pos, &npos, &g));
    free(pos);
    ASSERT_STR_EQ(g.overridden,
                  "--verbose (on) and --no-chatty (off) name one option (--verbose): the last, (off), is used");
    char *three[] = {"p", "--mini-batch-size", "64", "--batch-size", "64", "-b", "32", NULL};
    ASSERT_OK(cli_parse_given("p", "", opts, 7, three, &pos, &npos, &g));
    free(pos);
    ASSERT_STR_EQ(g.overridden, "--mini-batch-size 64 and -b 32 name one option (--batch-size): the last, 32, is used");
    char *same[] = {"p", "-b", "64", "--batch-size", "32", "--mini-batch-size=32", "--chatty", "-v", NULL};
    ASSERT_OK(cli_parse_given("p", "", opts, 7, same, &pos, &npos, &g));
    free(pos);
    ASSERT_STR_EQ(g.overridden, "-b 64 and --mini-batch-size 32 name one option (--batch-size): the last, 32, is used");
    char *one[] = {"p", "-b", "64", "--batch-size", "32", "--chatty", "-v", NULL};
    ASSERT_OK(cli_parse_given("p", "", opts, 6, one, &pos, &npos, &g));
    free(pos);
    ASSERT_TRUE(batch == 32 && flag == 1 && g.overridden[0] == 0);
    static const struct {
        const char *arg, *msg;
    } bad[] = {
        {"--mini-batch-size=0", "--mini-batch-size: 0 is out of range [1, 1048576]"},
        {"--mini-batch-size", "--mini-batch-size needs a value"},
        {"--chatty=1", "--chatty takes no value"},
        {"--num-batches=5", "--num-batches: use --iters"},
        {"--lerning-rate", "unknown flag '--lerning-rate'; did you mean '--learning-rate'?"},
        {"--batchsize=3", "unknown flag '--batchsize'; did you mean '--batch-size'?"},
        {"--learning_rate", "did you mean '--learning-rate'?"},
        {"-batch-size", "unknown flag '-batch-size'; did you mean '--batch-size'?"},
        {"--num-batch", "unknown flag '--num-batch' (near '--num-batches', which is not taken here either: use "
                        "--iters)"},
        {"-b64", "unknown flag '-b64'; did you mean '-b 64'?"},
        {"-b=64", "unknown flag '-b=64'; did you mean '-b 64'?"},
        {"--verify", "unknown flag '--verify': it is the default ('--no-verify' turns it off)"},
        {"--chaty", "unknown flag '--chaty'; did you mean '--chatty'? (see 'p --help')"},
        {"--verbos", "unknown flag '--verbos'; did you mean '--verbose'? (see 'p --help')"},
    };
    for (size_t i = 0; i < BP_ARRAY_LEN(bad); i++) {
        char *av[] = {"p", (char *)bad[i].arg, NULL};
        ASSERT_MSG(cli_parse("p", "", opts, 2, av, &pos, &npos) == BP_EUSAGE, "%s was accepted", bad[i].arg);
        ASSERT_STR_CONTAINS(bp_errmsg(BP_EUSAGE), bad[i].msg);
    }
    char *far[] = {"p", "--qqq", NULL}; // nothing near: no suggestion
    ASSERT_EQ(cli_parse("p", "", opts, 2, far, &pos, &npos), BP_EUSAGE);
    ASSERT_TRUE(strstr(bp_errmsg(BP_EUSAGE), "did you mean") == NULL);
    char text[2048];
    ASSERT_TRUE(usage_text(opts, text, sizeof text));
    ASSERT_STR_CONTAINS(text, "      --mini-batch-size N        same as --batch-size (other name)\n");
    ASSERT_STR_CONTAINS(text, "      --chatty                   same as --verbose (other name)\n");
    ASSERT_TRUE(strstr(text, "num-batches") == NULL);
    // A name too long for the column: its help starts on the next line, aligned with the others.
    ASSERT_STR_CONTAINS(text, "      --a-flag-with-a-very-long-name N\n                                 long (default 1)\n");
}

TEST(cli_dims_and_lists) {
    int d[8];
    ASSERT_EQ(cli_parse_dims("arch-mlp-bot", "13-512-256-64-16", d, 8), 5);
    ASSERT_EQ(d[4], 16);
    ASSERT_EQ(cli_parse_dims("arch-mlp-bot", "13--5", d, 8), BP_EUSAGE);
    ASSERT_EQ(cli_parse_dims("arch-mlp-bot", "13-", d, 8), BP_EUSAGE);
    ASSERT_EQ(cli_parse_dims("arch-mlp-bot", "0-4", d, 8), BP_EUSAGE);
    uint64_t v[4];
    ASSERT_EQ(cli_parse_u64_list("tables", "1460,583,10131227", v, 4), 3);
    ASSERT_EQ(v[2], 10131227);
    ASSERT_EQ(cli_parse_u64_list("tables", "1,-2", v, 4), BP_EUSAGE);
}

TEST(rng_is_reproducible_and_uniform) {
    bp_rng a, b;
    bp_rng_seed(&a, 42, 7);
    bp_rng_seed(&b, 42, 7);
    for (int i = 0; i < 100; i++) ASSERT_EQ(bp_rng_u64(&a), bp_rng_u64(&b));
    bp_rng_seed(&b, 42, 8);
    ASSERT_TRUE(bp_rng_u64(&a) != bp_rng_u64(&b));
    int hist[10] = {0};
    for (int i = 0; i < 100000; i++) hist[bp_rng_below(&a, 10)]++;
    for (int i = 0; i < 10; i++) ASSERT_NEAR(hist[i], 10000, 500);
    double s = 0, s2 = 0;
    for (int i = 0; i < 100000; i++) {
        double x = bp_rng_normal(&a);
        s += x, s2 += x * x;
    }
    ASSERT_NEAR(s / 1e5, 0.0, 0.02);
    ASSERT_NEAR(s2 / 1e5, 1.0, 0.02);
}

#include "jsonl.h"

TEST(jsonl_escapes_and_nulls) {
    jsonl j;
    jsonl_begin(&j);
    jsonl_str(&j, "event", "a\"b\\c\n");
    jsonl_int(&j, "iter", -3);
    jsonl_num(&j, "loss", 0.25);
    jsonl_num(&j, "auc", NAN);
    jsonl_end(&j, NULL);
    j.buf[j.len] = 0;
    ASSERT_TRUE(strcmp(j.buf, "{\"event\":\"a\\\"b\\\\c\\u000a\",\"iter\":-3,\"loss\":0.25,\"auc\":null}\n") == 0);
}

// A string that is not UTF-8 (a file name in another encoding) still makes valid JSON: each byte
// that starts no well-formed sequence becomes U+FFFD; well-formed multibyte characters pass as
// they are.  Both writers (the line buffer and jsonl_fput_string) do the same.
TEST(jsonl_strings_that_are_not_utf8) {
    static const char *const in[] = {
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", // 2-, 3- and 4-byte characters: unchanged
        "a\xffz",                                      // a byte that starts nothing
        "\x80\xbf",                                    // two stray continuation bytes
        "\xc0\xaf\xe0\x80\xaf",                         // overlong forms of '/'
        "\xed\xa0\x80",                                // a surrogate (U+D800)
        "\xf4\x90\x80\x80",                            // above U+10FFFF
        "x\xe2\x82",                                   // cut short by the end of the string
    };
    static const char *const want[] = {
        "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"", "\"a\\ufffdz\"", "\"\\ufffd\\ufffd\"",
        "\"\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\"", "\"\\ufffd\\ufffd\\ufffd\"",
        "\"\\ufffd\\ufffd\\ufffd\\ufffd\"", "\"x\\ufffd\\ufffd\"",
    };
    for (size_t i = 0; i < BP_ARRAY_LEN(in); i++) {
        jsonl j;
        jsonl_begin(&j);
        jsonl_str(&j, "p", in[i]);
        jsonl_end(&j, NULL);
        j.buf[j.len] = 0;
        char line[128];
        snprintf(line, sizeof line, "{\"p\":%s}\n", want[i]);
        ASSERT_TRUE(strcmp(j.buf, line) == 0);
        char *mem = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&mem, &len);
        ASSERT_TRUE(f != NULL);
        jsonl_fput_string(f, in[i]);
        fclose(f);
        ASSERT_TRUE(strcmp(mem, want[i]) == 0);
        free(mem);
    }
}

// A metrics path that is a symbolic link to a file not yet there: the file is created and
// appended to, the link stays.  A write error at the close does not replace the caller's own
// error message when the caller already failed.
TEST(jsonl_file_through_a_link_and_close_after_an_error) {
    char target[512], link_path[512];
    snprintf(target, sizeof target, "%s", test_path("real.jsonl"));
    snprintf(link_path, sizeof link_path, "%s", test_path("m.jsonl"));
    ASSERT_EQ(symlink(target, link_path), 0);
    for (int round = 0; round < 2; round++) { // created through the link, then appended to
        jsonl_file jf;
        ASSERT_OK(jsonl_open(&jf, "--metrics", link_path));
        jsonl j;
        jsonl_begin(&j);
        jsonl_int(&j, "iter", round);
        ASSERT_OK(jsonl_end(&j, &jf));
        ASSERT_OK(jsonl_close(&jf, 0));
    }
    struct stat st;
    ASSERT_TRUE(lstat(link_path, &st) == 0 && S_ISLNK(st.st_mode));
    char text[64] = "";
    FILE *f = fopen(target, "r");
    ASSERT_TRUE(f != NULL);
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[got] = 0;
    ASSERT_TRUE(strcmp(text, "{\"iter\":0}\n{\"iter\":1}\n") == 0);
    if (access("/dev/full", W_OK) != 0) {
        printf("      SKIP the close-after-an-error half: no writable /dev/full\n");
        return;
    }
    jsonl_file jf;
    ASSERT_OK(jsonl_open(&jf, "--metrics", "/dev/full"));
    fputs("{}\n", jf.f); // buffered, not flushed: the close's flush is the first write to fail
    int rc = bp_fail(BP_EFORMAT, "the caller's own error");
    ASSERT_EQ(jsonl_close(&jf, rc), BP_EFORMAT);
    ASSERT_TRUE(strcmp(bp_errmsg(rc), "the caller's own error") == 0);
}

TEST(error_message_may_quote_the_previous_one) {
    bp_fail(BP_EIO, "first: %d", 1);
    bp_fail(BP_EIO, "%s, then second", bp_errmsg(BP_EIO));
    ASSERT_TRUE(strcmp(bp_errmsg(BP_EIO), "first: 1, then second") == 0);
}

// train --help says where --print-every's lines go: the metrics file (it said "write a train metrics
// line", and a run without -m into a log file wrote none, while a DLRM user expects printed lines);
// and that --optimizer is the dense part's only, unlike the DLRM reference's.
TEST(cli_train_help_print_every_names_the_metrics_file) {
    char *out = NULL;
    ASSERT_EQ(test_run(&out, 10, "%s train --help", test_bin()), 0);
    const char *p = strstr(out, "--print-every N");
    ASSERT_MSG(p, "no --print-every in:\n%s", out);
    const char *eol = strchr(p, '\n');
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(eol ? eol - p : (long)strlen(p)), p);
    ASSERT_MSG(strstr(line, "-m metrics file") && strstr(line, "nothing is printed into a log"), "--print-every help: %s",
               line);
    // --optimizer is the dense one: the DLRM reference's sets the embeddings' too.
    p = strstr(out, "--optimizer C");
    ASSERT_MSG(p && (eol = strchr(p, '\n')), "no --optimizer in:\n%s", out);
    snprintf(line, sizeof line, "%.*s", (int)(eol - p), p);
    ASSERT_MSG(strstr(line, "dense optimizer only") && strstr(line, "--emb-optimizer adagrad"), "--optimizer help: %s",
               line);
    free(out);
}

// train --help says which modes run embedding servers: bagpipe and async do too (it used to list
// only sync and static, while README runs --mode bagpipe --servers 2).
TEST(cli_train_help_servers_names_every_server_mode) {
    char *out = NULL;
    ASSERT_EQ(test_run(&out, 10, "%s train --help", test_bin()), 0);
    const char *p = strstr(out, "--servers N");
    ASSERT_MSG(p, "no --servers in:\n%s", out);
    const char *eol = strchr(p, '\n');
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(eol ? eol - p : (long)strlen(p)), p);
    ASSERT_MSG(strstr(line, "sync, static, bagpipe, async"), "--servers help: %s", line);
    free(out);
}

// train's report of a tiny run: one iteration and one sample are singular, a run of a few ms is
// not "0.0 s" (nor is the checkpoint line's share of it, nor eval's time), an evaluation set of one class has no AUC (not "nan"), and one server or trainer
// is "rank 1 server 0" (not "ranks 1-1 servers 0-0").
TEST(cli_train_report_plurals_and_rounding) {
    const char *d = test_path("d.bin");
    ASSERT_EQ(test_run(NULL, 60, "%s synth --preset custom --tables 40,300 --dense 4 -n 400 -o %s", test_bin(), d), 0);
    char *out = NULL;
    const char *arch = "--arch-mlp-bot 4-8-4 --arch-mlp-top 8-1 --arch-sparse-feature-size 4";
    ASSERT_EQ(test_run(&out, 60, "%s train %s %s -b 1 -n 1 --eval-split test --eval-rows 1 -o %s", test_bin(), d,
                       arch, test_path("m")), 0);
    ASSERT_STR_CONTAINS(out, " 1 iteration of 1 (");
    ASSERT_STR_CONTAINS(out, "trained 1 iteration (1 sample) in ");
    ASSERT_STR_CONTAINS(out, " ms: ");
    ASSERT_TRUE(strstr(out, " in 0.0 s") == NULL && strstr(out, "e-0") == NULL);
    ASSERT_STR_CONTAINS(out, "AUC n/a (one class)");
    ASSERT_STR_CONTAINS(out, "(1 sample, ");
    free(out);
    out = NULL;
    ASSERT_EQ(test_run(&out, 60, "%s train %s %s -b 4 -n 3 --no-eval --checkpoint-every 2 --checkpoint-dir %s",
                       test_bin(), d, arch, test_path("ck")), 0);
    ASSERT_STR_CONTAINS(out, "checkpoints: 1 written to ");
    ASSERT_TRUE(strstr(out, " of 0.0 s)") == NULL);
    free(out);
    out = NULL;
    ASSERT_EQ(test_run(&out, 60, "%s eval --load %s --rows 20 %s", test_bin(), test_path("m"), d), 0);
    ASSERT_STR_CONTAINS(out, "evaluated in ");
    ASSERT_TRUE(strstr(out, " in 0.00 s") == NULL);
    free(out);
    out = NULL;
    ASSERT_EQ(test_run(&out, 120, "%s train %s %s --mode sync --trainers 1 --servers 1 -b 4 -n 3 --no-eval", test_bin(),
                       d, arch), 0);
    ASSERT_STR_CONTAINS(out, "rank 0 oracle (coordinator), rank 1 server 0, rank 2 trainer 0\n");
    ASSERT_STR_CONTAINS(out, "trained 3 iterations (12 samples) in ");
    free(out);
}

// synth's summary of a small run: "1 row", and a rate in rows where millions would read 0.00M.
TEST(cli_synth_report_small_run) {
    char *out = NULL;
    ASSERT_EQ(test_run(&out, 60, "%s synth --preset custom --tables 40,300 --dense 4 -n 1 -o %s", test_bin(),
                       test_path("one.bin")), 0);
    ASSERT_STR_CONTAINS(out, "synth: 1 row (train ");
    ASSERT_TRUE(strstr(out, "0.00M rows/s") == NULL);
    free(out);
}

// Durations and rates in reports: a short run is not "0.00 s" nor "0.0M samples/s".
TEST(cli_report_formats_short_times_and_small_rates) {
    char b[32];
    ASSERT_STR_EQ(bp_fmt_seconds(b, sizeof b, 0.0362), "36.2 ms");
    ASSERT_STR_EQ(bp_fmt_seconds(b, sizeof b, 2.414), "2.41 s");
    ASSERT_STR_EQ(bp_fmt_seconds(b, sizeof b, 58.04), "58.0 s");
    ASSERT_STR_EQ(bp_fmt_seconds(b, sizeof b, 0.9996), "1.00 s"); // not "1e+03 ms"
    ASSERT_STR_EQ(bp_fmt_seconds(b, sizeof b, 0.9994), "999 ms");
    ASSERT_STR_EQ(bp_fmt_seconds(b, sizeof b, 9.996), "10.0 s"); // not "10.00 s"
    ASSERT_STR_EQ(bp_fmt_rate(b, sizeof b, 1534.4), "1534");
    ASSERT_STR_EQ(bp_fmt_rate(b, sizeof b, 99999), "99999");
    ASSERT_STR_EQ(bp_fmt_rate(b, sizeof b, 2.4149e6), "2.41M");
    char *out = NULL;
    ASSERT_EQ(test_run(&out, 60, "%s synth --preset custom --tables 40,300 --dense 4 -n 200 -o %s", test_bin(),
                       test_path("small.bin")), 0);
    free(out);
    out = NULL;
    ASSERT_EQ(test_run(&out, 60, "%s analyze %s", test_bin(), test_path("small.bin")), 0);
    ASSERT_TRUE(strstr(out, "0.0M samples/s") == NULL);
    ASSERT_STR_CONTAINS(out, " samples/s); per-row state");
    free(out);
}

// A misspelt command names the nearest one; a flag where the command belongs (the DLRM
// reference's script takes flags alone) says that the flags follow a command.
TEST(cli_unknown_command_suggests) {
    char *out = NULL;
    ASSERT_EQ(test_run(&out, 10, "%s trian x.bin", test_bin()), 2);
    ASSERT_STR_CONTAINS(out, "unknown command 'trian'; did you mean 'train'?");
    free(out);
    out = NULL;
    ASSERT_EQ(test_run(&out, 10, "%s --arch-mlp-bot 13-64-16 x.bin", test_bin()), 2);
    ASSERT_STR_CONTAINS(out, "'--arch-mlp-bot' before a command: the flags follow it ('bagpipe train [options] DATA')");
    free(out);
    out = NULL;
    ASSERT_EQ(test_run(&out, 10, "%s frobnicate", test_bin()), 2);
    ASSERT_TRUE(strstr(out, "did you mean") == NULL);
    free(out);
}

// `bagpipe help COMMAND` is that command's --help (it used to print the list of commands); an
// unknown one is a usage error with the list.
// Standard output is compared (the help is there); each command's standard error goes to a file
// shown on a mismatch, with the first differing line: a sanitizer's note there is not the help
// (LeakSanitizer's "Suppressions used" table at exit, now and then, failed it once on CI).
TEST(cli_help_command_is_its_help) {
    char *out = NULL, *want = NULL;
    const char *err_help = test_path("help.err"), *err_flag = test_path("flag.err");
    const int rc_help = test_run(&out, 30, "%s help train 2>%s", test_bin(), err_help);
    const int rc_flag = test_run(&want, 30, "%s train --help 2>%s", test_bin(), err_flag);
    if (rc_help != 0 || rc_flag != 0 || strcmp(out, want) != 0) {
        size_t i = 0, from = 0, line = 1; // the first differing line starts at from
        for (; out[i] && out[i] == want[i]; i++)
            if (out[i] == '\n') from = i + 1, line++;
        char *e1 = dist_test_slurp(err_help, NULL), *e2 = dist_test_slurp(err_flag, NULL);
        test_fail(__FILE__, __LINE__,
                  "'help train' (exit %d) and 'train --help' (exit %d) differ at line %zu:\n  %.160s\nvs\n  %.160s\n"
                  "stderr of 'help train': %s\nstderr of 'train --help': %s",
                  rc_help, rc_flag, line, out + from, want + from, e1 ? e1 : "(none)", e2 ? e2 : "(none)");
        free(e1), free(e2), free(out), free(want);
        return;
    }
    ASSERT_STR_CONTAINS(out, "--cache-rows");
    free(out), free(want), out = NULL;
    // Under the user's own launcher every rank gets --help, and only rank 0 prints it (each did).
    ASSERT_EQ(test_run(&out, 10, "OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=2 %s train --help", test_bin()), 0);
    ASSERT_STR_EQ(out, "");
    free(out), out = NULL;
    ASSERT_EQ(test_run(&out, 10, "PMI_SIZE=4 PMI_RANK=0 %s train --help", test_bin()), 0);
    ASSERT_STR_CONTAINS(out, "--cache-rows");
    free(out), out = NULL;
    ASSERT_EQ(test_run(&out, 10, "OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=3 %s --help", test_bin()), 0);
    ASSERT_STR_EQ(out, "");
    free(out), out = NULL;
    ASSERT_EQ(test_run(&out, 10, "%s help trian", test_bin()), 2);
    ASSERT_STR_CONTAINS(out, "help: unknown command 'trian'; did you mean 'train'?");
    ASSERT_STR_CONTAINS(out, "commands:");
    free(out);
}

// --eval-every's evaluations are printed, in every mode (they went only to the -m metrics file:
// without one they were computed and shown nowhere, where the DLRM reference's --test-freq prints).
TEST(cli_train_eval_every_prints) {
    const char *d = test_path("d.bin");
    ASSERT_EQ(test_run(NULL, 60, "%s synth --preset custom --tables 40,300 --dense 4 -n 400 -o %s", test_bin(), d), 0);
    const char *arch = "--arch-mlp-bot 4-8-4 --arch-mlp-top 8-1 --arch-sparse-feature-size 4 -b 8 -n 30";
    static const char *const modes[] = {"--mode local", "--mode sync --trainers 2"};
    for (size_t m = 0; m < BP_ARRAY_LEN(modes); m++) {
        char *out = NULL;
        ASSERT_EQ(test_run(&out, 120, "%s train %s %s %s --eval-every 10", test_bin(), d, arch, modes[m]), 0);
        ASSERT_STR_CONTAINS(out, "iteration 10: val AUC ");
        ASSERT_STR_CONTAINS(out, "iteration 20: val AUC ");
        ASSERT_TRUE(strstr(out, "iteration 30:") == NULL); // the last is the final evaluation's line
        ASSERT_STR_CONTAINS(out, "\nval   AUC ");
        free(out);
    }
}
