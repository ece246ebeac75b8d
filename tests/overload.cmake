# Overload and hostile peers against the real daemon: a full tmpfs,
# connection floods, EMFILE, slowloris, peers that never read, and the WAL
# under a query loop (and its control, a pinned snapshot, which must grow
# the WAL), and plan writes faster than a slow disk. OVERLOAD_WAL_SECONDS
# lengthens the WAL test (8 s).
if(TARGET receiptd)
  receiptd_check_test(e2e_overload
    SOURCES e2e_overload.c e2e_util.c
    LIBS receiptproto PkgConfig::SQLITE)
  # A slow disk for the backpressure test: fsync sleeps. Built without the
  # sanitizers, which cannot instrument a preloaded library.
  add_library(slowsync_preload MODULE slowsync_preload.c)
  target_link_libraries(slowsync_preload PRIVATE ${CMAKE_DL_LIBS})
  if(RECEIPTD_SANITIZE)
    target_compile_options(slowsync_preload PRIVATE -fno-sanitize=all)
    target_link_options(slowsync_preload PRIVATE -fno-sanitize=all)
  endif()
  add_dependencies(e2e_overload receiptd slowsync_preload)
endif()
