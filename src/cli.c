#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "launch.h"

static void set_default(const cli_opt *o) {
    switch (o->type) {
    case CLI_T_INT: *(int *)o->ptr = (int)o->def_i; break;
    case CLI_T_I64: *(int64_t *)o->ptr = o->def_i; break;
    case CLI_T_DBL: *(double *)o->ptr = o->def_d; break;
    case CLI_T_STR: *(const char **)o->ptr = o->def_s; break;
    case CLI_T_FLAG: *(int *)o->ptr = 0; break;
    case CLI_T_CHOICE: *(int *)o->ptr = (int)o->def_i; break;
    case CLI_T_GROUP:
    case CLI_T_ALIAS:
    case CLI_T_HINT:
    case CLI_T_END: break;
    }
}

static void set_defaults(const cli_opt *opts) {
    for (const cli_opt *o = opts; o->type != CLI_T_END; o++) set_default(o);
}

// "-1", "-20": a minus sign and decimal digits.
static int negative_integer(const char *v) {
    if (v[0] != '-' || !v[1]) return 0;
    for (const char *p = v + 1; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

// Index of `val` among "a|b|c", or -1.
static int choice_index(const char *choices, const char *val) {
    int idx = 0;
    size_t vlen = strlen(val);
    for (const char *p = choices; *p; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == vlen && strncmp(p, val, len) == 0) return idx;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

static void choice_name(const char *choices, int idx, char *buf, size_t cap) {
    const char *p = choices;
    for (int i = 0; i < idx && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (!p) {
        snprintf(buf, cap, "?");
        return;
    }
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    snprintf(buf, cap, "%.*s", (int)len, p);
}

// Length of the decimal integer [+-]digits at the start of s (0 if none).
static size_t dec_int_len(const char *s) {
    size_t i = (s[0] == '-' || s[0] == '+'), d = i;
    while (s[i] >= '0' && s[i] <= '9') i++;
    return i > d ? i : 0;
}

double cli_strtod(const char *s, char **end) {
    // The longest prefix of the form [+-]digits[.digits][(e|E)[+-]digits], at least one digit in
    // the mantissa; strtod alone would also read hex ("0x10" is 16), inf, nan and leading blanks.
    size_t i = (s[0] == '-' || s[0] == '+'), nd = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++) nd++;
    if (s[i] == '.')
        for (i++; s[i] >= '0' && s[i] <= '9'; i++) nd++;
    if (nd == 0) {
        *end = (char *)s;
        return 0;
    }
    if (s[i] == 'e' || s[i] == 'E') {
        size_t ne = dec_int_len(s + i + 1);
        if (ne) i += 1 + ne;
    }
    char small[64], *buf = i < sizeof small ? small : bp_xmalloc(i + 1);
    memcpy(buf, s, i);
    buf[i] = 0;
    char *e;
    double v = strtod(buf, &e); // sets errno on overflow, as strtod does
    BP_ASSERT((size_t)(e - buf) == i);
    if (buf != small) free(buf);
    *end = (char *)s + i;
    return v;
}

// `name`: the flag as typed (an alias's own name), for the messages.
static int set_value(const cli_opt *o, const char *name, const char *val) {
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case CLI_T_INT:
    case CLI_T_I64: {
        // Decimal only: base 0 would read "010" as 8 and "0x10" as 16, and refuse "09".
        size_t len = dec_int_len(val);
        long long v = len ? strtoll(val, &end, 10) : 0;
        if (!len || errno || end != val + len || *end)
            return bp_fail(BP_EUSAGE, "--%s: expected a decimal integer, got '%s'", name, val);
        // A bound of 2^60 or so only guards arithmetic: "[0, 4611686018427387903]" says nothing.
        if (v < o->min_i && o->max_i >= INT64_MAX / 8)
            return bp_fail(BP_EUSAGE, "--%s: %lld is out of range (at least %lld)", name, v, (long long)o->min_i);
        if (v < o->min_i || v > o->max_i)
            return bp_fail(BP_EUSAGE, "--%s: %lld is out of range [%lld, %lld]", name, v,
                           (long long)o->min_i, (long long)o->max_i);
        if (o->type == CLI_T_INT) *(int *)o->ptr = (int)v;
        else *(int64_t *)o->ptr = v;
        return 0;
    }
    case CLI_T_DBL: {
        double v = cli_strtod(val, &end);
        if (errno || end == val || *end || !isfinite(v))
            return bp_fail(BP_EUSAGE, "--%s: expected a decimal number, got '%s'", name, val);
        if (v < o->min_d || v > o->max_d)
            // As given, and bounds to 15 digits: %g printed 1000000.5 as 1e+06, inside [0, 1e+06].
            return bp_fail(BP_EUSAGE, "--%s: %s is out of range [%.15g, %.15g]", name, val, o->min_d, o->max_d);
        *(double *)o->ptr = v;
        return 0;
    }
    case CLI_T_STR:
        // Every text flag is a path, a list or a name: empty is a slip (--save "" used to train,
        // then fail to save to ''), refused before anything runs.
        if (!*val) return bp_fail(BP_EUSAGE, "--%s: expected a value, got ''", name);
        *(const char **)o->ptr = val;
        return 0;
    case CLI_T_CHOICE: {
        int idx = choice_index(o->choices, val);
        if (idx < 0) return bp_fail(BP_EUSAGE, "--%s: expected one of %s, got '%s'", name, o->choices, val);
        *(int *)o->ptr = idx;
        return 0;
    }
    default: BP_ASSERT(0);
    }
    return 0;
}

static const cli_opt *find_long(const cli_opt *opts, const char *name, size_t len) {
    for (const cli_opt *o = opts; o->type != CLI_T_END; o++)
        if (o->type != CLI_T_GROUP && strlen(o->name) == len && strncmp(o->name, name, len) == 0) return o;
    return NULL;
}

// The flag an alias stands for (o itself when it is none).
static const cli_opt *resolve(const cli_opt *opts, const cli_opt *o) {
    if (o->type != CLI_T_ALIAS) return o;
    const cli_opt *t = find_long(opts, o->def_s, strlen(o->def_s));
    BP_ASSERTF(t && t->type != CLI_T_ALIAS && t->type != CLI_T_HINT, "--%s: alias of no flag '--%s'", o->name,
               o->def_s);
    return t;
}

// Edit distance (insertions, deletions, substitutions, swaps of neighbours) between a[0..la) and
// b[0..lb), both at most 63 characters.
static int edit_distance(const char *a, size_t la, const char *b, size_t lb) {
    BP_ASSERT(la < 64 && lb < 64);
    int d[64][64];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            v = BP_MIN(v, d[i - 1][j] + 1);
            v = BP_MIN(v, d[i][j - 1] + 1);
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) v = BP_MIN(v, d[i - 2][j - 2] + 1);
            d[i][j] = v;
        }
    return d[la][lb];
}

