# client: receiptctl's formatting and time parsing as unit tests, and the
# real binary driven by fork/exec (usage errors, connection errors, a fake
# daemon for replies, and the real daemon when it is built).
set(CLIENT_TESTS ${CMAKE_CURRENT_LIST_DIR})

receiptd_check_test(check_timespec
  SOURCES ${CLIENT_TESTS}/check_timespec.c
  LIBS receiptclient)

receiptd_check_test(check_output
  SOURCES ${CLIENT_TESTS}/check_output.c
  LIBS receiptclient)

receiptd_check_test(check_net
  SOURCES ${CLIENT_TESTS}/check_net.c
  LIBS receiptclient)

receiptd_check_test(e2e_client
  SOURCES ${CLIENT_TESTS}/e2e_client.c ${CLIENT_TESTS}/e2e_util.c
  LIBS receiptclient)
add_dependencies(e2e_client receiptctl)
if(TARGET receiptd)
  target_compile_definitions(e2e_client PRIVATE E2E_HAVE_DAEMON)
  add_dependencies(e2e_client receiptd)
endif()
