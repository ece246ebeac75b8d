# Reliability: power loss, I/O and allocation faults, hostile input, kills.
# The SQLite tests share the fault-injecting VFS (vfs_fault.c) and the
# workload (relwork.c), which applies the real migrations/ read from the
# source tree.
set(RELIABILITY_MIGRATIONS ${CMAKE_SOURCE_DIR}/migrations)

# With the daemon's store (receiptd_core) the workload can also drive
# daemon/store.h, the code the daemon runs.
foreach(t powerloss fault)
  if(TARGET receiptd_core)
    receiptd_check_test(check_${t}
      SOURCES check_${t}.c vfs_fault.c relwork.c relpack.c
      LIBS receiptd_core PkgConfig::SQLITE)
    target_compile_definitions(check_${t} PRIVATE RELWORK_WITH_STORE)
  else()
    receiptd_check_test(check_${t}
      SOURCES check_${t}.c vfs_fault.c relwork.c
      LIBS PkgConfig::SQLITE)
  endif()
  target_compile_definitions(check_${t} PRIVATE
    RELWORK_MIGRATIONS_DIR="${RELIABILITY_MIGRATIONS}")
endforeach()

# Allocation failures: SQLite's allocator through SQLITE_CONFIG_MALLOC, and
# proto's malloc/realloc/calloc through the linker's --wrap, which applies
# to the statically linked receiptproto objects.
if(TARGET receiptd_core)
  receiptd_check_test(check_oom
    SOURCES check_oom.c vfs_fault.c relwork.c relpack.c
    LIBS receiptd_core PkgConfig::SQLITE)
  target_compile_definitions(check_oom PRIVATE RELWORK_WITH_STORE)
else()
  receiptd_check_test(check_oom
    SOURCES check_oom.c vfs_fault.c relwork.c relpack.c
    LIBS receiptproto PkgConfig::SQLITE)
endif()
target_compile_definitions(check_oom PRIVATE
  RELWORK_MIGRATIONS_DIR="${RELIABILITY_MIGRATIONS}")
target_link_options(check_oom PRIVATE
  -Wl,--wrap=malloc,--wrap=realloc,--wrap=calloc)

# The hostile corpus through proto's reader, envelope and receipt decoder.
receiptd_check_test(check_hostile
  SOURCES check_hostile.c hostile_list.c relpack.c
  LIBS receiptproto)
target_compile_definitions(check_hostile PRIVATE
  HOSTILE_DIR="${CMAKE_CURRENT_SOURCE_DIR}/hostile")

# End-to-end: the real daemon binary (e2e_util.c starts it).
if(TARGET receiptd)
  receiptd_check_test(e2e_hostile
    SOURCES e2e_hostile.c e2e_util.c hostile_list.c relpack.c
    LIBS receiptproto PkgConfig::SQLITE)
  target_compile_definitions(e2e_hostile PRIVATE
    HOSTILE_DIR="${CMAKE_CURRENT_SOURCE_DIR}/hostile")
  add_dependencies(e2e_hostile receiptd)
endif()
if(TARGET receiptd)
  # The kill loop: RELIABILITY_KILLS=100 here; scripts/reliability-long.sh
  # runs 1,000.
  receiptd_check_test(e2e_killloop
    SOURCES e2e_killloop.c e2e_util.c relpack.c
    LIBS receiptproto PkgConfig::SQLITE)
  add_dependencies(e2e_killloop receiptd)
endif()
if(TARGET receiptd)
  # Only the writer opens the database read-write: the daemon runs with a
  # preloaded spy that logs every sqlite3_open_v2(). The spy is built
  # without the sanitizers, which cannot instrument a preloaded library.
  add_library(sqlite_open_spy MODULE sqlite_open_spy.c)
  target_link_libraries(sqlite_open_spy PRIVATE PkgConfig::SQLITE ${CMAKE_DL_LIBS})
  if(RECEIPTD_SANITIZE)
    target_compile_options(sqlite_open_spy PRIVATE -fno-sanitize=all)
    target_link_options(sqlite_open_spy PRIVATE -fno-sanitize=all)
  endif()
  receiptd_check_test(e2e_writer_only
    SOURCES e2e_writer_only.c e2e_util.c relpack.c
    LIBS receiptproto)
  add_dependencies(e2e_writer_only receiptd sqlite_open_spy)
endif()
if(TARGET receiptd)
  # The daemon itself loses its power: vfs_fault.c preloaded into it.
  add_library(vfs_fault_preload MODULE vfs_fault_preload.c vfs_fault.c)
  target_link_libraries(vfs_fault_preload PRIVATE PkgConfig::SQLITE
                        Threads::Threads ${CMAKE_DL_LIBS})
  if(RECEIPTD_SANITIZE)
    target_compile_options(vfs_fault_preload PRIVATE -fno-sanitize=all)
    target_link_options(vfs_fault_preload PRIVATE -fno-sanitize=all)
  endif()
  receiptd_check_test(e2e_powerloss
    SOURCES e2e_powerloss.c e2e_util.c relpack.c
    LIBS receiptproto PkgConfig::SQLITE)
  add_dependencies(e2e_powerloss receiptd vfs_fault_preload)
endif()
