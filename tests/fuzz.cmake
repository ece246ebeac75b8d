# Fuzz targets (tests/fuzz/fuzz_*.c) and their replay test.
#
# In every build, check_fuzz_replay compiles each target's source into an
# ordinary Check binary and feeds it every file of tests/fuzz/corpus/<name>/
# (seeds and past crashers), so the corpus is a regression suite for gcc and
# the sanitizer build too.
#
# With -DRECEIPTD_FUZZ=ON and clang, each target is also built as a libFuzzer
# binary with -fsanitize=fuzzer,address,undefined, over its own copy of the
# proto library built with coverage instrumentation (and fuzz_conn over a
# copy of the daemon core too). scripts/fuzz.sh drives them.

set(RECEIPTD_FUZZ_TARGETS frame plan json receipt conn)
set(RECEIPTD_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)

# One replay binary per target, since each target defines the same
# LLVMFuzzerTestOneInput: check_fuzz_replay for frame, check_fuzz_replay_<t>
# for the others.
foreach(t ${RECEIPTD_FUZZ_TARGETS})
  if(t STREQUAL "frame")
    set(replay check_fuzz_replay)
  else()
    set(replay check_fuzz_replay_${t})
  endif()
  # fuzz_conn drives the daemon's connection code, the others proto/ only.
  if(t STREQUAL "conn")
    set(replay_libs receiptd_core)
  elseif(t STREQUAL "json")
    set(replay_libs receiptproto_json)
  else()
    set(replay_libs receiptproto)
  endif()
  receiptd_check_test(${replay}
    SOURCES fuzz/check_fuzz_replay.c fuzz/fuzz_${t}.c
    LIBS ${replay_libs})
  target_include_directories(${replay} PRIVATE ${RECEIPTD_FUZZ_DIR})
  target_compile_definitions(${replay} PRIVATE
    FUZZ_CORPUS_DIR="${RECEIPTD_FUZZ_DIR}/corpus" FUZZ_TARGET="${t}")
endforeach()

if(RECEIPTD_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "RECEIPTD_FUZZ needs clang (CC=clang)")
  endif()
  set(fuzz_flags -fsanitize=fuzzer,address,undefined
                 -fno-sanitize-recover=all -fno-omit-frame-pointer)
  # The library again, instrumented for coverage but without libFuzzer's
  # main, so the fuzzer sees inside proto/.
  get_target_property(proto_sources receiptproto SOURCES)
  get_target_property(proto_dir receiptproto SOURCE_DIR)
  set(proto_abs)
  foreach(s ${proto_sources})
    if(IS_ABSOLUTE ${s})
      list(APPEND proto_abs ${s})
    else()
      list(APPEND proto_abs ${proto_dir}/${s})
    endif()
  endforeach()
  add_library(receiptproto_fuzz STATIC ${proto_abs})
  target_include_directories(receiptproto_fuzz PUBLIC
    $<TARGET_PROPERTY:receiptproto,INTERFACE_INCLUDE_DIRECTORIES>)
  target_link_libraries(receiptproto_fuzz PUBLIC PkgConfig::MSGPACK)
  target_compile_options(receiptproto_fuzz PRIVATE
    -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
    -fno-omit-frame-pointer)
  # The JSON adapters the same way, for fuzz_json.
  get_target_property(json_sources receiptproto_json SOURCES)
  set(json_abs)
  foreach(s ${json_sources})
    list(APPEND json_abs ${proto_dir}/${s})
  endforeach()
  add_library(receiptproto_json_fuzz STATIC ${json_abs})
  target_link_libraries(receiptproto_json_fuzz PUBLIC receiptproto_fuzz
                        PkgConfig::JSONC)
  target_compile_options(receiptproto_json_fuzz PRIVATE
    -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
    -fno-omit-frame-pointer)
  # The daemon core again, instrumented, for fuzz_conn. Its sources are
  # relative to daemon/ except the embedded migrations, generated into the
  # daemon's binary dir (already absolute). The command that makes them
  # belongs to daemon/, so here the file is marked generated and this
  # library waits for receiptd_core, whose build runs that command.
  get_target_property(core_sources receiptd_core SOURCES)
  get_target_property(core_dir receiptd_core SOURCE_DIR)
  set(core_abs)
  foreach(s ${core_sources})
    if(IS_ABSOLUTE ${s})
      list(APPEND core_abs ${s})
    else()
      list(APPEND core_abs ${core_dir}/${s})
    endif()
  endforeach()
  foreach(s ${core_abs})
    if(s MATCHES "^${CMAKE_BINARY_DIR}/")
      set_source_files_properties(${s} PROPERTIES GENERATED TRUE)
    endif()
  endforeach()
  add_library(receiptd_core_fuzz STATIC ${core_abs})
  add_dependencies(receiptd_core_fuzz receiptd_core)
  target_include_directories(receiptd_core_fuzz PUBLIC ${core_dir})
  target_link_libraries(receiptd_core_fuzz PUBLIC receiptproto_fuzz
                        PkgConfig::LIBUV PkgConfig::SQLITE PkgConfig::SYSTEMD
                        PkgConfig::LIBCONFIG PkgConfig::NETTLE roaring::roaring
                        Threads::Threads)
  target_compile_options(receiptd_core_fuzz PRIVATE
    -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
    -fno-omit-frame-pointer)
  foreach(t ${RECEIPTD_FUZZ_TARGETS})
    add_executable(fuzz_${t} fuzz/fuzz_${t}.c)
    target_include_directories(fuzz_${t} PRIVATE ${RECEIPTD_FUZZ_DIR})
    target_compile_options(fuzz_${t} PRIVATE ${fuzz_flags})
    target_link_options(fuzz_${t} PRIVATE ${fuzz_flags})
    if(t STREQUAL "conn")
      target_link_libraries(fuzz_${t} PRIVATE receiptd_core_fuzz)
    elseif(t STREQUAL "json")
      target_link_libraries(fuzz_${t} PRIVATE receiptproto_json_fuzz)
    else()
      target_link_libraries(fuzz_${t} PRIVATE receiptproto_fuzz)
    endif()
  endforeach()
endif()
