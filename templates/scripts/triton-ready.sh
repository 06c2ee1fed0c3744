#!/bin/sh
# Health gate: wait until the server and every model are ready (see tf_wait).
# usage: triton-ready.sh CONTAINER URL TIMEOUT [MODEL...]
set -u
# include: lib-triton.sh
tf_wait "$@"
