# Unit tests of proto/: one Check binary per module.
foreach(mod error mpcheck frame envelope receipt receipt_json)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/check_${mod}.c)
    receiptd_check_test(check_${mod}
      SOURCES check_${mod}.c
      LIBS receiptproto)
  endif()
endforeach()
