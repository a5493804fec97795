# Sourced by the benchmarks: installs, with apt-get, the Debian packages of the tools a
# benchmark runs that this machine lacks (the test command's own dependencies come from
# scripts/install-deps.sh).
#
#   install_tools WHO COMMAND[=PACKAGE] ...
#       for each COMMAND found neither on PATH nor in /usr/sbin, installs PACKAGE (default: the
#       command's name), saying so on standard error as WHO; with sudo when not root.
install_tools() {
  local who=$1 spec command package need=() sudo_cmd=()
  shift
  for spec in "$@"; do
    command=${spec%%=*}
    package=${spec#*=}
    command -v "$command" >/dev/null || [[ -x /usr/sbin/$command ]] || need+=("$package")
  done
  ((${#need[@]})) || return 0
  echo "$who: installing ${need[*]}" >&2
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${need[@]}" >/dev/null
}
