#!/usr/bin/env bash
# The hardened profile's Kafka ACLs: one principal per role, each allowed only what the trust
# model (docs/security.md) gives it on the topic prefix. Run once by compose's `acls` service
# (infra/docker-compose.hardened.yml) as the broker's admin; idempotent (adding an ACL twice
# is a no-op). Needs: KAFKA_BOOTSTRAP, HEADRACE_TOPIC_PREFIX, and the admin's client config
# at $ADMIN_CONFIG.
set -euo pipefail
bootstrap="${KAFKA_BOOTSTRAP:?}"
prefix="${HEADRACE_TOPIC_PREFIX:?}"
admin_config="${ADMIN_CONFIG:?}"
acls=/opt/kafka/bin/kafka-acls.sh

allow() {  # allow PRINCIPAL OPERATION --topic|--group NAME [PATTERN]
  "$acls" --bootstrap-server "$bootstrap" --command-config "$admin_config" --add \
    --allow-principal "User:$1" --operation "$2" "$3" "$4" \
    --resource-pattern-type "${5:-prefixed}" >/dev/null
  echo "allowed $1 $2 $3 $4 (${5:-prefixed})"
}

allow_cluster() {  # allow_cluster PRINCIPAL OPERATION: on the cluster itself (no name)
  "$acls" --bootstrap-server "$bootstrap" --command-config "$admin_config" --add \
    --allow-principal "User:$1" --operation "$2" --cluster >/dev/null
  echo "allowed $1 $2 on the cluster"
}

# the gateway and SDK producers: requests, cancellations, invalidations in; replies out
for op in Write Describe; do
  allow headrace-gateway "$op" --topic "$prefix.requests"
  allow headrace-gateway "$op" --topic "$prefix.control" literal
  allow headrace-gateway "$op" --topic "$prefix.invalidate" literal
done
allow headrace-gateway Create --topic "$prefix.replies."  # each client makes its reply topic
allow headrace-gateway Read --topic "$prefix.replies."
allow headrace-gateway Describe --topic "$prefix.replies."
allow headrace-gateway Read --group "$prefix."  # bulk jobs' reply collectors
allow_cluster headrace-gateway IdempotentWrite

# the dispatcher: reads requests and control in its group; answers, forwards, dead-letters
allow headrace-dispatcher Read --topic "$prefix.requests"
allow headrace-dispatcher Read --topic "$prefix.control" literal
allow headrace-dispatcher Read --group "$prefix.dispatcher" literal
allow headrace-dispatcher Read --group "$prefix.control" literal  # cancellations
allow headrace-dispatcher Read --topic "$prefix.replies."  # settling: what a dead worker answered
allow headrace-dispatcher Write --topic "$prefix.replies."
allow headrace-dispatcher Write --topic "$prefix.requests"  # forwarding to another bucket
allow headrace-dispatcher Write --topic "$prefix.dead-letter" literal
allow headrace-dispatcher Describe --topic "$prefix."
allow_cluster headrace-dispatcher IdempotentWrite

# workers: replies out, and read back where the broker acknowledged them
allow headrace-worker Write --topic "$prefix.replies."
allow headrace-worker Read --topic "$prefix.replies."
allow headrace-worker Describe --topic "$prefix.replies."
allow_cluster headrace-worker IdempotentWrite

# the invalidator: reads invalidations and the upstream topics its tag rules name
allow headrace-invalidator Read --topic "$prefix.invalidate" literal
allow headrace-invalidator Describe --topic "$prefix.invalidate" literal
allow headrace-invalidator Read --group "$prefix.invalidator" literal
for topic in ${UPSTREAM_TOPICS:-}; do
  allow headrace-invalidator Read --topic "$topic" literal
  allow headrace-invalidator Describe --topic "$topic" literal
done
