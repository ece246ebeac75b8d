/*
 * testcerts.c: see testcerts.h. One shell script through system(): the
 * certificates are what openssl makes of the same commands an operator
 * would type.
 */
#include "testcerts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e_util.h"
#include "skip.h"

int
testcerts_make(char *dir, size_t len)
{
    char sh[4096], tool[256];

    if (len == 0)
        return -1;
    dir[0] = '\0';
    if (e2e_which("openssl", tool, sizeof(tool)) != 0)
        return -1;
    snprintf(dir, len, "%s/certs-XXXXXX", TEST_BINARY_DIR);
    if (mkdtemp(dir) == NULL) {
        dir[0] = '\0';
        return -1;
    }
    snprintf(
        sh, sizeof(sh),
        "set -e; cd '%s'\n"
        "o() { openssl \"$@\" >/dev/null 2>&1; }\n"
        "ca() { o req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
        "-nodes -keyout $1.key -out $1.pem -days 2 -subj \"/CN=$2\"; }\n"
        "leaf() { o req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
        "-keyout $1.key -out $1.csr -subj \"/CN=$3\"\n"
        "  printf 'subjectAltName=%%s\\n' \"$4\" > $1.ext\n"
        "  o x509 -req -in $1.csr -CA $2.pem -CAkey $2.key -CAcreateserial "
        "-out $1.pem -days $5 -extfile $1.ext; }\n"
        "ca ca 'receiptd test CA'\n"
        "ca ca2 'receiptd other CA'\n"
        "leaf server ca localhost DNS:localhost,IP:127.0.0.1 2\n"
        "leaf expired ca localhost DNS:localhost,IP:127.0.0.1 -1\n"
        "leaf wrongname ca elsewhere.example DNS:elsewhere.example 2\n"
        "leaf server2 ca2 localhost DNS:localhost,IP:127.0.0.1 2\n"
        "leaf client ca node-17 DNS:node-17 2\n"
        "leaf rogue ca2 node-17 DNS:node-17 2\n",
        dir);
    if (system(sh) != 0) {
        testcerts_remove(dir);
        dir[0] = '\0';
        return -1;
    }
    return 0;
}

void
testcerts_remove(const char *dir)
{
    char cmd[600];

    if (dir[0] == '\0' || strchr(dir, '\'') != NULL)
        return;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

int
testcerts_run(const char *name, Suite *s, char *dir, size_t len)
{
    SRunner *sr;
    int rc;

    if (testcerts_make(dir, len) != 0)
        fprintf(stderr, "%s: no certificates (openssl); every test skips\n",
                name);
    sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    rc = skip_status(sr);
    srunner_free(sr);
    testcerts_remove(dir);
    return rc;
}
