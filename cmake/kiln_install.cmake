# Note [installed kiln]: `cmake --install BUILD --prefix P` installs what an outside project needs
# to build against kiln with find_package(kiln) and link kiln::kiln:
#   P/lib/libkiln.so                       the library (its private dependencies, oneDNN, libzip,
#                                          sleef, libdw and the image codecs, are linked into it);
#   P/include/kiln/...                     every header, laid out as in the source tree, so code
#                                          includes "kiln/kiln.h" as kiln's own does;
#   P/lib/cmake/kiln/kilnConfig.cmake      finds kiln's public dependencies (fmt, nlohmann_json,
#                                          OpenMP: its headers use them) and imports kiln::kiln;
#   P/lib/cmake/kiln/kilnConfigVersion.cmake  0.x releases are compatible within a minor version;
#   P/bin/kiln                             the command line, finding libkiln.so through its RPATH.
# examples/deploy/ is such an outside project; its check (examples/deploy/check_install.sh, the
# CTest test kiln_install_deploy) installs into a temporary prefix and builds it there.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set_target_properties(kiln PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
install(TARGETS kiln EXPORT kilnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/kiln/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kiln
        FILES_MATCHING PATTERN "*.h")
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kilnConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