int cli_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    return la < 64 && lb < 64 ? edit_distance(a, la, b, lb) : INT32_MAX;
}

// The option whose long name is nearest to name[0..len) (a typo: at most a third of its letters
// off), or NULL.
static const cli_opt *nearest_long(const cli_opt *opts, const char *name, size_t len) {
    const cli_opt *best = NULL;
    int best_d = INT32_MAX;
    if (len == 0 || len > 63) return NULL;
    for (const cli_opt *o = opts; o->type != CLI_T_END; o++) {
        size_t ol = o->type == CLI_T_GROUP ? 0 : strlen(o->name);
        if (ol == 0 || ol > 63) continue;
        int d = edit_distance(name, len, o->name, ol);
        if (d < best_d && (size_t)d * 3 <= BP_MAX(len, ol)) best = o, best_d = d;
    }
    return best;
}

// The message for an unknown flag: the nearest known one, if any, then where to look.
static int unknown_flag(const cli_opt *opts, const char *prog, const char *typed, const char *name, size_t len) {
    for (const cli_opt *o = opts; o->type != CLI_T_END; o++) // "--verify" beside a flag "--no-verify"
        if (o->type == CLI_T_FLAG && strncmp(o->name, "no-", 3) == 0 && strlen(o->name + 3) == len &&
            strncmp(o->name + 3, name, len) == 0)
            return bp_fail(BP_EUSAGE, "unknown flag '%.*s': it is the default ('--%s' turns it off)",
                           (int)(name - typed + len), typed, o->name);
    const cli_opt *near = nearest_long(opts, name, len);
    if (near && near->type == CLI_T_HINT) // another tool's flag, which this command refuses: its hint
        return bp_fail(BP_EUSAGE, "unknown flag '%.*s' (near '--%s', which is not taken here either: %s)",
                       (int)(name - typed + len), typed, near->name, near->help);
    if (near) { // every flag as near as the nearest, in the table's order ("--modle": --mode or --model)
        const int d = edit_distance(name, len, near->name, strlen(near->name));
        char alt[256] = "";
        size_t at = 0;
        int n = 0;
        for (const cli_opt *o = opts; o->type != CLI_T_END && at < sizeof alt; o++) {
            const size_t ol = o->type == CLI_T_GROUP ? 0 : strlen(o->name);
            if (ol == 0 || ol > 63 || o->type == CLI_T_HINT || edit_distance(name, len, o->name, ol) != d ||
                (size_t)d * 3 > BP_MAX(len, ol)) // (nearest_long's bound: a third of the letters)
                continue;
            at += (size_t)snprintf(alt + at, sizeof alt - at, "%s'--%s'", n++ ? " or " : "", o->name);
        }
        return bp_fail(BP_EUSAGE, "unknown flag '%.*s'; did you mean %s? (see '%s --help')",
                       (int)(name - typed + len), typed, alt, prog);
    }
    return bp_fail(BP_EUSAGE, "unknown flag '%.*s' (see '%s --help')", (int)(name - typed + len), typed, prog);
}

