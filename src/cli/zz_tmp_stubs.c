#include <stdio.h>
#include "cli/cli.h"
__attribute__((weak)) int dt__cli_launch(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "launch: not built\n"); return 2; }
__attribute__((weak)) int dt__cli_params(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "params: not built\n"); return 2; }
