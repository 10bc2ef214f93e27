# find_package(mqstore CONFIG): libmqstore installed by `make -C bindings-c install` or unpacked
# from a release archive (mqstore-c-VERSION-TARGET.tar.gz). Relocatable: the prefix is where
# this file lies (PREFIX/lib/cmake/mqstore).
#
# Imported targets, each with the include directory and what it links:
#   mqstore::mqstore         the connected layer (and the bring-your-own-MQTT calls), shared
#   mqstore::mqstore_static  the same, static (brings -lpthread -ldl -lm)
#   mqstore::byo             the bring-your-own-MQTT layer alone (no runtime, no threads), shared
#   mqstore::byo_static      the same, static
# A target is defined when its library is installed (a BYO=1 install has only the byo ones).
get_filename_component(_mqstore_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(mqstore_INCLUDE_DIRS "${_mqstore_prefix}/include")
include(CMakeFindDependencyMacro)
find_dependency(Threads)

function(_mqstore_import name library private_libs)
  if(TARGET mqstore::${name})
    return()
  endif()
  if(EXISTS "${_mqstore_prefix}/lib/lib${library}.so.0")
    add_library(mqstore::${name} SHARED IMPORTED)
    set_target_properties(mqstore::${name} PROPERTIES
      IMPORTED_LOCATION "${_mqstore_prefix}/lib/lib${library}.so.0"
      IMPORTED_SONAME "lib${library}.so.0"
      INTERFACE_INCLUDE_DIRECTORIES "${_mqstore_prefix}/include")
  endif()
  if(EXISTS "${_mqstore_prefix}/lib/lib${library}.a")
    add_library(mqstore::${name}_static STATIC IMPORTED)
    set_target_properties(mqstore::${name}_static PROPERTIES
      IMPORTED_LOCATION "${_mqstore_prefix}/lib/lib${library}.a"
      INTERFACE_INCLUDE_DIRECTORIES "${_mqstore_prefix}/include"
      INTERFACE_LINK_LIBRARIES "${private_libs}")
  endif()
endfunction()

_mqstore_import(mqstore mqstore "Threads::Threads;${CMAKE_DL_LIBS};m")
_mqstore_import(byo mqstore_byo "${CMAKE_DL_LIBS};m")

if(NOT TARGET mqstore::mqstore AND NOT TARGET mqstore::mqstore_static
   AND NOT TARGET mqstore::byo AND NOT TARGET mqstore::byo_static)
  set(mqstore_FOUND FALSE)
  set(mqstore_NOT_FOUND_MESSAGE "no libmqstore or libmqstore_byo under ${_mqstore_prefix}/lib")
endif()
