#!/bin/bash
# SANDBOX STAND-IN for the AWS EFA installer (tritonfleet sandbox; installs no drivers or libraries).
# Accepts the real installer's common flags and, with -y/--yes, installs marker files under
# /opt/amazon/efa (fi_info stand-in) and /opt/amazon/efa_installed_packages.
# TRITONFLEET_SANDBOX_ROOT relocates the install root (unit tests).
set -euo pipefail
EFA_VERSION="@@EFA_VERSION@@"
ROOT="${TRITONFLEET_SANDBOX_ROOT:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
yes=0; minimal=0; skip_kmod=0; skip_limit_conf=0
usage() {
    cat <<USAGE
Usage: efa_installer.sh [options]
  -y, --yes              Install without prompting (SANDBOX STAND-IN: required)
  -m, --minimal          Minimal installation (kernel module + rdma-core only)
  -k, --skip-kmod        Skip the EFA kernel module
  -l, --skip-limit-conf  Skip the memlock limit configuration
  -d, --debug-packages   Ignored
  -h, --help             Show this help
USAGE
}
while [ $# -gt 0 ]; do
    case "$1" in
        -y|--yes) yes=1 ;;
        -m|--minimal) minimal=1 ;;
        -k|--skip-kmod) skip_kmod=1 ;;
        -l|--skip-limit-conf) skip_limit_conf=1 ;;
        -d|--debug-packages|-n|--no-verify|-g|--enable-gdr) ;;
        -h|--help) usage; exit 0 ;;
        *) echo "Error: unknown option $1" >&2; usage >&2; exit 1 ;;
    esac
    shift
done
if [ "$(id -u)" != 0 ] && [ -z "$ROOT" ]; then
    echo "Error: efa_installer.sh must be run as root" >&2
    exit 1
fi
if [ "$yes" != 1 ]; then
    if [ -t 0 ]; then
        read -r -p "Do you want to continue? [y/n] " answer
        case "$answer" in y|Y|yes) ;; *) echo "Aborting."; exit 1 ;; esac
    else
        echo "Error: not running interactively; pass -y/--yes to install" >&2
        exit 1
    fi
fi
echo "== Installing EFA ${EFA_VERSION} (tritonfleet SANDBOX STAND-IN: marker files only) =="
install -d -m 0755 "$ROOT/opt/amazon/efa/bin" "$ROOT/opt/amazon/efa/share/doc"
install -m 0755 "$HERE/stand-in/fi_info" "$ROOT/opt/amazon/efa/bin/fi_info"
echo "installed $ROOT/opt/amazon/efa/bin/fi_info"
echo "$EFA_VERSION" > "$ROOT/opt/amazon/efa/share/doc/VERSION"
pkgs="libfabric-aws rdma-core ibverbs-utils"
[ "$minimal" = 1 ] || pkgs="$pkgs openmpi40-aws openmpi50-aws"
[ "$skip_kmod" = 1 ] || pkgs="efa $pkgs"
printf '%s\n' $pkgs > "$ROOT/opt/amazon/efa_installed_packages"
echo "installed $ROOT/opt/amazon/efa_installed_packages ($(echo $pkgs | wc -w) simulated packages)"
if [ "$skip_limit_conf" != 1 ]; then
    install -d -m 0755 "$ROOT/etc/security/limits.d"
    printf '* hard memlock unlimited\n* soft memlock unlimited\n' > "$ROOT/etc/security/limits.d/efa.conf"
    echo "installed $ROOT/etc/security/limits.d/efa.conf"
fi
echo "===================================================="
echo "EFA installation complete (SANDBOX STAND-IN)."
echo "- Please logout/login to complete the installation."
echo "- Libfabric was installed in /opt/amazon/efa"
echo "===================================================="
