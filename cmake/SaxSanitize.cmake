# Sanitizer builds, each in a build dir of its own:
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
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    # clang links its ASan runtime statically into executables only, so a shared library (the NCCL
    # net plugin, linked --no-undefined) finds it nowhere: every target takes the shared runtime,
    # found through an rpath (gcc does both by default).
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libclang_rt.asan-x86_64.so
                    OUTPUT_VARIABLE _sax_asan_rt OUTPUT_STRIP_TRAILING_WHITESPACE)
    get_filename_component(_sax_asan_dir "${_sax_asan_rt}" DIRECTORY)
    add_link_options(-shared-libsan -Wl,-rpath,${_sax_asan_dir})
  endif()
endif()

# The explorer's and the workload's tests search and build thousands of layouts: with their
# libraries at -O0 under ASan those few tests were most of the sanitizer run, so these two are
# built at -O1 in a sanitizer build whatever its level (the rest stays at the build's level).
function(sax_sanitize_at_o1)
  if(SAX_SANITIZE)
    foreach(target ${ARGN})
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O1>)
    endforeach()
  endif()
endfunction()
