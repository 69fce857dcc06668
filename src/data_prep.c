// Placeholder until the module lands.
#include "cmds.h"
#include "common.h"
int cmd_prep(int argc, char **argv) {
    (void)argc, (void)argv;
    return cmd_exit(bp_fail(BP_EUSAGE, "'prep' is not available in this build yet"));
}
