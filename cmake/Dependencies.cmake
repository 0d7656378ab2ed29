# Third-party dependencies. CAF 0.17 and Connector/C++ 1.1 ship no CMake files on Debian,
# so they get IMPORTED targets here.
find_package(Threads REQUIRED)
find_package(Boost 1.74 REQUIRED CONFIG)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
find_package(GTest REQUIRED)
find_package(OpenSSL REQUIRED)

find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
add_library(caf::core SHARED IMPORTED)
set_target_properties(caf::core PROPERTIES
  IMPORTED_LOCATION ${CAF_CORE_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${CAF_INCLUDE_DIR}
  INTERFACE_LINK_LIBRARIES Threads::Threads)

find_path(MYSQLCPPCONN_INCLUDE_DIR cppconn/driver.h REQUIRED)
find_library(MYSQLCPPCONN_LIBRARY mysqlcppconn REQUIRED)
add_library(mysqlcppconn::mysqlcppconn SHARED IMPORTED)
set_target_properties(mysqlcppconn::mysqlcppconn PROPERTIES
  IMPORTED_LOCATION ${MYSQLCPPCONN_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${MYSQLCPPCONN_INCLUDE_DIR}
  INTERFACE_LINK_LIBRARIES Boost::headers)

find_path(JWT_INCLUDE_DIR jwt.h REQUIRED)
find_library(JWT_LIBRARY jwt REQUIRED)
add_library(jwt::jwt SHARED IMPORTED)
set_target_properties(jwt::jwt PROPERTIES
  IMPORTED_LOCATION ${JWT_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${JWT_INCLUDE_DIR})
