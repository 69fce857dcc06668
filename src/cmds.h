// The subcommands of the bagpipe binary.  Each takes the argv that follows the binary's name
// (argv[0] is the subcommand) and returns a process exit code: 0 success, 1 runtime failure,
// 2 usage error.
#ifndef BP_CMDS_H
#define BP_CMDS_H

#include "data_bin.h"

int cmd_synth(int argc, char **argv);   // data_synth.c
int cmd_prep(int argc, char **argv);    // data_prep.c
int cmd_analyze(int argc, char **argv); // analyze.c
int cmd_train(int argc, char **argv);   // train.c
int cmd_eval(int argc, char **argv);    // train.c
int cmd_info(int argc, char **argv);    // cmds.c
int cmd_shuffle(int argc, char **argv); // data_shuffle.c

// The order `bagpipe shuffle --seed seed --buckets K` writes n train rows in: order[i] is the input
// row at position i (K <= 1: in memory).  The tests' twin of the command's passes over files.
void bp_shuffle_order(uint64_t n, uint64_t K, uint64_t seed, uint64_t *order);

// Exit code for a bagpipe error code (BP_EUSAGE -> 2, others -> 1), after printing its message.
int cmd_exit(int rc);

// Opens a dataset for a command that reads its rows (train, eval, analyze): every section's
// checksum and every id against its table are verified first, so a damaged file is refused with
// a message instead of being read out of bounds; a raw log gets the hint to run prep.
int cmd_open_dataset(bp_dataset *ds, const char *path);

#endif
