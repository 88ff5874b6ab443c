# Run after a GoogleTest executable is built (cmake -P): lists its suites and writes one CTest
# entry per suite, TARGET:Suite, running that suite's cases in one process. gtest's own output names
# a failing case; one process per suite instead of per case keeps a 43-layout grid to one start.
# Each suite writes its cases' results to XML_DIR/TARGET/Suite.xml (GTEST_OUTPUT: one file per
# entry, so that entries running at once never write the same file).
# In: EXE (the executable), TARGET (its name), OUT (the file to write), XML_DIR.
execute_process(COMMAND "${EXE}" --gtest_list_tests OUTPUT_VARIABLE listing ERROR_VARIABLE err RESULT_VARIABLE rc
                TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --gtest_list_tests failed (${rc}): ${err}")
endif()
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(names "")
set(body "")
foreach(line IN LISTS lines)
  # Suites start the line and end with a dot (a typed or parameterised suite adds "  # ..."); cases
  # are indented.
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    set(name "${TARGET}:${suite}")
    string(REPLACE "/" "." file "${suite}")
    string(APPEND body "add_test([=[${name}]=] [=[${EXE}]=] [=[--gtest_filter=${suite}.*]=])\n"
           "set_tests_properties([=[${name}]=] PROPERTIES ENVIRONMENT [=[GTEST_OUTPUT=xml:${XML_DIR}/${TARGET}/${file}.xml]=])\n")
    list(APPEND names "${name}")
  endif()
endforeach()
list(LENGTH names n)
if(n EQUAL 0)
  message(FATAL_ERROR "${EXE} lists no test suites")
endif()
string(APPEND body "set(${TARGET}_SUITES [==[${names}]==])\n")
file(WRITE "${OUT}" "${body}")
