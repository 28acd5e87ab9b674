#!/bin/sh
# New random secrets for deploy/, written once (docs/operations/deploying.md):
#
#   deploy/.env                        the variables deploy/compose.yaml requires
#   deploy/kubernetes/secrets/*.env    what deploy/kubernetes/kustomization.yaml's
#                                      secretGenerator reads
#
# A file that exists is kept as it is: its secrets are in use (Redis's users, Grafana's
# admin). Delete it to start over. The files are readable by their owner only and never
# committed (.gitignore). Each secret is 32 random bytes in hex: nothing to quote in a URL,
# JSON or YAML. tests/unit/test_deploy_manifests.py runs this script.
set -eu
umask 077
here=$(cd "$(dirname "$0")" && pwd)

secret() {
    od -An -N32 -tx1 /dev/urandom | tr -d ' \n'
}

# write FILE: standard input into FILE, unless FILE exists.
write() {
    if [ -e "$1" ]; then
        cat >/dev/null
        echo "kept $1 (it exists; delete it to start over)" >&2
        return
    fi
    mkdir -p "$(dirname "$1")"
    cat >"$1.new"
    mv "$1.new" "$1"
    echo "wrote $1" >&2
}

write "$here/.env" <<EOF
# deploy/compose.yaml's secrets (deploy/secrets.sh): the console's and API's token, the
# read token Prometheus scrapes /metrics with, Grafana's admin password, each role's
# Redis password and PostgreSQL's (the outbox's database).
WHEELQ_TOKEN=$(secret)
WHEELQ_METRICS_TOKEN=$(secret)
GRAFANA_PASSWORD=$(secret)
REDIS_SCHEDULER_PASSWORD=$(secret)
REDIS_WORKER_PASSWORD=$(secret)
REDIS_RUN_PASSWORD=$(secret)
REDIS_RELAY_PASSWORD=$(secret)
REDIS_SERVE_PASSWORD=$(secret)
POSTGRES_PASSWORD=$(secret)
EOF

write "$here/kubernetes/secrets/redis.env" <<EOF
scheduler=$(secret)
worker=$(secret)
run=$(secret)
relay=$(secret)
serve=$(secret)
EOF

# The relay's password on your PostgreSQL: give it to the role the relay logs in as.
write "$here/kubernetes/secrets/postgres.env" <<EOF
relay=$(secret)
EOF

write "$here/kubernetes/secrets/serve.env" <<EOF
tokens=[{"token": "$(secret)"}, {"token": "$(secret)", "access": "read"}]
EOF
