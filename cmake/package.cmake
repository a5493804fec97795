# The Debian package (scripts/package.sh): idem_<version>_amd64.deb from the install rules
# (cmake/install.cmake). Depends come from the binary's libraries (dpkg-shlibdeps); the
# maintainer scripts (deploy/debian/) create the user idem and clean up on purge; the files
# under /etc/idem are conffiles.
set(IDEM_PACKAGE_MAINTAINER "idem maintainers <idem@example.org>" CACHE STRING
  "Maintainer field of the Debian package")
set(IDEM_DEB_VERSION ${PROJECT_VERSION})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME idem)
set(CPACK_PACKAGE_VERSION ${IDEM_DEB_VERSION})
set(CPACK_PACKAGE_CONTACT ${IDEM_PACKAGE_MAINTAINER})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "exactly-once effects for systems built on at-least-once delivery")
# The extended description (CPack puts the summary above it and indents each line; an empty
# line becomes Debian's " ." paragraph break).
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "idem makes running something again safe, in three independent layers:
idem gateway, a reverse proxy giving any HTTP service Idempotency-Key
semantics (SQLite, Redis or PostgreSQL records); idem consume, a NATS
JetStream consumer with an inbox in PostgreSQL; and idem relay, which
publishes a transactional outbox to JetStream.

This package holds the idem binary, systemd units for the three daemons,
a config file for each, the PostgreSQL schema as SQL, Prometheus alert
rules and a Grafana dashboard.")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # idem_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# adduser: the postinst creates the system user.
set(CPACK_DEBIAN_PACKAGE_DEPENDS adduser)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "postgresql-client")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "nats-server, postgresql, redis-server, prometheus")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)

# Conffiles: every file installed under /etc/idem (deploy/config/*.toml).
set(idem_conffiles ${CMAKE_BINARY_DIR}/debian/conffiles)
set(idem_conffiles_text "")
foreach(config IN LISTS IDEM_CONFIG_FILES)
  get_filename_component(name ${config} NAME)
  string(APPEND idem_conffiles_text "/etc/idem/${name}\n")
endforeach()
file(CONFIGURE OUTPUT ${idem_conffiles} CONTENT "${idem_conffiles_text}")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/deploy/debian/postinst
  ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
  ${PROJECT_SOURCE_DIR}/deploy/debian/postrm)
if(IDEM_CONFIG_FILES)
  list(APPEND CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${idem_conffiles})
endif()
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# Debian's copyright file, a changelog and the man page (gzip -9n: no timestamp in the header).
string(TIMESTAMP IDEM_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/changelog.in ${CMAKE_BINARY_DIR}/debian/changelog
  @ONLY)
find_program(IDEM_GZIP gzip REQUIRED)
execute_process(COMMAND ${IDEM_GZIP} -9nf ${CMAKE_BINARY_DIR}/debian/changelog)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/copyright ${CMAKE_BINARY_DIR}/debian/changelog.gz
  DESTINATION ${CMAKE_INSTALL_DOCDIR})
configure_file(${PROJECT_SOURCE_DIR}/deploy/man/idem.1 ${CMAKE_BINARY_DIR}/debian/idem.1 COPYONLY)
execute_process(COMMAND ${IDEM_GZIP} -9nf ${CMAKE_BINARY_DIR}/debian/idem.1)
install(FILES ${CMAKE_BINARY_DIR}/debian/idem.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

include(CPack)
