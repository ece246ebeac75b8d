# Issue 3: the ingest daemon. Unit tests link receiptd_core (the daemon's
# code without main.c); end-to-end tests start the real receiptd binary.

receiptd_check_test(check_store
  SOURCES check_store.c
  LIBS receiptd_core PkgConfig::SQLITE)

# The op table and the access rule it carries (daemon/dispatch.c).
receiptd_check_test(check_dispatch
  SOURCES check_dispatch.c
  LIBS receiptd_core)

receiptd_check_test(e2e_ingest
  SOURCES e2e_ingest.c e2e_util.c
  LIBS receiptproto PkgConfig::SQLITE)
add_dependencies(e2e_ingest receiptd)

receiptd_check_test(check_writer
  SOURCES check_writer.c
  LIBS receiptd_core PkgConfig::SQLITE)
