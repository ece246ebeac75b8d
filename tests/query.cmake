# Issue 4: the query side. End-to-end tests of fallbacks, coverage, gaps and
# quarantine against the real receiptd on a generated fleet; they link the
# store module too, to compare the rollups with a full scan of the file.

receiptd_check_test(e2e_query
  SOURCES e2e_query.c e2e_util.c
  LIBS receiptd_core PkgConfig::SQLITE)
add_dependencies(e2e_query receiptd)

# The rollups against a full scan after savepoints, rollbacks and
# transactions with more keys than are summed in memory.
receiptd_check_test(check_rollup
  SOURCES check_rollup.c
  LIBS receiptd_core PkgConfig::SQLITE)
