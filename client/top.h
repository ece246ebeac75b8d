/*
 * top.h: `receiptctl top`, the daemon's figures on a full-screen view
 * refreshed each second (top.c, ncurses).
 */
#ifndef RECEIPTD_CLIENT_TOP_H
#define RECEIPTD_CLIENT_TOP_H

#include "cli.h"

/*
 * Runs until q, Ctrl-C, SIGTERM or SIGHUP, with the terminal restored on
 * every way out. Needs stdin and stdout on a terminal (CLI_EXIT_USAGE
 * otherwise). Returns 0, or an exit code with its line printed once the
 * terminal is restored (CLI_EXIT_CONNECT when the daemon stops answering).
 */
int top_run(struct cli_opts *o);

#endif
