# Finds Node's HTTP parser (Debian: libhttp-parser-dev), which ships neither a CMake package nor a
# pkg-config file. Defines HttpParser::http_parser and HttpParser_VERSION.
find_path(HttpParser_INCLUDE_DIR NAMES http_parser.h)
find_library(HttpParser_LIBRARY NAMES http_parser)
if(HttpParser_INCLUDE_DIR AND EXISTS "${HttpParser_INCLUDE_DIR}/http_parser.h")
  file(STRINGS "${HttpParser_INCLUDE_DIR}/http_parser.h" _hp_ver REGEX "^#define HTTP_PARSER_VERSION_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3" HttpParser_VERSION "${_hp_ver}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(HttpParser
  REQUIRED_VARS HttpParser_LIBRARY HttpParser_INCLUDE_DIR
  VERSION_VAR HttpParser_VERSION)
if(HttpParser_FOUND AND NOT TARGET HttpParser::http_parser)
  add_library(HttpParser::http_parser UNKNOWN IMPORTED)
  set_target_properties(HttpParser::http_parser PROPERTIES
    IMPORTED_LOCATION "${HttpParser_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${HttpParser_INCLUDE_DIR}")
endif()
mark_as_advanced(HttpParser_INCLUDE_DIR HttpParser_LIBRARY)
