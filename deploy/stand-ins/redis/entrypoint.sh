#!/bin/sh
# `redis-server ARGS` as the official image runs it: listening on every address.
set -eu
if [ "$1" = redis-server ]; then
  shift
  exec setpriv --reuid=redis --regid=redis --init-groups redis-server --bind '* -::*' \
    --protected-mode no "$@"
fi
exec "$@"
