# Issue 4: query latency on a large store. Not a test; run by hand:
#   build/bench/bench_query --receipts 10000000 --verify
add_executable(bench_query bench_query.c)
target_link_libraries(bench_query PRIVATE receiptd_core m)
