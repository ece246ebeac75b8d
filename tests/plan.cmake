# Issue 5: plans, retention specs and readback (proto/plan.c,
# proto/retention.c). Pure functions: the tests link receiptproto only.
receiptd_check_test(check_plan
  SOURCES check_plan.c plan_fixture.c
  LIBS receiptproto)

if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/check_retention.c)
  receiptd_check_test(check_retention
    SOURCES check_retention.c plan_fixture.c
    LIBS receiptproto)
endif()
