# Shared by scripts/run and scripts/test (source it; it defines functions and runs nothing).
#
# Installing is explicit and idempotent: a machine whose stable toolchain already is the
# pinned version has rustup link the pinned name to it and install nothing, so the targets and
# components that rust-toolchain.toml lists would never be added by `rustup show`.

# Runs a command as root (directly when we are root, else through sudo).
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Installs Debian packages that are missing; `apt-get update` only when something is.
apt_install() {
  local missing=()
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# The list under `key = [...]` in rust-toolchain.toml, one name a line.
toolchain_list() {
  sed -n "s/^$1 *= *\[\(.*\)\]/\1/p" rust-toolchain.toml | tr -d '" ' | tr ',' '\n' | sed '/^$/d'
}

# The pinned stable toolchain with every component and target rust-toolchain.toml lists.
rust_toolchain() {
  local channel
  channel=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
  rustup toolchain install "$channel" --profile minimal --no-self-update
  # shellcheck disable=SC2046
  rustup component add --toolchain "$channel" $(toolchain_list components)
  # shellcheck disable=SC2046
  rustup target add --toolchain "$channel" $(toolchain_list targets)
}
