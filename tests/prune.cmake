# Issue 6, retention: store_prune against a full scan of the receipts that
# remain, the batch bound, the prune records and the kept dedupe records.
receiptd_check_test(check_prune
  SOURCES check_prune.c
  LIBS receiptd_core PkgConfig::SQLITE)

# End to end: the real receiptd with a one-second retention age prunes in
# batches while new writes are acknowledged promptly.
receiptd_check_test(e2e_prune
  SOURCES e2e_prune.c e2e_util.c
  LIBS receiptproto)
add_dependencies(e2e_prune receiptd)
