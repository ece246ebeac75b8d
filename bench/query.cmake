# Issue 4: query latency on a large store. Not a test; run by hand:
#   build/bench/bench_query --receipts 10000000 --verify
add_executable(bench_query bench_query.c bench_util.c)
target_link_libraries(bench_query PRIVATE receiptd_core m)

# Issue 14: the `gaps` query over many sources. Not a test; run by hand:
#   build/bench/bench_gaps --receipts 2000000 --sources 10000
add_executable(bench_gaps bench_gaps.c bench_util.c)
target_link_libraries(bench_gaps PRIVATE receiptd_core m)
