#!/usr/bin/env bash
# Builds llama.cpp's llama-server (CPU only) for the e2e tests, from the
# llama.cpp source that the npm package node-llama-cpp ships as a git bundle
# (llama/gitRelease.bundle). Nothing but the npm registry and Debian's
# packages is reached: the web UI is neither built nor downloaded, HTTPS
# (OpenSSL) is off.
#
# The binary is installed outside the checkout, keyed by the llama.cpp
# commit, and reused when present:
#   ${LLMGW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llmgw}/llama.cpp/<commit>/bin/llama-server
# The last line printed is that path. Run as root (CI) it installs cmake and
# a C++ compiler with apt-get when missing.
#
# With --cached it only prints the cached binary's path, and exits 3 when
# there is none.
set -euo pipefail

NODE_LLAMA_CPP_VERSION=3.22.1
# The commit node-llama-cpp 3.22.1's bundle holds (its llama/llama.cpp.info.json
# names the release "v0.5.0" of ggml-org/llama.cpp; the bundle is one squashed
# commit, so there is no bNNNN build number).
LLAMA_CPP_COMMIT=de3ff815ea7d559ee917f063901b8986f038abc6
JOBS=${LLAMA_CPP_JOBS:-2}

# All in one function, read whole before it runs: a script edited while it
# builds does not run on from a shifted offset.
main() {
	home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
	cache=${LLMGW_CACHE_DIR:-${XDG_CACHE_HOME:-$home/.cache}/llmgw}/llama.cpp/$LLAMA_CPP_COMMIT
	bin=$cache/bin/llama-server
	if [ -x "$bin" ]; then
		[ "${1:-}" = --cached ] || echo "llama-server cached: $bin" >&2
		echo "$bin"
		exit 0
	fi
	if [ "${1:-}" = --cached ]; then
		exit 3
	fi

	step_start=$SECONDS
	step() {
		echo "llama.cpp build: $1 took $((SECONDS - step_start))s" >&2
		step_start=$SECONDS
	}

	if ! command -v cmake >/dev/null || ! command -v c++ >/dev/null || ! command -v git >/dev/null; then
		apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ git >&2
		step "apt-get install cmake g++ git"
	fi
	command -v npm >/dev/null || { echo "llama.cpp build: npm is needed to fetch node-llama-cpp" >&2; exit 1; }

	work=$(mktemp -d "${TMPDIR:-/tmp}/llmgw-llamacpp.XXXXXX")
	trap 'rm -rf "$work"' EXIT

	(cd "$work" && npm pack --silent "node-llama-cpp@$NODE_LLAMA_CPP_VERSION" >/dev/null)
	tar -xzf "$work"/node-llama-cpp-*.tgz -C "$work" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
	step "npm pack node-llama-cpp@$NODE_LLAMA_CPP_VERSION"

	git clone -q "$work/package/llama/gitRelease.bundle" "$work/src" 2>/dev/null
	got=$(git -C "$work/src" rev-parse HEAD)
	if [ "$got" != "$LLAMA_CPP_COMMIT" ]; then
		echo "llama.cpp build: node-llama-cpp@$NODE_LLAMA_CPP_VERSION's bundle holds $got, expected $LLAMA_CPP_COMMIT" >&2
		exit 1
	fi
	step "git clone of the bundle ($got)"

	cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
		-DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF \
		-DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >"$work/cmake.log" 2>&1 ||
		{ cat "$work/cmake.log" >&2; exit 1; }
	step "cmake configure"

	cmake --build "$work/build" --target llama-server -j "$JOBS" >"$work/build.log" 2>&1 ||
		{ tail -50 "$work/build.log" >&2; exit 1; }
	step "cmake build llama-server (-j$JOBS)"

	# Staged beside the cache and renamed into place: a build running at the
	# same time (another checkout's make test) finds either nothing or a
	# whole binary, and the second to finish keeps the first one's.
	mkdir -p "$(dirname "$cache")"
	staging=$(mktemp -d "$cache.XXXXXX")
	mkdir "$staging/bin"
	cp "$work/build/bin/llama-server" "$staging/bin/"
	cp "$work/package/llama/llama.cpp.info.json" "$staging/"
	echo "node-llama-cpp@$NODE_LLAMA_CPP_VERSION $LLAMA_CPP_COMMIT" >"$staging/SOURCE"
	chmod 755 "$staging"
	mv -T "$staging" "$cache" 2>/dev/null || rm -rf "$staging"
	"$bin" --version >&2 2>&1 || true
	echo "$bin"
}

main "$@"
