#!/bin/sh
# Turn protected mode off unless the command sets it (as the official image does): without a config file
# Redis refuses clients from other containers.
set -eu
if [ "${1:-}" = redis-server ]; then
  case " $* " in
    *" --protected-mode "*) ;;
    *) set -- "$@" --protected-mode no ;;
  esac
fi
exec "$@"
