#!/usr/bin/env bash
# make demo: the sandbox, peered and offloading. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
KUBE_BIN="$(cd tools/kube && go run . -print-dir)/bin"
DIR="${ANNEX_SANDBOX_DIR:-$HOME/.annex/sandbox}"
A="$DIR/alpha/kubeconfig"
k() { "$KUBE_BIN/kubectl" --kubeconfig "$A" "$@"; }

# As root the sandbox also carries real packets (network namespaces, gateways).
NET=()
if [ "$(id -u)" = 0 ]; then NET=(--network); fi
bin/annexctl sandbox up --dir "$DIR" "${NET[@]}"
for p in beta gamma; do
  echo "== peering alpha with $p"
  bin/annexctl peer --kubeconfig "$A" --remote-kubeconfig "$DIR/$p/kubeconfig"
done
echo "== offloading namespace demo (pods only on providers)"
k get namespace demo >/dev/null 2>&1 || k create namespace demo
bin/annexctl offload namespace demo --kubeconfig "$A" --pod-strategy Remote
k -n demo get deployment web >/dev/null 2>&1 || k -n demo apply -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 6
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      # annex.dev/sandbox-netns: with --network, each pod gets a network
      # namespace holding its IP and an echo server on port 8080.
      labels: {app: web, annex.dev/sandbox-netns: "true"}
    spec:
      containers: [{name: web, image: nginx}]
YAML
k -n demo get service web >/dev/null 2>&1 || k -n demo expose deployment web --port 80
k -n demo rollout status deployment web --timeout=120s
echo "== pods on alpha (nodes annex-beta and annex-gamma are the providers)"
k -n demo get pods -o wide
echo "== nodes of alpha"
k get nodes
if [ ${#NET[@]} -gt 0 ]; then
  echo "== real packets through the gateways"
  k get pod client >/dev/null 2>&1 || k run client --image=busybox --labels=annex.dev/sandbox-netns=true \
    --overrides='{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"type","operator":"NotIn","values":["virtual-node"]}]}]}}}}}'
  k wait --for=condition=Ready pod/client --timeout=60s >/dev/null
  g=$(k -n demo get pods -l app=web --field-selector spec.nodeName=annex-gamma -o jsonpath='{.items[0].metadata.name}')
  b=$(k -n demo get pods -l app=web --field-selector spec.nodeName=annex-beta -o jsonpath='{.items[0].metadata.name}')
  gip=$(k -n demo get pod "$g" -o jsonpath='{.status.podIP}')
  transit=$(k -n demo get pod "$g" -o jsonpath='{.metadata.annotations.annex\.dev/transit-address}')
  # The pod-network process makes a pod's namespace a moment after it runs.
  try() { for _ in $(seq 30); do "$@" 2>/dev/null && return 0; sleep 1; done; "$@"; }
  echo "alpha's pod client -> $g on gamma at $gip (alpha's view of gamma's pod):"
  try bin/annexctl sandbox curl --dir "$DIR" alpha default/client "http://$gip:8080/"
  echo "beta's $b -> $g on gamma through alpha's transit address $transit:"
  try bin/annexctl sandbox curl --dir "$DIR" beta "demo-alpha/$b" "http://$transit:8080/"
fi
echo "== annexctl status"
bin/annexctl status --kubeconfig "$A"
cat <<MSG

Try a failure: bin/annexctl sandbox kill beta --dir $DIR
  then watch: $KUBE_BIN/kubectl --kubeconfig $A -n demo get pods -o wide -w
Remove it all: bin/annexctl sandbox down --dir $DIR
MSG
