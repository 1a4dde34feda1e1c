#!/usr/bin/env bash
# Installs the Versity S3 Gateway (the S3 server the tests run, POSIX
# backend) into a cache directory unless it is there already, and prints
# the binary's path. Idempotent: a cached binary costs one stat.
#
#   SHADE_VERSITYGW_VERSION  the version to install (default v1.8.0)
#   XDG_CACHE_HOME           the cache root (default ~/.cache)
set -euo pipefail
version=${SHADE_VERSITYGW_VERSION:-v1.8.0}
dir=${XDG_CACHE_HOME:-$HOME/.cache}/shade/bin/versitygw-$version
bin=$dir/versitygw
if [ ! -x "$bin" ]; then
	mkdir -p "$dir"
	echo "building versitygw $version into $dir (about 90 s)" >&2
	GOBIN=$dir GOFLAGS=-buildvcs=false go install "github.com/versity/versitygw/cmd/versitygw@$version" >&2
fi
echo "$bin"
