# Every third-party dependency comes from Debian 12 packages (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(spdlog REQUIRED)

# OpenBLAS, OpenMP flavour: it shares the OpenMP thread pool with our own kernels (no two pools spinning
# against each other on a small machine) and runs single-threaded when called inside a parallel region.
find_path(MWB_OPENBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
find_library(MWB_OPENBLAS_LIBRARY openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
if(NOT MWB_OPENBLAS_INCLUDE_DIR OR NOT MWB_OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found: install libopenblas-openmp-dev (scripts/setup.sh does)")
endif()
add_library(mwb_blas INTERFACE)
target_include_directories(mwb_blas SYSTEM INTERFACE ${MWB_OPENBLAS_INCLUDE_DIR})
target_link_libraries(mwb_blas INTERFACE ${MWB_OPENBLAS_LIBRARY} OpenMP::OpenMP_CXX)
# oneDNN's sgemm for the shapes where it measured faster (kernels/cpu/linear.cpp, docs/performance.md).
# Its OpenMP build runs one thread inside a parallel region, as OpenBLAS does.
if(MWB_ONEDNN_GEMM)
  find_path(MWB_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h)
  find_library(MWB_DNNL_LIBRARY dnnl)
  if(NOT MWB_DNNL_INCLUDE_DIR OR NOT MWB_DNNL_LIBRARY)
    message(FATAL_ERROR "MWB_ONEDNN_GEMM=ON needs oneDNN: install libdnnl-dev (scripts/setup.sh does)")
  endif()
  target_include_directories(mwb_blas SYSTEM INTERFACE ${MWB_DNNL_INCLUDE_DIR})
  target_link_libraries(mwb_blas INTERFACE ${MWB_DNNL_LIBRARY})
endif()

find_path(MWB_XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
find_library(MWB_XXHASH_LIBRARY xxhash REQUIRED)
add_library(mwb_xxhash INTERFACE)
target_include_directories(mwb_xxhash SYSTEM INTERFACE ${MWB_XXHASH_INCLUDE_DIR})
target_link_libraries(mwb_xxhash INTERFACE ${MWB_XXHASH_LIBRARY})

if(MWB_BUILD_TESTS OR MWB_BUILD_APP)
  find_package(Qt6 REQUIRED COMPONENTS Core Test)
endif()

# ---- CUDA: on when nvcc is found (AUTO), never required for the CPU build ------------------------
set(MWB_CUDA_ENABLED OFF)
if(NOT MWB_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # "native" fails without a GPU. CI (no GPU) compiles sm_90 only: the device code is the same for
    # both (no __CUDA_ARCH__ branches), and the second pass is ~140 s of its 2 cores (.ci/run).
    set(MWB_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures to compile for")
    set(CMAKE_CUDA_ARCHITECTURES ${MWB_CUDA_ARCHITECTURES})
    set(CMAKE_CUDA_STANDARD 17)             # CMake 3.25 refuses CUDA20 next to C++20
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)  # else cudart is linked twice
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(MWB_CUDA_ENABLED ON)
  elseif(MWB_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MWB_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
