# bench_decode: receipt decode throughput over the shared vectors.
#   build/bench/bench_decode [SECONDS]
add_executable(bench_decode bench_decode.c)
target_link_libraries(bench_decode PRIVATE receiptproto_json)
target_compile_definitions(bench_decode PRIVATE
  BENCH_VECTOR_DIR="${PROJECT_SOURCE_DIR}/tests/data/vectors")
