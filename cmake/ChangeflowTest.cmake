# cf_add_test(NAME name SOURCES a.cpp ... LIBS lib ... [LABELS unit|db|e2e|reliability ...]
#             [TIMEOUT seconds] [RESOURCE_LOCK name])
# Builds a GoogleTest executable and registers it with CTest. Tests that need the database read
# the connection settings from CHANGEFLOW_TEST_DB_* (exported by scripts/test).
function(cf_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT;RESOURCE_LOCK" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "CHANGEFLOW_BINARY_DIR=${CMAKE_BINARY_DIR};CHANGEFLOW_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  if(T_RESOURCE_LOCK)
    set_tests_properties(${T_NAME} PROPERTIES RESOURCE_LOCK ${T_RESOURCE_LOCK})
  endif()
endfunction()
