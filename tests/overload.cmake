# Overload and hostile peers against the real daemon: a full tmpfs,
# connection floods, EMFILE, slowloris, peers that never read, and the WAL
# under a query loop (and its control, a pinned snapshot, which must grow
# the WAL). OVERLOAD_WAL_SECONDS lengthens the WAL test (8 s).
if(TARGET receiptd)
  receiptd_check_test(e2e_overload
    SOURCES e2e_overload.c e2e_util.c
    LIBS receiptproto PkgConfig::SQLITE)
  add_dependencies(e2e_overload receiptd)
endif()
