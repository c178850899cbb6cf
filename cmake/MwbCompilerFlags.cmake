# Warnings and code generation shared by every target of the project.
add_library(mwb_warnings INTERFACE)
target_compile_options(mwb_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wpedantic>)
# GCC 12 reports impossible std::string memcpy overlaps at -O3 (GCC bug 105329): a false positive.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(mwb_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
endif()

add_library(mwb_codegen INTERFACE)
if(MWB_NATIVE)
  # The hot loops are written to vectorise; -march=native lets them use AVX-512 where the machine has it.
  target_compile_options(mwb_codegen INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
# Math stays IEEE (no -ffast-math): NaN/Inf detection for loss scaling relies on it, and results must be
# reproducible. errno from libm is never read, so let the compiler drop it.
target_compile_options(mwb_codegen INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fno-math-errno>)

if(MWB_SANITIZE)
  add_compile_options(-fsanitize=${MWB_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${MWB_SANITIZE})
endif()
