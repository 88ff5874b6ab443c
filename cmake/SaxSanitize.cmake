# Sanitizer builds (issue 17), each in a build dir of its own:
# - SAX_FUZZ=ON (scripts/fuzz.sh, build-fuzz): clang only; every library instrumented for
#   libFuzzer's coverage and checked by AddressSanitizer and UndefinedBehaviorSanitizer, the
#   targets in tests/fuzz/ linked with libFuzzer.
# - SAX_SANITIZE=ON (scripts/sanitize.sh, build-asan): any compiler; AddressSanitizer and
#   UndefinedBehaviorSanitizer on everything, for the unit tests CI runs under them.
# UB is fatal in both (-fno-sanitize-recover): a report fails the test or is the fuzzer's finding.
# C++ only: nvcc takes none of these flags (a CUDA build is left as it is).
option(SAX_FUZZ "Build the libFuzzer targets of tests/fuzz (clang; a build dir of its own)" OFF)
option(SAX_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)

set(_sax_sanitizers -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
if(SAX_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SAX_FUZZ=ON needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: configure a build dir of "
                        "its own with CC=clang CXX=clang++ -DSAX_CUDA=OFF, as scripts/fuzz.sh does")
  endif()
  if(NOT SAX_BUILD_TESTS)
    message(FATAL_ERROR "SAX_FUZZ=ON builds the targets in tests/fuzz: leave SAX_BUILD_TESTS on")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link;${_sax_sanitizers}>")
  add_link_options(-fsanitize=address,undefined)
elseif(SAX_SANITIZE)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_sax_sanitizers}>")
  add_link_options(-fsanitize=address,undefined)
endif()
