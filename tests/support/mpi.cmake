# How MPI integration tests start ranks on small machines (see ../shared/TESTBED.md): 4 ranks on
# 2 cores need --oversubscribe, --bind-to none and yielding, or busy-polling ranks starve.
# Open MPI refuses root unless told, hence the environment set on every MPI test.
set(SAX_MPIEXEC_FLAGS --oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
set(SAX_MPI_ROOT_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")

# A test program that starts `sax` itself under mpirun (each case its own mpirun -np 4), labelled
# mpi. The cases set Open MPI's root variables themselves (tests/support/run.hpp).
function(sax_mpi_cli_test name)
  cmake_parse_arguments(T "" "${SAX_SUITE_VALUES}" "SOURCES;LIBS;${SAX_SUITE_LISTS}" ${ARGN})
  sax_suite_args(suite_args ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${T_LIBS} nlohmann_json::nlohmann_json GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE SAX_SOURCE_DIR="${PROJECT_SOURCE_DIR}" SAX_BINARY="$<TARGET_FILE:sax>"
                                             SAX_MPIEXEC="${MPIEXEC_EXECUTABLE}")
  add_dependencies(${name} sax)
  sax_test_code(${name})
  sax_gtest_suites(${name} ${suite_args} LABELS mpi ${T_LABELS})
endfunction()
