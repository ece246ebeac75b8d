# Reliability: power loss, I/O and allocation faults, hostile input, kills.
# The SQLite tests share the fault-injecting VFS and the workload, which
# applies the real migrations/ read from the source tree.
set(RELIABILITY_MIGRATIONS ${CMAKE_SOURCE_DIR}/migrations)

foreach(t powerloss fault)
  receiptd_check_test(check_${t}
    SOURCES check_${t}.c vfs_fault.c relwork.c
    LIBS PkgConfig::SQLITE)
  target_compile_definitions(check_${t} PRIVATE
    RELWORK_MIGRATIONS_DIR="${RELIABILITY_MIGRATIONS}")
endforeach()
