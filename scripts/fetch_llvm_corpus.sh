#!/usr/bin/env bash
# Fetch LLVM 19's AMDGPU disassembler test corpus (llvm/test/MC/Disassembler/AMDGPU/*.txt) from Debian's
# llvm-toolchain-19 source package, using a private apt configuration (the machine's own apt config,
# lists and cache are never touched). Idempotent: a finished fetch is reused. Prints the corpus directory.
#
#   AMDQ_LLVM_CORPUS   cache directory (default ~/.cache/amdq/llvm-corpus); the corpus lands in $dir/AMDGPU
#   AMDQ_APT_MIRROR    mirror URI and suites (default: the first Debian archive entry of /etc/apt/sources.list*)
#   AMDQ_APT_SUITES
#
# The orig tarball (~165 MB) is streamed through sha256sum and tar; only the AMDGPU directory is written.
set -euo pipefail

root="${AMDQ_LLVM_CORPUS:-$HOME/.cache/amdq/llvm-corpus}"
out="$root/AMDGPU"
if [[ -f "$root/SOURCE" && -d "$out" ]] && compgen -G "$out/*.txt" >/dev/null; then
  echo "$out"
  exit 0
fi
mkdir -p "$root"

# Mirror and suites of the machine's own Debian entries (one-line and deb822 formats).
read -r mirror suites keyring < <(python3 - <<'EOF'
import glob, re
def entries():
    for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
        try:
            for line in open(path):
                m = re.match(r"\s*deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)", line)
                if m:
                    key = re.search(r"signed-by=(\S+)", m.group(1) or "")
                    yield m.group(2), [m.group(3)], key.group(1) if key else ""
        except OSError:
            pass
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for stanza in re.split(r"\n\s*\n", open(path).read()):
            f = dict((k.strip().lower(), v.strip()) for k, _, v in
                     (l.partition(":") for l in stanza.splitlines() if l.strip() and not l.startswith("#")))
            if "deb" in f.get("types", "").split() and f.get("enabled", "yes") != "no":
                for uri in f.get("uris", "").split():
                    yield uri, f.get("suites", "").split(), f.get("signed-by", "")
for uri, suites, key in entries():
    if re.search(r"/debian/?$", uri) and suites:
        print(uri, ",".join(suites), key or "/usr/share/keyrings/debian-archive-keyring.gpg")
        break
else:
    print("http://deb.debian.org/debian bookworm /usr/share/keyrings/debian-archive-keyring.gpg")
EOF
)
mirror="${AMDQ_APT_MIRROR:-$mirror}"
suites="${AMDQ_APT_SUITES:-${suites//,/ }}"

apt="$root/apt"
mkdir -p "$apt/state/lists/partial" "$apt/cache/archives/partial" "$apt/etc/sources.list.d" "$apt/etc/preferences.d"
: >"$apt/etc/sources.list"
for s in $suites; do
  echo "deb-src [signed-by=$keyring] $mirror $s main" >>"$apt/etc/sources.list"
done
opts=(-o "Dir::State=$apt/state" -o "Dir::Cache=$apt/cache" -o "Dir::Etc::SourceList=$apt/etc/sources.list"
      -o "Dir::Etc::SourceParts=$apt/etc/sources.list.d" -o "Dir::Etc::Preferences=$apt/etc/preferences"
      -o "Dir::Etc::PreferencesParts=$apt/etc/preferences.d")
apt-get "${opts[@]}" -qq update >&2

# The source version of the installed llvm-19 (the oracle), else the newest in the suites.
ver="$(dpkg-query -W -f='${source:Version}' llvm-19 2>/dev/null || true)"
spec="llvm-toolchain-19${ver:+=$ver}"
uris="$(apt-get "${opts[@]}" -qq source --print-uris "$spec" 2>/dev/null || apt-get "${opts[@]}" -qq source --print-uris llvm-toolchain-19)"
line="$(grep -E "\.orig\.tar\.[a-z0-9]+' " <<<"$uris" | grep -v -- '-component' | head -n1)"
[[ -n "$line" ]] || { echo "fetch_llvm_corpus: no orig tarball in: $uris" >&2; exit 1; }
url="$(cut -d"'" -f2 <<<"$line")"
file="$(awk '{print $2}' <<<"$line")"
sha="$(grep -o 'SHA256:[0-9a-f]*' <<<"$line" | cut -d: -f2)"

tmp="$(mktemp -d "$root/tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "fetch_llvm_corpus: streaming $url" >&2
curl -fsSL --retry 3 "$url" | tee >(sha256sum | cut -d' ' -f1 >"$tmp/sha256") \
  | tar -xJ -C "$tmp" --wildcards -f - '*/llvm/test/MC/Disassembler/AMDGPU/*'
wait $!  # the hashing process substitution
got="$(cat "$tmp/sha256" 2>/dev/null || true)"
if [[ -n "$sha" && "$got" != "$sha" ]]; then
  echo "fetch_llvm_corpus: sha256 mismatch for $file: got '$got', want '$sha'" >&2
  exit 1
fi
src="$(find "$tmp" -type d -path '*/llvm/test/MC/Disassembler/AMDGPU' | head -n1)"
[[ -n "$src" ]] && compgen -G "$src/*.txt" >/dev/null || { echo "fetch_llvm_corpus: no AMDGPU corpus in $file" >&2; exit 1; }
rm -rf "$out"
mv "$src" "$out"
printf '%s\n%s\nsha256 %s\n' "$url" "$spec" "$sha" >"$root/SOURCE"
echo "$out"
