# Issue 5: plans, retention specs and readback (proto/plan.c,
# proto/retention.c). Pure functions: the tests link receiptproto only.
receiptd_check_test(check_plan
  SOURCES check_plan.c plan_fixture.c
  LIBS receiptproto_json)

receiptd_check_test(check_retention
  SOURCES check_retention.c plan_fixture.c
  LIBS receiptproto_json)
# Allocation-failure injection: proto's malloc, calloc and realloc calls in
# this binary go through the test's __wrap_ functions.
target_link_options(check_retention PRIVATE
  -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc)

# Regenerates the checked-in fixtures and fuzz seeds (not a test):
#   build/tests/plan_fixture_gen tests/data/plans tests/fuzz/corpus/plan
add_executable(plan_fixture_gen plan_fixture_gen.c plan_fixture.c)
target_link_libraries(plan_fixture_gen PRIVATE receiptproto_json)
target_compile_definitions(plan_fixture_gen PRIVATE
  TEST_DATA_DIR="${RECEIPTD_TEST_DATA}")
