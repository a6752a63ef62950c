#!/bin/sh
# End-to-end check on a kind cluster with fluxnode deployed (make e2e-kind runs this):
# wait until every worker's broker is up in the overlay, then run `fluxnode resource list`
# through the connect script on the leader's node. Needs docker, kind and kubectl.
set -eu
KUBECTL=${KUBECTL:-kubectl}
DOCKER=${DOCKER:-docker}
TIMEOUT=${TIMEOUT:-300}

workers=$($KUBECTL get nodes -l '!node-role.kubernetes.io/control-plane' -o jsonpath='{.items[*].metadata.name}')
count=$(echo "$workers" | wc -w)
echo "e2e: $count worker(s): $workers"
$KUBECTL -n fluxnode rollout status daemonset/fluxnode-agent --timeout="${TIMEOUT}s"

deadline=$(( $(date +%s) + TIMEOUT ))
leader=""
while :; do
    leader=$($KUBECTL -n fluxnode get configmap fluxnode-ranks -o jsonpath='{.data.ranks\.json}' 2>/dev/null \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["hosts"][0])' 2>/dev/null || true)
    if [ -n "$leader" ]; then
        out=$($DOCKER exec "$leader" /opt/fluxnode/bin/fluxnode-connect fluxnode resource list 2>/dev/null || true)
        free=$(echo "$out" | awk '$1 == "free" { print $2 }')
        down=$(echo "$out" | awk '$1 == "down" { print $2 }')
        if [ "${free:-0}" = "$count" ] && [ "${down:-0}" = "0" ]; then
            break
        fi
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
        echo "e2e: overlay did not reach quorum of $count broker(s) in ${TIMEOUT}s (leader: ${leader:-none})" >&2
        [ -n "$leader" ] && $DOCKER exec "$leader" /opt/fluxnode/bin/fluxnode-connect fluxnode resource list >&2 || true
        $KUBECTL -n fluxnode get pods -o wide >&2 || true
        exit 1
    fi
    sleep 3
done
echo "e2e: quorum reached on leader $leader"
$DOCKER exec "$leader" /opt/fluxnode/bin/fluxnode-connect fluxnode resource list
