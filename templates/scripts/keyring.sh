#!/bin/sh
# Install an OpenPGP key for apt's signed-by= (binary keyring) or rpm (armored), after checking that the
# download holds exactly one key with the expected fingerprint. Nothing is written on a mismatch.
# usage: keyring.sh SRC_URL DEST FINGERPRINT ARMORED(0|1)
set -eu
# include: lib-lock.sh
tf_lock keyring.sh
src=$1 dest=$2 want=$3 armored=$4
umask 022
tmp=$(mktemp -d)
trap 'gpgconf --kill gpg-agent 2>/dev/null; rm -rf "$tmp"' EXIT
export GNUPGHOME="$tmp/gnupg"
mkdir -m 700 "$GNUPGHOME"
curl -fsSL --retry 3 -o "$tmp/key" "$src" || { echo "ERROR: cannot download key $src" >&2; exit 1; }
n=$(gpg --batch --show-keys --with-colons "$tmp/key" 2>/dev/null | grep -c '^pub' || true)
if [ "$n" != 1 ]; then
  echo "ERROR: $src holds $n keys, expected exactly one; nothing was installed" >&2
  exit 1
fi
got=$(gpg --batch --show-keys --with-colons "$tmp/key" 2>/dev/null | awk -F: '/^fpr/{print $10; exit}')
if [ "$got" != "$want" ]; then
  echo "ERROR: key fingerprint mismatch for $src: expected $want, got ${got:-no key}; nothing was installed" \
       "(check the key source, or the expected fingerprint in host data)" >&2
  exit 1
fi
mkdir -p "$(dirname "$dest")"
if [ "$armored" = 1 ]; then
  cp "$tmp/key" "$tmp/keyring"
else
  gpg --batch --yes --dearmor -o "$tmp/keyring" < "$tmp/key" 2>/dev/null || cp "$tmp/key" "$tmp/keyring"
fi
install -m 644 "$tmp/keyring" "$dest"
