# Shared by scripts/run and scripts/test (source it; it defines functions and runs nothing).
#
# Installing is explicit and idempotent: a machine whose stable toolchain already is the
# pinned version has rustup link the pinned name to it and install nothing, so the targets and
# components that rust-toolchain.toml lists would never be added by `rustup show`.

# A part of a script starting, with the time since the script started (where the time goes).
step() { printf '\n--> [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

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

# Every Debian package the scripts use is listed here, and nowhere else.
#
# What the workspace needs to build and lint at all: the broker plugin's bindgen reads the
# plugin API's headers (mosquitto-dev) and mosquitto.h (libmosquitto-dev) with libclang.
build_packages() {
  apt_install mosquitto-dev libmosquitto-dev libclang1-14 libclang-common-14-dev
}

# Everything the tests use, installed at once before the first build:
#   mosquitto: the test broker (libmosquitto-dev also serves the C bring-your-own-MQTT tests)
#   valgrind: mosquitto with the plugin, and the C tests, under valgrind
#   redis-server: the Redis store's tests
#   faketime: libfaketime, which jumps a node's wall clock in the nemesis test (cli/tests/nemesis.rs)
#   iptables: the nemesis cuts one node's link to one of Sentinel's or a cluster's servers (a rule
#     dropping that node's packets, matched by the user it runs as; so the tests run as root)
#   pkg-config, cmake: the C library installed and found as users find it
#   gcc-*, libc6-dev-*-cross, qemu-user: the C library's aarch64 and armv7 builds
#   chromium, fonts-dejavu-core: the dashboard test's headless browser
#   openssl: the TLS tests' certificates
#   openjdk-17-jdk-headless, maven: the AWS IoT Device SDK for Java (interop/aws/java): Maven
#     fetches the SDK's jars, Java's source launcher runs the device (it needs the JDK's compiler)
system_packages() {
  build_packages
  apt_install mosquitto valgrind redis-server faketime iptables pkg-config cmake openssl openjdk-17-jdk-headless maven \
    gcc-aarch64-linux-gnu libc6-dev-arm64-cross gcc-arm-linux-gnueabihf libc6-dev-armhf-cross qemu-user \
    chromium fonts-dejavu-core
}

# What scripts/test-dist needs beyond system_packages: musl-gcc (a CPython built against musl
# for the musllinux wheel), file, curl; and Debian's arm64 package lists (arm64 CPython is
# downloaded and unpacked for qemu-user, not installed).
dist_packages() {
  apt_install musl-tools file curl ca-certificates
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    as_root dpkg --add-architecture arm64
    as_root apt-get update -qq
  fi
}

# What scripts/test-deploy needs: promtool (Debian's prometheus package: the alert rules'
# check and unit test, the metrics endpoint's lint), curl (the live /metrics), systemd-analyze
# (the unit's check; part of systemd, present on Debian).
deploy_packages() {
  apt_install prometheus curl systemd
}

# What the container images and their tests need: podman (runc as its runtime: the default crun
# cannot set the open-files limit here), mmdebstrap (Debian root file systems, the images'
# bases: no registry is reachable), mosquitto_rr (mosquitto-clients: the device of the compose
# tests' job round trip), qemu-user (the arm64 image's binary). podman-compose is pip's, in a
# virtual environment of scripts/test-images.
container_packages() {
  # Named although podman depends on or recommends them: without netavark and aardvark-dns
  # apt may pick the CNI plugins for podman's network stack, whose networks have no DNS
  # (compose's services then cannot find each other by name); without catatonit (recommended
  # only) `podman kube play` cannot build its pod's pause image; netavark runs iptables for
  # every container with a network (a `RUN` step of a build too) and depends on nothing that
  # brings it: without it "netavark: No such file or directory". All seen on this machine.
  apt_install podman runc netavark aardvark-dns iptables catatonit mmdebstrap mosquitto-clients qemu-user
}

# podman's configuration for machines like the test machine, in target/ and by CONTAINERS_CONF:
# crun (the default runtime) fails there on setrlimit (no CAP_SYS_RESOURCE) and on hybrid
# cgroups; runc works, with default ulimits within the machine's (a --ulimit on the command line
# replaces the whole default list).
container_config() {
  mkdir -p target
  cat >target/containers.conf <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
[network]
network_backend = "netavark"
CONF
  CONTAINERS_CONF=$PWD/target/containers.conf
  export CONTAINERS_CONF
}

# A Debian 12 image made locally: a minimal root file system with the packages named (no
# documentation, no package lists), imported under NAME. Usage: debian_image WORK NAME PACKAGE...
debian_image() {
  local work=$1 name=$2 packages
  shift 2
  packages=$(IFS=,; echo "$*")
  mmdebstrap --quiet --variant=minbase --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm "$work/rootfs.tar" http://deb.debian.org/debian
  podman import -q --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$work/rootfs.tar" "$name" >/dev/null
  rm -f "$work/rootfs.tar"
}

# The Helm chart's checks (scripts/test-deploy), installed under target/ at pinned versions:
# helm and kubeconform built with `go install` (no binary downloads), and the Kubernetes
# schemas of the PyPI package kubernetes-validate, made standalone for kubeconform offline
# (scripts/k8s-schemas.py). Sets HELM, KUBECONFORM and K8S_PYTHON (a Python with PyYAML).
HELM_VERSION=v3.22.0
KUBECONFORM_VERSION=v0.8.0
KUBERNETES_VALIDATE_VERSION=1.37.0
chart_tools() {
  ensure_go
  local tools=$PWD/target/tools
  HELM=$tools/helm
  KUBECONFORM=$tools/kubeconform
  K8S_PYTHON=$PWD/target/k8s-venv/bin/python
  # The module version `go install` built (the binaries' own --version says less).
  built() { go version -m "$1" 2>/dev/null | awk '$1 == "mod" { print $3 }'; }
  if [ "$(built "$HELM")" != "$HELM_VERSION" ]; then
    echo "building helm $HELM_VERSION (go install; a few minutes the first time)"
    GOBIN=$tools go install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  fi
  if [ "$(built "$KUBECONFORM")" != "$KUBECONFORM_VERSION" ]; then
    GOBIN=$tools go install "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
  fi
  if ! "$K8S_PYTHON" -m pip show kubernetes-validate 2>/dev/null | grep -qx "Version: $KUBERNETES_VALIDATE_VERSION"; then
    python3 -m venv target/k8s-venv
    "$K8S_PYTHON" -m pip install --quiet --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
  fi
  export HELM KUBECONFORM K8S_PYTHON
}

# A TCP port free on this machine's loopback now (for a broker, Redis or metrics of a test).
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# What `bash scripts/run` needs: the broker.
run_packages() {
  apt_install mosquitto
}

# The list under `key = [...]` in rust-toolchain.toml, one name a line.
toolchain_list() {
  sed -n "s/^$1 *= *\[\(.*\)\]/\1/p" rust-toolchain.toml | tr -d '" ' | tr ',' '\n' | sed '/^$/d'
}

# The toolchain rust-toolchain.toml pins.
pinned_channel() { sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml; }

# The pinned stable toolchain with every component and target rust-toolchain.toml lists.
rust_toolchain() {
  local channel
  channel=$(pinned_channel)
  rustup toolchain install "$channel" --profile minimal --no-self-update
  # shellcheck disable=SC2046
  rustup component add --toolchain "$channel" $(toolchain_list components)
  # shellcheck disable=SC2046
  rustup target add --toolchain "$channel" $(toolchain_list targets)
}

# Whether `go` is Go 1.21 or newer (Mochi MQTT's go.mod asks for it).
go_ok() {
  command -v go >/dev/null &&
    go version | awk '{ split(substr($3, 3), v, "."); exit !(v[1] > 1 || (v[1] == 1 && v[2] >= 21)) }'
}

# Go, for Mochi MQTT (the second broker the tests run on). Machines of this project's kind
# have it in /usr/local/go; elsewhere Debian's package, and when that is older than 1.21, a
# newer toolchain from the Go module proxy (a module like any other there).
ensure_go() {
  export PATH="$PATH:/usr/local/go/bin"
  go_ok && return 0
  apt_install golang-go ca-certificates
  go_ok && return 0
  local dir
  dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json golang.org/toolchain@v0.0.1-go1.22.12.linux-amd64 |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  export PATH="$dir/bin:$PATH"
  go_ok || { echo "error: Go 1.21 or newer is needed to build Mochi MQTT (cli/tests/mochi)" >&2; return 1; }
}
