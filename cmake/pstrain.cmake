# Small helpers that keep the per-folder CMake files short.
#
#   pstrain_cc_library(NAME SRCS a.cc b.cc DEPS lib1 lib2)
#   pstrain_cc_binary(NAME SRCS main.cc DEPS lib1)          -> build/bin/NAME
#   pstrain_cc_test(NAME SRCS x_test.cc DEPS lib1 LABELS unit [TIMEOUT s]
#                   [PARTS part1 'Suite.Case1:Suite.Case2*' part2 'Other.*' ...])
#
# PARTS runs one test program as several ctest tests, NAME.part1, NAME.part2, ... and NAME.rest
# (every case no part names), each with its own gtest filter and timeout, so that `ctest -j` can
# spread a long program's cases over the cores and no one test holds the run at its end. Cases
# that share a memoized reference run belong in one part. A part whose filter selects no case
# fails (a renamed case would otherwise leave it passing with nothing run), and a part's
# --gtest_filter takes the place of a GTEST_FILTER in the environment.
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
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS;LABELS;PARTS" ${ARGN})
  add_executable(${NAME} ${ARG_SRCS})
  target_include_directories(${NAME} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${NAME} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  set_target_properties(${NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set(tests)
  if(ARG_PARTS)
    list(LENGTH ARG_PARTS n)
    math(EXPR odd "${n} % 2")
    if(odd)
      message(FATAL_ERROR "pstrain_cc_test(${NAME}): PARTS takes pairs of a part's name and its gtest filter")
    endif()
    set(named)
    while(ARG_PARTS)
      list(POP_FRONT ARG_PARTS part filter)
      add_test(NAME ${NAME}.${part} COMMAND ${NAME} --gtest_filter=${filter})
      list(APPEND tests ${NAME}.${part})
      list(APPEND named ${filter})
    endwhile()
    list(JOIN named ":" named)
    add_test(NAME ${NAME}.rest COMMAND ${NAME} --gtest_filter=*-${named})
    list(APPEND tests ${NAME}.rest)
    set_tests_properties(${tests} PROPERTIES FAIL_REGULAR_EXPRESSION "Running 0 tests from")
  else()
    add_test(NAME ${NAME} COMMAND ${NAME})
    set(tests ${NAME})
  endif()
  set_tests_properties(${tests} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "PSTRAIN_BIN_DIR=${PROJECT_BINARY_DIR}/bin")
endfunction()

# pstrain_assert_no_grpc(TARGET...): stops the configure step when a target links gRPC, directly
# or through any library it depends on, naming the chain that brings it in. For the roles' cores,
# which must stay free of the transport (docs/DESIGN.md, "Layers").
function(pstrain_assert_no_grpc)
  foreach(root ${ARGN})
    set(seen)
    set(queue "${root}")
    set(via_${root} "${root}")
    while(queue)
      list(POP_FRONT queue t)
      if(t IN_LIST seen)
        continue()
      endif()
      list(APPEND seen ${t})
      if(t MATCHES "^gRPC::" OR t MATCHES "^grpc")
        message(FATAL_ERROR "${root} must not link gRPC, but it does: ${via_${t}}")
      endif()
      if(NOT TARGET ${t})
        # A pstrain_ name that is no target would link as a plain -l flag, unchecked.
        if(t MATCHES "^pstrain_")
          message(FATAL_ERROR "${root} depends on ${t}, which is no target: ${via_${t}}")
        endif()
        continue()
      endif()
      get_target_property(libs ${t} INTERFACE_LINK_LIBRARIES)
      if(NOT libs)
        continue()
      endif()
      foreach(lib ${libs})
        # $<LINK_ONLY:x> and similar wrappers name a library too.
        string(REGEX REPLACE "^\\$<[A-Z_]+:(.*)>$" "\\1" lib "${lib}")
        if(lib STREQUAL "" OR lib MATCHES "^\\$<")
          continue()
        endif()
        if(NOT DEFINED via_${lib})
          set(via_${lib} "${via_${t}} -> ${lib}")
        endif()
        list(APPEND queue ${lib})
      endforeach()
    endwhile()
  endforeach()
endfunction()
