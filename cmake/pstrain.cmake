# Small helpers that keep the per-folder CMake files short.
#
#   pstrain_cc_library(NAME SRCS a.cc b.cc DEPS lib1 lib2)
#   pstrain_cc_binary(NAME SRCS main.cc DEPS lib1)          -> build/bin/NAME
#   pstrain_cc_test(NAME SRCS x_test.cc DEPS lib1 LABELS unit [TIMEOUT s])
#
# Includes are rooted at the repository top ("server/shard.h").

function(pstrain_cc_library NAME)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${NAME} STATIC ${ARG_SRCS})
  target_include_directories(${NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${NAME} PUBLIC ${ARG_DEPS})
endfunction()

function(pstrain_cc_binary NAME)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${NAME} ${ARG_SRCS})
  target_include_directories(${NAME} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${NAME} PRIVATE ${ARG_DEPS})
endfunction()

function(pstrain_cc_test NAME)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${NAME} ${ARG_SRCS})
  target_include_directories(${NAME} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${NAME} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  set_target_properties(${NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  add_test(NAME ${NAME} COMMAND ${NAME})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set_tests_properties(${NAME} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "PSTRAIN_BIN_DIR=${PROJECT_BINARY_DIR}/bin")
endfunction()
