#!/bin/sh
# Install EFA with the AWS installer after verifying its detached GPG signature against a pinned key.
# usage: efa-install.sh INSTALLER_URL SIGNATURE_URL KEY_URL FINGERPRINT
set -eu
# include: lib-lock.sh
tf_lock efa-install.sh
installer=$1 signature=$2 key=$3 want=$4
tmp=$(mktemp -d)
trap 'gpgconf --kill gpg-agent 2>/dev/null; rm -rf "$tmp"' EXIT
cd "$tmp"
export GNUPGHOME="$tmp/gnupg"
mkdir -m 700 "$GNUPGHOME"
curl -fsSL --retry 3 -o installer.tar.gz "$installer"
curl -fsSL --retry 3 -o installer.sig "$signature"
curl -fsSL --retry 3 -o key "$key"
got=$(gpg --batch --show-keys --with-colons key | awk -F: '/^fpr/{print $10; exit}')
[ "$got" = "$want" ] || { echo "ERROR: EFA key fingerprint mismatch: expected $want, got $got" >&2; exit 1; }
gpg --batch --import key 2>/dev/null
gpg --batch --status-fd 1 --verify installer.sig installer.tar.gz 2>/dev/null | grep -q "^\[GNUPG:\] VALIDSIG .*$want" \
  || { echo "ERROR: EFA installer signature does not verify with the pinned key; not installing" >&2; exit 1; }
tar xzf installer.tar.gz
cd aws-efa-installer
./efa_installer.sh -y