int cli_was_given(const cli_given *g, const cli_opt *opts, const char *name) {
    const cli_opt *o = find_long(opts, name, strlen(name));
    BP_ASSERTF(o != NULL, "cli_was_given: no flag '--%s' in the table", name);
    return g->given[o - opts] != 0;
}

const char *cli_given_name(const cli_given *g, const cli_opt *opts, const char *name) {
    const cli_opt *o = find_long(opts, name, strlen(name));
    BP_ASSERTF(o != NULL, "cli_given_name: no flag '--%s' in the table", name);
    return g->given[o - opts] ? opts[g->given[o - opts] - 1].name : o->name;
}

int cli_parse(const char *prog, const char *synopsis, const cli_opt *opts, int argc, char **argv,
              char ***pos, int *npos) {
    return cli_parse_given(prog, synopsis, opts, argc, argv, pos, npos, NULL);
}

void cli_warn_overridden(const cli_given *g) {
    if (g->overridden[0]) bp_log(BP_LOG_WARN, "%s", g->overridden);
}

// One giving of an option on the command line: the name as typed (an alias, or the option itself
// for its long or short name), the argument as typed (up to any '=') and the value.
typedef struct {
    const cli_opt *typed; // NULL: not given yet
    const char *arg, *val;
} cli_giving;

// 1 when e is an earlier giving under another name with another value than cur.
static int giving_conflicts(const cli_giving *e, const cli_giving *cur) {
    return e->typed && e->typed != cur->typed && strcmp(e->val, cur->val) != 0;
}

