# Issue 5: plans, retention specs and readback (proto/plan.c,
# proto/retention.c). Pure functions: the tests link receiptproto only.
receiptd_check_test(check_plan
  SOURCES check_plan.c plan_fixture.c
  LIBS receiptproto)

receiptd_check_test(check_retention
  SOURCES check_retention.c plan_fixture.c
  LIBS receiptproto)
# Allocation-failure injection: proto's malloc, calloc and realloc calls in
# this binary go through the test's __wrap_ functions.
target_link_options(check_retention PRIVATE
  -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc)
