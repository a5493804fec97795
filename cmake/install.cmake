# What `cmake --install` (and the Debian package, cmake/package.cmake) puts where:
#   bin/idem                                   the binary
#   /etc/idem/*.toml                           one commented config per daemon (deploy/config/)
#   /etc/idem/consume/                         one NAME.toml per idem-consume@NAME
#   /lib/systemd/system/idem-*.service         the units (deploy/systemd/)
#   share/idem/sql/                            the schema and migrations (compiled into the binary
#                                              as well; these are for a team's own migration tool)
#   share/idem/prometheus, share/idem/grafana  the alert rules and the dashboard
#   share/doc/idem/                            the operator's and the daemons' docs
#   share/man/man1/idem.1.gz                   the man page (cmake/package.cmake)
# The config and unit paths are absolute: they are where systemd and the units look, whatever
# the prefix (a `cmake --install --prefix /tmp/x` stages them under DESTDIR only).
include(GNUInstallDirs)

# The install target builds only what it installs, not the tests and benchmarks.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

install(TARGETS idem RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

file(GLOB IDEM_CONFIG_FILES ${PROJECT_SOURCE_DIR}/deploy/config/*.toml)
install(FILES ${IDEM_CONFIG_FILES} DESTINATION /etc/idem)
install(DIRECTORY DESTINATION /etc/idem/consume)

file(GLOB IDEM_UNIT_FILES ${PROJECT_SOURCE_DIR}/deploy/systemd/*.service)
set(IDEM_SYSTEMD_UNIT_DIR /lib/systemd/system CACHE PATH "Where the systemd units are installed")
install(FILES ${IDEM_UNIT_FILES} DESTINATION ${IDEM_SYSTEMD_UNIT_DIR})

install(FILES sql/README.md sql/sql_files.cmake DESTINATION ${CMAKE_INSTALL_DATADIR}/idem/sql)
install(DIRECTORY sql/schema sql/migrations DESTINATION ${CMAKE_INSTALL_DATADIR}/idem/sql)
install(FILES deploy/prometheus/idem-alerts.yml DESTINATION ${CMAKE_INSTALL_DATADIR}/idem/prometheus)
install(FILES deploy/grafana/idem-dashboard.json DESTINATION ${CMAKE_INSTALL_DATADIR}/idem/grafana)

install(FILES README.md docs/operations.md docs/gateway.md docs/emit.md docs/worker.md
  docs/postgresql.md docs/redis.md docs/stores.md docs/client.md
  DESTINATION ${CMAKE_INSTALL_DOCDIR})
