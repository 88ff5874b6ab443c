# sax_gtest_suites(TARGET [LABELS l...] [TIMEOUT s] [RESOURCE_LOCK r...] [MPI_SUITES regex])
# One CTest entry per GoogleTest suite of TARGET, named TARGET:Suite and running that suite's cases
# in one process (--gtest_filter=Suite.*), found after each build as gtest_discover_tests finds
# cases. A process per case cost more than most cases (a 43-layout grid ran 9.6 s as 602 processes,
# 1.8 s as one); gtest's output still names the case that failed, and each entry writes its cases to
# build/gtest-xml/TARGET/Suite.xml (scripts/ctest-report.py counts them). Suites matching MPI_SUITES start
# mpirun: they are labelled mpi instead of unit.
set(SAX_GTEST_SUITES_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/SaxGTestSuites.cmake)
set(SAX_SUITE_VALUES TIMEOUT MPI_SUITES)
set(SAX_SUITE_LISTS LABELS RESOURCE_LOCK)

# sax_suite_args(OUT ARGS...): the suite properties among ARGS but LABELS (as sax_gtest_suites takes
# them), so that a function with arguments of its own can pass them on and add its labels.
function(sax_suite_args out)
  cmake_parse_arguments(S "" "${SAX_SUITE_VALUES}" "${SAX_SUITE_LISTS}" ${ARGN})
  set(args "")
  foreach(k IN LISTS SAX_SUITE_VALUES SAX_SUITE_LISTS)
    if(DEFINED S_${k} AND NOT k STREQUAL "LABELS")
      list(APPEND args ${k} ${S_${k}})
    endif()
  endforeach()
  set(${out} ${args} PARENT_SCOPE)
endfunction()

function(sax_gtest_suites target)
  cmake_parse_arguments(G "" "${SAX_SUITE_VALUES}" "${SAX_SUITE_LISTS}" ${ARGN})
  set(listed ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake)
  set(include ${CMAKE_CURRENT_BINARY_DIR}/${target}_include.cmake)
  add_custom_command(
    TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -D EXE=$<TARGET_FILE:${target}> -D TARGET=${target} -D OUT=${listed} -D
            XML_DIR=${PROJECT_BINARY_DIR}/gtest-xml -P ${SAX_GTEST_SUITES_SCRIPT}
    BYPRODUCTS ${listed}
    VERBATIM)
  set(props "")
  if(G_LABELS)
    list(JOIN G_LABELS ";" labels)
    string(APPEND props " LABELS \"${labels}\"")
  endif()
  if(G_RESOURCE_LOCK)
    list(JOIN G_RESOURCE_LOCK ";" locks)
    string(APPEND props " RESOURCE_LOCK \"${locks}\"")
  endif()
  if(DEFINED G_TIMEOUT)
    string(APPEND props " TIMEOUT ${G_TIMEOUT}")
  endif()
  set(apply "")
  if(props)
    set(apply "  foreach(t IN LISTS ${target}_SUITES)\n    set_tests_properties(\"\${t}\" PROPERTIES${props})\n  endforeach()\n")
  endif()
  if(G_MPI_SUITES)
    set(mpi_labels ${G_LABELS})
    list(REMOVE_ITEM mpi_labels unit)
    list(APPEND mpi_labels mpi)
    list(JOIN mpi_labels ";" mpi_labels)
    string(APPEND apply "  foreach(t IN LISTS ${target}_SUITES)\n    if(t MATCHES [=[:${G_MPI_SUITES}$]=])\n"
           "      set_tests_properties(\"\${t}\" PROPERTIES LABELS \"${mpi_labels}\")\n    endif()\n  endforeach()\n")
  endif()
  # Not built (a build of some targets only): one entry that fails, labelled as the suites would be.
  set(missing "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n")
  if(G_LABELS)
    string(APPEND missing "  set_tests_properties(${target}_NOT_BUILT PROPERTIES LABELS \"${labels}\")\n")
  endif()
  file(WRITE ${include} "if(EXISTS \"${listed}\")\n  include(\"${listed}\")\n${apply}else()\n${missing}endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include})
endfunction()
