#!/usr/bin/env bash
# Fetch Debian's firmware-amd-graphics (component non-free-firmware, suite bookworm-backports) and unpack
# its amdgpu directory, using a private apt configuration: own sources.list, state, cache and preferences
# under the cache directory; the machine's own apt config, lists and cache are never touched.
# Idempotent: a finished fetch is reused. Prints the firmware directory (the one holding gc_11_0_0_pfp.bin).
#
#   AMDQ_FIRMWARE_CACHE  cache directory (default ~/.cache/amdq); firmware lands in $dir/firmware/amdgpu
#   AMDQ_APT_MIRROR      Debian mirror URI (default http://deb.debian.org/debian)
#   AMDQ_APT_SUITE       suite (default bookworm-backports)
#   AMDQ_APT_KEYRING     keyring for signed-by (default /usr/share/keyrings/debian-archive-keyring.gpg)
#
# The runtime (amdq.am.firmware) looks in AMDQ_FIRMWARE_PATH, then /lib/firmware/amdgpu, then this
# directory.
set -euo pipefail

root="${AMDQ_FIRMWARE_CACHE:-$HOME/.cache/amdq}"
fw="$root/firmware"
out="$fw/amdgpu"
if [[ -f "$fw/SOURCE" && -d "$out" ]] && compgen -G "$out/gc_11_0_0_*" >/dev/null; then
  echo "$out"
  exit 0
fi

mirror="${AMDQ_APT_MIRROR:-http://deb.debian.org/debian}"
suite="${AMDQ_APT_SUITE:-bookworm-backports}"
keyring="${AMDQ_APT_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}"
pkg=firmware-amd-graphics
[[ -r "$keyring" ]] || { echo "fetch_firmware: keyring $keyring not found (install debian-archive-keyring)" >&2; exit 1; }

apt="$root/apt"
mkdir -p "$apt/state/lists/partial" "$apt/cache/archives/partial" "$apt/etc/sources.list.d" \
         "$apt/etc/preferences.d" "$apt/etc/trusted.gpg.d"
echo "deb [signed-by=$keyring] $mirror $suite non-free-firmware" >"$apt/etc/sources.list"
: >"$apt/etc/preferences"
opts=(-o "Dir::State=$apt/state" -o "Dir::State::status=/dev/null" -o "Dir::Cache=$apt/cache"
      -o "Dir::Etc::SourceList=$apt/etc/sources.list" -o "Dir::Etc::SourceParts=$apt/etc/sources.list.d"
      -o "Dir::Etc::Preferences=$apt/etc/preferences" -o "Dir::Etc::PreferencesParts=$apt/etc/preferences.d"
      -o "Dir::Etc::Trusted=$keyring" -o "Dir::Etc::TrustedParts=$apt/etc/trusted.gpg.d"
      -o "APT::Architecture=$(dpkg --print-architecture)" -o "APT::Sandbox::User=root")
apt-get "${opts[@]}" -qq update >&2

ver="$(apt-cache "${opts[@]}" show "$pkg" 2>/dev/null | awk '/^Version:/ {print $2; exit}')"
[[ -n "$ver" ]] || { echo "fetch_firmware: $pkg not found in $mirror $suite non-free-firmware" >&2; exit 1; }

tmp="$(mktemp -d "$root/tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# apt-get download checks the .deb against the signed Release/Packages hashes.
(cd "$tmp" && apt-get "${opts[@]}" -qq download "$pkg=$ver" >&2)
deb="$(ls "$tmp"/*.deb)"
dpkg-deb -x "$deb" "$tmp/root"
src="$(find "$tmp/root" -type d -path '*/firmware/amdgpu' | head -n1)"
[[ -n "$src" ]] && compgen -G "$src/gc_11_0_0_*" >/dev/null || { echo "fetch_firmware: no amdgpu firmware in $deb" >&2; exit 1; }
mkdir -p "$fw"
rm -rf "$out"
mv "$src" "$out"
printf '%s %s %s\n%s_%s\nsha256 %s\n' "$mirror" "$suite" non-free-firmware "$pkg" "$ver" \
  "$(sha256sum "$deb" | cut -d' ' -f1)" >"$fw/SOURCE"
echo "$out"