int cli_parse_given(const char *prog, const char *synopsis, const cli_opt *opts, int argc, char **argv,
                    char ***pos, int *npos, cli_given *g) {
    set_defaults(opts);
    size_t n_opts = 0;
    while (opts[n_opts].type != CLI_T_END) n_opts++;
    BP_ASSERTF(n_opts <= CLI_MAX_OPTS, "%s: %zu flags, at most %d", prog, n_opts, CLI_MAX_OPTS);
    if (g) memset(g, 0, sizeof *g);
    char **out = bp_xcalloc((size_t)argc + 1, sizeof *out);
    int n = 0, only_pos = 0;
    // Each option's first and last giving.  The last value counts, as in any tool; given under
    // another name with another value than the first or the last giving
    // (--mini-batch-size 64 -b 32; --mini-batch-size 64 --batch-size 64 -b 32), likely a slip, it
    // is also noted for a warning: in g (the caller warns, once per job: cli_given.overridden) or,
    // without g, at once.
    cli_giving first[CLI_MAX_OPTS] = {{0}}, last[CLI_MAX_OPTS] = {{0}};
    size_t noted = SIZE_MAX; // the option of the note, if any
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || a[0] != '-' || a[1] == 0) {
            if (!a[0]) { // every command's arguments are files: '' is a slip (an unset shell variable)
                free(out);
                const char *sp = strrchr(prog, ' '); // "bagpipe train" -> "train"
                return bp_fail(BP_EUSAGE, "%s: an empty argument ('') where a file name was expected",
                               sp ? sp + 1 : prog);
            }
            out[n++] = argv[i];
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_pos = 1;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            int rank; // under the user's own mpirun or srun every rank gets --help: one prints it
            launch_world(&rank);
            if (rank == 0) cli_usage(prog, synopsis, opts, stdout);
            free(out);
            return 1;
        }
        const cli_opt *o = NULL;
        const cli_opt *typed = NULL; // the entry as typed: an alias, or o itself
        const char *val = NULL, *name = NULL;
        size_t len = 0;
        int negated = 0;
        if (a[1] == '-') {
            name = a + 2;
            const char *eq = strchr(name, '=');
            len = eq ? (size_t)(eq - name) : strlen(name);
            o = find_long(opts, name, len);
            if (!o && len > 3 && strncmp(name, "no-", 3) == 0) {
                o = find_long(opts, name + 3, len - 3);
                if (o && o->type != CLI_T_HINT && resolve(opts, o)->type == CLI_T_FLAG) negated = 1;
                else o = NULL;
            }
            if (!o) {
                free(out);
                return unknown_flag(opts, prog, a, name, len);
            }
            if (o->type == CLI_T_HINT) {
                free(out);
                return bp_fail(BP_EUSAGE, "--%.*s: %s", (int)len, name, o->help);
            }
            typed = o;
            o = resolve(opts, o);
            if (eq) val = eq + 1;
        } else {
            for (const cli_opt *p = opts; p->type != CLI_T_END; p++)
                if (p->type != CLI_T_GROUP && p->short_name && p->short_name == a[1] && a[2] == 0) o = p;
            if (!o) {
                free(out);
                // "-n5", "-b=64": no value attached (but "-batch-size" is a long name after one dash)
                if (!find_long(opts, a + 1, strlen(a + 1)))
                    for (const cli_opt *p = opts; p->type != CLI_T_END; p++)
                        if (p->type != CLI_T_GROUP && p->short_name && p->short_name == a[1] && p->type != CLI_T_FLAG)
                            return bp_fail(BP_EUSAGE, "unknown flag '%s'; did you mean '-%c %s'? (see '%s --help')",
                                           a, a[1], a + 2 + (a[2] == '='), prog);
                return unknown_flag(opts, prog, a, a + 1, strlen(a + 1));
            }
            name = o->name, len = strlen(o->name); // messages name the long flag
        }
        if (g) g->given[o - opts] = (unsigned char)((typed ? typed : o) - opts + 1);
        if (o->type == CLI_T_FLAG && val) {
            free(out);
            return bp_fail(BP_EUSAGE, "--%.*s takes no value", (int)len, name);
        }
        if (o->type != CLI_T_FLAG && !val) {
            if (i + 1 >= argc) {
                free(out);
                return bp_fail(BP_EUSAGE, "--%.*s needs a value", (int)len, name);
            }
            val = argv[++i];
        }
        const size_t k = (size_t)(o - opts);
        const cli_opt *now = typed ? typed : o;
        const char *v = o->type == CLI_T_FLAG ? (negated ? "(off)" : "(on)") : val;
        const cli_giving cur = {now, a, v};
        const cli_giving *other = giving_conflicts(&last[k], &cur)    ? &last[k]
                                  : giving_conflicts(&first[k], &cur) ? &first[k]
                                                                      : NULL;
        // One note, of the first option given so: a later giving of that option rewrites it, so
        // that it names the value used.
        // a negative value under an alias that takes it for "unset" (CLI_ALIAS_NEG_UNSET): the default
        const int unset = typed && typed->type == CLI_T_ALIAS && typed->min_i == 1 &&
                          (o->type == CLI_T_INT || o->type == CLI_T_I64) && negative_integer(v);
        if (other && (noted == SIZE_MAX || (g && noted == (size_t)(o - opts)))) {
            char note[sizeof g->overridden], used[64];
            if (unset) snprintf(used, sizeof used, "%s (the default, %lld)", v, (long long)o->def_i);
            else snprintf(used, sizeof used, "%s", v);
            snprintf(note, sizeof note, "%.*s %s and %.*s %s name one option (--%s): the last, %s, is used",
                     (int)strcspn(other->arg, "="), other->arg, other->val, (int)strcspn(a, "="), a, v, o->name, used);
            noted = (size_t)(o - opts);
            if (g) memcpy(g->overridden, note, sizeof note);
            else bp_log(BP_LOG_WARN, "%s", note);
        }
        if (!first[k].typed) first[k] = cur;
        last[k] = cur;
        if (o->type == CLI_T_FLAG) {
            *(int *)o->ptr = !negated;
            continue;
        }
        if (unset) { // as not given
            set_default(o);
            if (g) g->given[k] = 0;
            first[k].typed = last[k].typed = NULL;
            continue;
        }
        char shown[72];
        snprintf(shown, sizeof shown, "%.*s", (int)BP_MIN(len, 64), name);
        int rc = set_value(o, shown, val);
        if (rc) {
            free(out);
            return rc;
        }
    }
    *pos = out;
    *npos = n;
    return 0;
}

