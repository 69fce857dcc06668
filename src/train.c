// Placeholder until the module lands.
#include "cmds.h"
#include "common.h"
int cmd_train(int argc, char **argv) {
    (void)argc, (void)argv;
    return cmd_exit(bp_fail(BP_EUSAGE, "'train' is not available in this build yet"));
}
int cmd_eval(int argc, char **argv) {
    (void)argc, (void)argv;
    return cmd_exit(bp_fail(BP_EUSAGE, "'eval' is not available in this build yet"));
}
