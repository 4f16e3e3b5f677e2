# hopattn_detect_gpu(<found_var> <what_var>): whether device 0 of this machine is a GPU the sm_90a
# kernels run on (a Hopper), by compiling and running cmake/gpu_query.cpp against the CUDA runtime
# (CUDA::cudart). <what_var> gets the device's name, or why there is none ("no GPU found").
# Run at every configure: a GPU may come or go between configures of one build tree.
function(hopattn_detect_gpu found_var what_var)
  if(CMAKE_CROSSCOMPILING)
    set(${found_var} ON PARENT_SCOPE)
    set(${what_var} "cross-compiling: a GPU assumed on the target" PARENT_SCOPE)
    return()
  endif()
  try_run(query_rc query_built ${CMAKE_BINARY_DIR}/_gpu_query ${PROJECT_SOURCE_DIR}/cmake/gpu_query.cpp
    LINK_LIBRARIES CUDA::cudart
    COMPILE_OUTPUT_VARIABLE query_log
    RUN_OUTPUT_VARIABLE query_out)
  if(NOT query_built)
    set(${found_var} OFF PARENT_SCOPE)
    set(${what_var} "the device query did not compile" PARENT_SCOPE)
    message(STATUS "hopattn: the device query (cmake/gpu_query.cpp) did not compile:\n${query_log}")
  elseif(query_rc EQUAL 0)
    set(${found_var} ON PARENT_SCOPE)
    set(${what_var} "${query_out}" PARENT_SCOPE)
  elseif(query_out STREQUAL "")
    set(${found_var} OFF PARENT_SCOPE)
    set(${what_var} "no usable GPU: the device query failed (${query_rc})" PARENT_SCOPE)
  else()
    set(${found_var} OFF PARENT_SCOPE)
    set(${what_var} "${query_out}" PARENT_SCOPE)
  endif()
  unset(query_rc CACHE)
  unset(query_built CACHE)
endfunction()
