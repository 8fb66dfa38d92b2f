/*
 * cli.h - the subcommands of the `dtrain` command. Each takes the argv
 * that starts at its own name and returns the process exit status
 * (0 success, 1 failure, 2 bad usage).
 */
#ifndef DT_CLI_CLI_H
#define DT_CLI_CLI_H

int dt__cli_launch(int argc, char **argv);     /* launch/launch.c */
int dt__cli_rank_exec(int argc, char **argv);  /* launch/rank.c */
int dt__cli_params(int argc, char **argv);     /* params.c */
int dt__cli_checkpoint(int argc, char **argv); /* ckpt.c */
int dt__cli_k8s(int argc, char **argv);        /* k8s.c */
int dt__cli_plot(int argc, char **argv);       /* plot.c */
int dt__cli_role(int argc, char **argv);       /* main.c: scheduler, server */
int dt__cli_env(int argc, char **argv);        /* env.c */

#endif
