# Unit tests of proto/: one Check binary per module.
foreach(mod error mpcheck frame envelope receipt receipt_json)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/check_${mod}.c)
    receiptd_check_test(check_${mod}
      SOURCES check_${mod}.c
      LIBS receiptproto)
  endif()
endforeach()
# Both read the shared vectors' JSON forms.
target_link_libraries(check_receipt PRIVATE receiptproto_json)
target_link_libraries(check_receipt_json PRIVATE receiptproto_json)

# check_receipt injects allocation failures: the allocator calls made from
# proto/ (and msgpack-c's inline buffer code compiled into it) go through
# the test's __wrap_ functions.
target_link_options(check_receipt PRIVATE
  -Wl,--wrap=malloc -Wl,--wrap=realloc -Wl,--wrap=calloc)
