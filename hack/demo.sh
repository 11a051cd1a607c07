#!/usr/bin/env bash
# make demo: the sandbox, peered and offloading. Safe to run again.
#
# As root it runs on real nodes (`annexctl sandbox up --real-nodes`): every
# cluster has a real kubelet and containerd, Annex is installed from its
# image, and a real container on alpha calls real containers on beta and
# gamma through the gateways. Otherwise it runs on kwok nodes only.
set -euo pipefail
cd "$(dirname "$0")/.."
KUBE_BIN="$(cd tools/kube && go run . -print-dir)/bin"
DIR="${ANNEX_SANDBOX_DIR:-$HOME/.annex/sandbox}"
A="$DIR/alpha/kubeconfig"
k() { "$KUBE_BIN/kubectl" --kubeconfig "$A" "$@"; }

REAL=false
if [ "$(id -u)" = 0 ]; then REAL=true; fi
if $REAL; then
  bin/annexctl sandbox up --dir "$DIR" --real-nodes --images bin/images
else
  bin/annexctl sandbox up --dir "$DIR"
fi
for p in beta gamma; do
  echo "== peering alpha with $p"
  SERVER=()
  # Real nodes: alpha's agent runs in a pod and reaches $p's API server at
  # its address on the nodes, not at the kubeconfig's 127.0.0.1.
  if $REAL; then SERVER=(--remote-server "$(cat "$DIR/$p/peer-server")"); fi
  bin/annexctl peer --kubeconfig "$A" --remote-kubeconfig "$DIR/$p/kubeconfig" "${SERVER[@]}"
done
echo "== offloading namespace demo (pods only on providers)"
k get namespace demo >/dev/null 2>&1 || k create namespace demo
bin/annexctl offload namespace demo --kubeconfig "$A" --pod-strategy Remote
if $REAL; then
  # The echo image of `make image`, imported into every real node.
  IMAGE="annex.dev/echo:$(bin/annexctl --version | awk '{print $NF}')"
  k -n demo get deployment web >/dev/null 2>&1 || k -n demo apply -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: echo
        image: $IMAGE
        imagePullPolicy: Never
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /readyz, port: 8080}, periodSeconds: 1}
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
        - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
YAML
else
  k -n demo get deployment web >/dev/null 2>&1 || k -n demo apply -f - <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 6
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers: [{name: web, image: nginx}]
YAML
fi
k -n demo get service web >/dev/null 2>&1 || k -n demo expose deployment web --port 80 --target-port 8080
k -n demo rollout status deployment web --timeout=120s
echo "== pods on alpha (nodes annex-beta and annex-gamma are the providers)"
k -n demo get pods -o wide
echo "== nodes of alpha"
k get nodes
if $REAL; then
  echo "== a real container on alpha calls real containers on beta and gamma through the gateways"
  k get pod client >/dev/null 2>&1 || k run client --image="$IMAGE" --image-pull-policy=Never \
    --env=POD_NAME=client --command -- /echo-server serve
  k wait --for=condition=Ready pod/client --timeout=60s >/dev/null
  try() { for _ in $(seq 20); do "$@" 2>/dev/null && return 0; sleep 1; done; "$@"; }
  for p in beta gamma; do
    pod=$(k -n demo get pods -l app=web --field-selector spec.nodeName=annex-$p -o jsonpath='{.items[0].metadata.name}')
    ip=$(k -n demo get pod "$pod" -o jsonpath='{.status.podIP}')
    echo "client on alpha-node-0 -> $pod on $p at $ip (alpha's view of $p's pod):"
    try k exec client -- /echo-server get "http://$ip:8080/"
  done
  echo "kubectl logs of an offloaded pod (its container runs on a provider's real node):"
  k -n demo logs "$pod" | head -3
fi
echo "== annexctl status"
bin/annexctl status --kubeconfig "$A"
cat <<MSG

Try a failure: bin/annexctl sandbox kill beta --dir $DIR
  then watch: $KUBE_BIN/kubectl --kubeconfig $A -n demo get pods -o wide -w
Remove it all: bin/annexctl sandbox down --dir $DIR
MSG
