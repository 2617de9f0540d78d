# Finds standalone Asio (Debian: libasio-dev), which ships no CMake package of its own.
# Defines Asio::asio (header-only, ASIO_STANDALONE) and Asio_VERSION.
find_path(Asio_INCLUDE_DIR NAMES asio.hpp PATH_SUFFIXES include)
if(Asio_INCLUDE_DIR AND EXISTS "${Asio_INCLUDE_DIR}/asio/version.hpp")
  file(STRINGS "${Asio_INCLUDE_DIR}/asio/version.hpp" _asio_ver REGEX "^#define ASIO_VERSION [0-9]+")
  string(REGEX REPLACE "^#define ASIO_VERSION ([0-9]+).*" "\\1" _asio_num "${_asio_ver}")
  math(EXPR _asio_major "${_asio_num} / 100000")
  math(EXPR _asio_minor "${_asio_num} / 100 % 1000")
  math(EXPR _asio_patch "${_asio_num} % 100")
  set(Asio_VERSION "${_asio_major}.${_asio_minor}.${_asio_patch}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Asio REQUIRED_VARS Asio_INCLUDE_DIR VERSION_VAR Asio_VERSION)
if(Asio_FOUND AND NOT TARGET Asio::asio)
  add_library(Asio::asio INTERFACE IMPORTED)
  set_target_properties(Asio::asio PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${Asio_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS "ASIO_STANDALONE;ASIO_NO_DEPRECATED")
endif()
mark_as_advanced(Asio_INCLUDE_DIR)
