# kiln_add_gtest(TARGET LABELS labels... [SHARDS n] [TIMEOUT s]): registers a GoogleTest program
# with CTest.
#
# Note [one process per shard]: a test program is run as SHARDS processes (GoogleTest's own
# GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX), not as one process per test case. Starting a test
# program costs more than most of its tests: loading libkiln and oneDNN and running the op
# registry's static initializers takes ~0.1 s in Release and ~1.5 s under AddressSanitizer, and
# with ~2,800 cases that was ~80 % of the sanitized pass's time (43 minutes of CI for ~5 minutes of
# testing). Every program also passes whole (all cases in one process), which is stronger: no case
# may leak global state (thread count, dispatch modes, allocator settings) into the next.
# A failing shard's output names the failed cases; run one with
#   build/release/kiln_ops_tests --gtest_filter='Suite.Case'
# -DKILN_TEST_PER_CASE=ON restores one CTest test per case (`ctest -R Suite.Case`).
option(KILN_TEST_PER_CASE "Register every GoogleTest case as its own CTest test" OFF)

function(kiln_add_gtest target)
  cmake_parse_arguments(arg "" "SHARDS;TIMEOUT" "LABELS" ${ARGN})
  if(NOT arg_SHARDS)
    set(arg_SHARDS 2)
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 1500)
  endif()
  if(KILN_TEST_PER_CASE)
    gtest_discover_tests(${target} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${arg_LABELS}"
                         TIMEOUT ${arg_TIMEOUT})
    return()
  endif()
  math(EXPR last "${arg_SHARDS} - 1")
  foreach(index RANGE ${last})
    math(EXPR number "${index} + 1")
    set(name "${target}[${number}/${arg_SHARDS}]")
    add_test(NAME ${name} COMMAND $<TARGET_FILE:${target}>)
    set_tests_properties(
      ${name} PROPERTIES LABELS "${arg_LABELS}" TIMEOUT ${arg_TIMEOUT}
      ENVIRONMENT "GTEST_TOTAL_SHARDS=${arg_SHARDS};GTEST_SHARD_INDEX=${index}")
  endforeach()
endfunction()
