# Issue 5, the daemon and client part: plan, retention and readback end to
# end against the real receiptd and receiptctl.
receiptd_check_test(e2e_plan
  SOURCES e2e_plan.c e2e_util.c plan_fixture.c
  LIBS receiptproto_json PkgConfig::SQLITE)
add_dependencies(e2e_plan receiptd)
if(TARGET receiptctl)
  add_dependencies(e2e_plan receiptctl)
endif()

# The store's plan functions on a real SQLite file.
receiptd_check_test(check_store_plan
  SOURCES check_store_plan.c
  LIBS receiptd_core PkgConfig::SQLITE)
