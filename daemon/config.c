/*
 * config.c: built-in defaults, the configuration file and the cross-field
 * checks of config.h. Runs on the main thread only.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "frame.h"

int
config_init(struct config *c)
{
    memset(c, 0, sizeof(*c));
    c->socket_mode = 0660;
    c->quarantine_max_bytes = 256u << 20;
    c->prune_batch = 1000;
    c->max_frame = FRAME_MAX_DEFAULT;
    c->max_batch = 10000;
    c->max_connections = 1024;
    c->idle_timeout_ms = 300000;
    c->frame_timeout_ms = 10000;
    c->hello_timeout_ms = 5000;
    c->max_unsent_bytes = 4u << 20;
    c->max_pending_bytes = 64u << 20;
    c->commit_max_items = 20000;
    c->commit_max_bytes = 16u << 20;
    c->query_timeout_ms = 10000;
    c->query_threads = 2;
    c->log_level = LOG_INFO;
    return 0;
}

static void
free_list(char **list, size_t n)
{
    size_t i;

    for (i = 0; i < n; i++)
        free(list[i]);
    free(list);
}

void
config_free(struct config *c)
{
    size_t i;

    if (c == NULL)
        return;
    free(c->socket_path);
    free(c->socket_group);
    free(c->tcp_listen);
    free(c->db_path);
    free_list(c->writer_groups, c->n_writer_groups);
    free_list(c->reader_groups, c->n_reader_groups);
    for (i = 0; i < c->n_tokens; i++)
        free(c->tokens[i].name);
    free(c->tokens);
    memset(c, 0, sizeof(*c));
}

int
config_validate(const struct config *c, char err[CONFIG_ERR_MAX])
{
    if ((c->socket_path == NULL || c->socket_path[0] == '\0') &&
        (c->tcp_listen == NULL || c->tcp_listen[0] == '\0')) {
        snprintf(err, CONFIG_ERR_MAX,
                 "no listener: set a Unix socket path or a TCP address");
        return -1;
    }
    if (c->db_path == NULL || c->db_path[0] == '\0') {
        snprintf(err, CONFIG_ERR_MAX, "no database path");
        return -1;
    }
    if (c->max_frame < 64 || c->max_frame > FRAME_MAX_CEILING) {
        snprintf(err, CONFIG_ERR_MAX, "max_frame %lu is outside 64..%lu bytes",
                 (unsigned long)c->max_frame, (unsigned long)FRAME_MAX_CEILING);
        return -1;
    }
    if (c->max_batch < 1 || c->max_batch > 1000000) {
        snprintf(err, CONFIG_ERR_MAX, "max_batch %lu is outside 1..1000000",
                 (unsigned long)c->max_batch);
        return -1;
    }
    if (c->max_connections < 1) {
        snprintf(err, CONFIG_ERR_MAX, "max_connections must be at least 1");
        return -1;
    }
    return 0;
}

int
config_load_file(struct config *c, const char *path, char err[CONFIG_ERR_MAX])
{
    /* Filled in with libconfig by the configuration work (issue 6). */
    (void)c;
    snprintf(err, CONFIG_ERR_MAX,
             "%s:0: configuration files are not "
             "supported by this build yet",
             path);
    return -1;
}
