# Issue 3: the ingest benchmark. A benchmark asserts nothing and is not
# registered with CTest; run it by hand (see the comment in bench_ingest.c).
add_executable(bench_ingest bench_ingest.c)
target_link_libraries(bench_ingest PRIVATE receiptd_core receipttls m)
target_compile_definitions(bench_ingest PRIVATE
  BENCH_BINARY_DIR="${CMAKE_BINARY_DIR}")
add_dependencies(bench_ingest receiptd)

# Issue 11: PostgreSQL COPY is one of its baselines. libpq is optional and
# for this target alone; without it the benchmark prints a note instead.
pkg_check_modules(PQ IMPORTED_TARGET libpq)
if(PQ_FOUND)
  target_link_libraries(bench_ingest PRIVATE PkgConfig::PQ)
  target_compile_definitions(bench_ingest PRIVATE HAVE_LIBPQ)
else()
  message(STATUS "libpq not found: bench_ingest without PostgreSQL COPY")
endif()
