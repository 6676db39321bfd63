#!/bin/sh
# The exec handler of benchmark 2, run once per call by both the sidecar and
# adnanh/webhook. It reads the call JSON, then prints a success envelope.
#
# The sidecar passes the call on stdin. webhook cannot write a request body
# to a command's stdin, so it passes the raw body as the first argument
# (`"source": "raw-request-body"`). Both paths use shell builtins only (no
# `cat`), so each call costs exactly one process, whichever way it is read.
if [ $# -gt 0 ]; then
    body=$1
else
    IFS= read -r body || :
fi
printf '{"output":{"received_bytes":%d},"is_error":false}\n' "${#body}"
