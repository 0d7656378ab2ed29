# Compiler cache, fast linker, warnings, optional sanitizers.
find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
endif()

find_program(MOLD_PROGRAM mold)
if(MOLD_PROGRAM)
  add_link_options(-fuse-ld=mold)
endif()

# Warnings are errors in the project's own code (GCC, the compiler of the build and the suite).
# Third-party headers come in as system headers and are not checked. Chosen exceptions:
#   maybe-uninitialized         GCC 12 reports false positives inside nlohmann::json iterators;
#   missing-field-initializers  aggregates with default member initializers are initialised by
#                               naming only the fields that differ, on purpose.
add_compile_options(-Wall -Wextra -Wno-missing-field-initializers)
option(CHANGEFLOW_WERROR "Treat warnings in the project's code as errors (GCC)" ON)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-Wno-maybe-uninitialized)
  if(CHANGEFLOW_WERROR)
    add_compile_options(-Werror)
  endif()
endif()

# CHANGEFLOW_SANITIZE=ON builds everything with ASan + UBSan (scripts/test --sanitize).
option(CHANGEFLOW_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
if(CHANGEFLOW_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
