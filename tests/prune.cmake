# Issue 6, retention: store_prune against a full scan of the receipts that
# remain, the batch bound, the prune records and the kept dedupe records.
receiptd_check_test(check_prune
  SOURCES check_prune.c
  LIBS receiptd_core PkgConfig::SQLITE)
