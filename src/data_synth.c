// Placeholder until the module lands.
#include "cmds.h"
#include "common.h"
int cmd_synth(int argc, char **argv) {
    (void)argc, (void)argv;
    return cmd_exit(bp_fail(BP_EUSAGE, "'synth' is not available in this build yet"));
}
