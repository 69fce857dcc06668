// cli: one table per subcommand drives flag parsing, validation, defaults and --help.
//
//   static const cli_opt opts[] = {
//       CLI_INT("batch-size", 'b', &cfg.batch, 128, 1, 1 << 24, "global batch size (samples)"),
//       CLI_STR("out", 'o', &cfg.out, NULL, "output file"),
//       CLI_END,
//   };
//   int rc = cli_parse("bagpipe prep", "[options] INPUT...", opts, argc, argv, &pos, &npos);
//
// Flags accept "--name value" and "--name=value"; numbers are decimal ("010" is ten, "0x10" an
// error).  CLI_FLAG takes no value ("--no-name" clears it).  Errors name the flag as typed and
// the expected form, and return BP_EUSAGE; an unknown flag names the nearest known one ("did you
// mean '--learning-rate'?").  argv is not modified.
#ifndef BP_CLI_H
#define BP_CLI_H

#include <stdint.h>
#include <stdio.h>

typedef enum {
    CLI_T_END, CLI_T_INT, CLI_T_I64, CLI_T_DBL, CLI_T_STR, CLI_T_FLAG, CLI_T_CHOICE, CLI_T_GROUP, CLI_T_ALIAS, CLI_T_HINT
} cli_type;

typedef struct {
    const char *name;     // long name without "--"
    char short_name;      // 0 for none
    cli_type type;
    void *ptr;            // int*, int64_t*, double*, const char**, int* (flag), int* (choice index)
    int64_t def_i, min_i, max_i;
    double def_d, min_d, max_d;
    const char *def_s;    // CLI_T_ALIAS: the long name of the flag it stands for
    const char *choices;  // CLI_T_CHOICE: "a|b|c"; the value stored is the index
    const char *help;
} cli_opt;

// An integer default outside [lo, hi] stands for "not given" (--help shows no default).
#define CLI_INT(n, s, p, def, lo, hi, h) \
    {n, s, CLI_T_INT, p, def, lo, hi, 0, 0, 0, NULL, NULL, h}
#define CLI_I64(n, s, p, def, lo, hi, h) \
    {n, s, CLI_T_I64, p, def, lo, hi, 0, 0, 0, NULL, NULL, h}
#define CLI_DBL(n, s, p, def, lo, hi, h) \
    {n, s, CLI_T_DBL, p, 0, 0, 0, def, lo, hi, NULL, NULL, h}
#define CLI_STR(n, s, p, def, h) {n, s, CLI_T_STR, p, 0, 0, 0, 0, 0, 0, def, NULL, h}
#define CLI_FLAG(n, s, p, h) {n, s, CLI_T_FLAG, p, 0, 0, 1, 0, 0, 0, NULL, NULL, h}
#define CLI_CHOICE(n, s, p, def, choices, h) \
    {n, s, CLI_T_CHOICE, p, def, 0, 0, 0, 0, 0, NULL, choices, h}
// Not a flag: --help prints the title as a heading above the flags that follow it.
#define CLI_GROUP(title) {"", 0, CLI_T_GROUP, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, title}
// Another name of flag `target` (an earlier entry), listed by --help as "same as --target (h)":
// "--nepochs 3" is "--epochs 3", and cli_was_given reports it under the target's name.
#define CLI_ALIAS(n, target, h) {n, 0, CLI_T_ALIAS, NULL, 0, 0, 0, 0, 0, 0, target, NULL, h}
// The same for an integer flag, where a negative value given under this name stands for the
// target's default, as not giving it (the DLRM reference's -1 for "unset": --test-freq -1).
#define CLI_ALIAS_NEG_UNSET(n, target, h) {n, 0, CLI_T_ALIAS, NULL, 0, 1, 0, 0, 0, 0, target, NULL, h}
// A name the command does not take but a user may type (another tool's flag): not in --help;
// given, it is refused with "--n: h", which says what to use instead.
#define CLI_HINT(n, h) {n, 0, CLI_T_HINT, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, h}
#define CLI_END {NULL, 0, CLI_T_END, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, NULL}

// Which flags of a table the command line gave (a default and the same value given differ
// here): filled by cli_parse_given, read by cli_was_given.
#define CLI_MAX_OPTS 128
_Static_assert(CLI_MAX_OPTS < 256, "cli_given stores 1 + an index in a byte");
typedef struct {
    unsigned char given[CLI_MAX_OPTS]; // by index in the table: 0, or 1 + the index of the name typed
    // The first option given two values under two names ("--batch-size 24 and --mini-batch-size
    // 16 name one option (--batch-size): the last, 16, is used"), for the caller's warning; "": none.
    char overridden[192];
} cli_given;

// Sets every option to its default, then parses argv[1..argc-1].  An empty text value or
// positional argument is an error (they all name files, lists or names).  Positional arguments are
// returned in *pos (a malloc'd array of pointers into argv; free it) and *npos.  "-h"/"--help"
// prints the usage to stdout and returns 1.  Returns 0 on success, BP_EUSAGE on a bad flag
// (the message is in bp_errmsg).
int cli_parse(const char *prog, const char *synopsis, const cli_opt *opts, int argc, char **argv,
              char ***pos, int *npos);
// cli_parse that also records in *g which flags were given ("--no-x" counts for x).  cli_parse
// itself warns when one option is given two values under two names (the last counts); this
// leaves the warning to the caller (g->overridden), e.g. once per distributed job.
int cli_parse_given(const char *prog, const char *synopsis, const cli_opt *opts, int argc, char **argv,
                    char ***pos, int *npos, cli_given *g);
// The warning that cli_parse_given left to its caller (g->overridden), if any.
void cli_warn_overridden(const cli_given *g);
// 1 when flag `name` (a long name in opts; a bug if absent) was given.
int cli_was_given(const cli_given *g, const cli_opt *opts, const char *name);
// The name flag `name` was last given under (an alias's own name, for messages), else `name`.
const char *cli_given_name(const cli_given *g, const cli_opt *opts, const char *name);
void cli_usage(const char *prog, const char *synopsis, const cli_opt *opts, FILE *out);

// Edit distance between two names (letters inserted, deleted, replaced or swapped with a neighbour;
// INT32_MAX when either is 64 characters or longer): for "did you mean" suggestions.
int cli_edit_distance(const char *a, const char *b);

// strtod for flag values, decimal notation only ([+-]digits[.digits][e[+-]digits]): no hex, inf,
// nan or leading blanks.  *end is set past the number, or to s when there is none.
double cli_strtod(const char *s, char **end);

// Parses "13-512-256-64-16" into dims (at most cap).  Returns the count, or BP_EUSAGE with a
// message naming flag.
int cli_parse_dims(const char *flag, const char *s, int *dims, int cap);
// Parses a comma-separated list of non-negative integers ("1460,583,..."), same conventions.
int cli_parse_u64_list(const char *flag, const char *s, uint64_t *vals, int cap);

#endif
