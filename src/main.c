// bagpipe: subcommand dispatch.
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cmds.h"
#include "common.h"
#include "launch.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"synth", cmd_synth, "generate a synthetic dataset with the shape of Criteo or Avazu"},
    {"prep", cmd_prep, "convert raw Criteo TSV / Avazu CSV (plain or gzip) to a binary dataset"},
    {"shuffle", cmd_shuffle, "put a dataset's train rows in a random order (the DLRM reference's default)"},
    {"analyze", cmd_analyze, "access skew, reuse distances and cache simulation of a dataset"},
    {"train", cmd_train, "train a model (DLRM, Wide&Deep, DeepFM, DCN)"},
    {"eval", cmd_eval, "evaluate a saved model on a dataset"},
    {"info", cmd_info, "print the header of a binary dataset and verify it"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: bagpipe COMMAND [options]\n\n"
               "Trains deep recommendation models with lookahead embedding caching (BagPipe).\n\n"
               "commands:\n");
    for (size_t i = 0; i < BP_ARRAY_LEN(commands); i++) fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'bagpipe COMMAND --help' (or 'bagpipe help COMMAND') describes a command's options.\n");
}

// The command a misspelt name is within two edits of, or NULL.
static const char *nearest_command(const char *name) {
    size_t near = 0;
    for (size_t i = 1; i < BP_ARRAY_LEN(commands); i++)
        if (cli_edit_distance(name, commands[i].name) < cli_edit_distance(name, commands[near].name)) near = i;
    return cli_edit_distance(name, commands[near].name) <= 2 ? commands[near].name : NULL;
}

// A command's exit status, once what it printed is out: output lost to a full disk or a closed
// descriptor (`> /dev/full`, a full tmpfs: a truncated report or JSON) is an error, exit 1.
static int stdout_done(int rc) {
    const int flushed = fflush(stdout) == 0, e = errno;
    if (flushed && !ferror(stdout)) return rc;
    fprintf(stderr, "bagpipe: cannot write standard output%s%s; what it printed is incomplete\n", flushed ? "" : ": ",
            flushed ? "" : strerror(e));
    return rc ? rc : 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "help") == 0 && argc > 2) { // "bagpipe help train": that command's --help
        for (size_t i = 0; i < BP_ARRAY_LEN(commands); i++)
            if (strcmp(argv[2], commands[i].name) == 0) {
                char *args[] = {argv[2], "--help", NULL};
                return stdout_done(commands[i].fn(2, args));
            }
        const char *near = nearest_command(argv[2]);
        if (near) fprintf(stderr, "bagpipe: help: unknown command '%s'; did you mean '%s'?\n\n", argv[2], near);
        else fprintf(stderr, "bagpipe: help: unknown command '%s'\n\n", argv[2]);
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        int rank; // under the user's own mpirun or srun: one rank prints it (as a command's --help)
        launch_world(&rank);
        if (rank == 0) usage(stdout);
        return stdout_done(0);
    }
    for (size_t i = 0; i < BP_ARRAY_LEN(commands); i++)
        if (strcmp(argv[1], commands[i].name) == 0) return stdout_done(commands[i].fn(argc - 1, argv + 1));
    const char *near = nearest_command(argv[1]);
    if (argv[1][0] == '-') // "bagpipe --arch-mlp-bot ...", as the DLRM reference's script takes its flags
        fprintf(stderr, "bagpipe: '%s' before a command: the flags follow it ('bagpipe train [options] DATA')\n\n",
                argv[1]);
    else if (near)
        fprintf(stderr, "bagpipe: unknown command '%s'; did you mean '%s'?\n\n", argv[1], near);
    else fprintf(stderr, "bagpipe: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