void cli_usage(const char *prog, const char *synopsis, const cli_opt *opts, FILE *f) {
    fprintf(f, "usage: %s %s\n\noptions:\n", prog, synopsis);
    int help_shown = 0; // before the first group: it belongs to the command, not to a group
    for (const cli_opt *o = opts; o->type != CLI_T_END; o++) {
        if (o->type == CLI_T_GROUP) {
            if (!help_shown) fprintf(f, "  %-30s %s\n", "-h, --help", "show this help"), help_shown = 1;
            fprintf(f, "\n%s:\n", o->help);
            continue;
        }
        if (o->type == CLI_T_HINT) continue;
        const cli_opt *t = resolve(opts, o); // an alias takes its target's value
        char lhs[96], def[128] = "", help[256];
        const char *arg = "";
        switch (t->type) {
        case CLI_T_INT:
        case CLI_T_I64:
            arg = " N"; // a default outside the range stands for "not given" and is not shown
            if (o->def_i >= o->min_i && o->def_i <= o->max_i)
                snprintf(def, sizeof def, " (default %lld)", (long long)o->def_i);
            break;
        case CLI_T_DBL: arg = " X"; snprintf(def, sizeof def, " (default %g)", o->def_d); break;
        case CLI_T_STR:
            arg = " S";
            if (o->def_s) snprintf(def, sizeof def, " (default %s)", o->def_s);
            break;
        case CLI_T_CHOICE: {
            char name[64];
            choice_name(o->choices, (int)o->def_i, name, sizeof name);
            arg = " C";
            snprintf(def, sizeof def, " {%s} (default %s)", o->choices, name);
            break;
        }
        default: break;
        }
        if (o->short_name) snprintf(lhs, sizeof lhs, "-%c, --%s%s", o->short_name, o->name, arg);
        else snprintf(lhs, sizeof lhs, "    --%s%s", o->name, arg);
        const char *h = o->help; // long texts: not copied
        if (t != o) {
            const char *unset = o->min_i == 1 ? "; -1: its default" : "";
            snprintf(help, sizeof help, "same as --%s (%s%s)", t->name, o->help, unset), h = help, def[0] = 0;
        }
        if (strlen(lhs) > 30) fprintf(f, "  %s\n  %-30s %s%s\n", lhs, "", h, def); // too long to align
        else fprintf(f, "  %-30s %s%s\n", lhs, h, def);
    }
    if (!help_shown) fprintf(f, "  %-30s %s\n", "-h, --help", "show this help");
}

int cli_parse_dims(const char *flag, const char *s, int *dims, int cap) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        // strtol alone would also take leading blanks and a sign ("13- 5", "+5").
        if (*p < '0' || *p > '9') return bp_fail(BP_EUSAGE, "--%s: expected sizes like 13-512-256, got '%s'", flag, s);
        long v = strtol(p, &end, 10);
        if (end == p || errno || v <= 0 || v > (1 << 24))
            return bp_fail(BP_EUSAGE, "--%s: expected sizes like 13-512-256, got '%s'", flag, s);
        if (n == cap) return bp_fail(BP_EUSAGE, "--%s: at most %d sizes, got '%s'", flag, cap, s);
        dims[n++] = (int)v;
        if (*end == '-') p = end + 1;
        else if (*end == 0) p = end;
        else return bp_fail(BP_EUSAGE, "--%s: expected sizes like 13-512-256, got '%s'", flag, s);
        if (*end == '-' && *p == 0) return bp_fail(BP_EUSAGE, "--%s: trailing '-' in '%s'", flag, s);
    }
    if (n == 0) return bp_fail(BP_EUSAGE, "--%s: empty size list", flag);
    return n;
}

int cli_parse_u64_list(const char *flag, const char *s, uint64_t *vals, int cap) {
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        if (*p == '-') return bp_fail(BP_EUSAGE, "--%s: negative value in '%s'", flag, s);
        // strtoull alone would also take leading blanks and a sign: " -1" would wrap to 2^64 - 1.
        if (*p < '0' || *p > '9') return bp_fail(BP_EUSAGE, "--%s: expected numbers like 10,20,30, got '%s'", flag, s);
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || errno) return bp_fail(BP_EUSAGE, "--%s: expected numbers like 10,20,30, got '%s'", flag, s);
        if (n == cap) return bp_fail(BP_EUSAGE, "--%s: at most %d values, got '%s'", flag, cap, s);
        vals[n++] = v;
        if (*end == ',') p = end + 1;
        else if (*end == 0) p = end;
        else return bp_fail(BP_EUSAGE, "--%s: expected numbers like 10,20,30, got '%s'", flag, s);
        if (*end == ',' && *p == 0) return bp_fail(BP_EUSAGE, "--%s: trailing ',' in '%s'", flag, s);
    }
    if (n == 0) return bp_fail(BP_EUSAGE, "--%s: empty list", flag);
    return n;
}
