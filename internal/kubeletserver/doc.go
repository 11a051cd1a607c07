// Package kubeletserver owns the kubelet endpoint of the agent's virtual
// nodes: the HTTPS server the API server calls for `kubectl logs` and
// `kubectl exec` of offloaded pods, and its serving certificate.
//
// One server, on <--virtual-node-ip>:<--kubelet-port>, serves every virtual
// node of the agent; each Node advertises the port in
// status.daemonEndpoints.kubeletEndpoint. It runs on the leader only, like
// the virtual nodes and the providers' clients it needs: with several agent
// replicas, --virtual-node-ip must reach the leader.
//
// # Serving certificate
//
// The API server verifies kubelet certificates when started with
// --kubelet-certificate-authority. The certificate is either the operator's
// (--kubelet-cert-file and --kubelet-key-file, reloaded when the files
// change) or obtained from the cluster's kubernetes.io/kubelet-serving
// signer: the agent creates a CertificateSigningRequest (CN CommonName,
// organization system:nodes, IP SAN the virtual nodes' IP, an ECDSA key
// that never leaves the process), approves that request itself — and only
// that one, checked by UID — waits for the signature, and renews the
// certificate at a random point between 70% and 90% of its lifetime.
//
// # Who may call it
//
// Like a kubelet's, the endpoint authenticates its callers by client
// certificate against the cluster's client CA (ConfigMap
// kube-system/extension-apiserver-authentication, key client-ca-file, kept
// up to date) and authorizes them with a SubjectAccessReview: the HTTP
// method's verb on nodes/proxy of the pod's node. Answers are remembered
// as a kubelet's webhook authorizer remembers them (allowed 5 minutes,
// denied 30 s; sar.go: the agent asks directly rather than through
// k8s.io/apiserver's delegating authorizer, whose package alone added 17 MB
// to the agent's memory). The API server presents
// its --kubelet-client-certificate, which must be allowed that (for example
// by ClusterRole system:kubelet-api-admin); nobody else gets through.
//
// # Serving a request
//
// Routes are virtual-kubelet's (node/api): /containerLogs, /exec, /attach
// and /portForward. The local pod <namespace>/<name> is mapped to its
// Node, which must be a virtual node
// (its label annex.dev/remote-cluster-id names the provider; any other pod
// gets 404), then to its remote namespace on that provider (the
// NamespaceOffloading's status) and the remote pod of the same name. The
// request is forwarded to the provider's pods/log, pods/exec, pods/attach
// or pods/portforward (one connection to the provider for each connection
// forwarded) through the peer's credentials from internal/remote: a
// provider that is unreachable gets a 502 at once, one that does not answer
// within the connect timeout an error; a stream (follow, exec, attach, a
// forwarded connection) then lasts until it ends or the client goes away.
//
// # Resource metrics
//
// GET /metrics/resource/<node> answers what a kubelet's /metrics/resource
// answers (container CPU counters, working sets and start times, the
// node's sums, scrape_error) for the Running pods of virtual node <node>,
// so that metrics-server, `kubectl top` and HorizontalPodAutoscalers see
// offloaded pods. Each virtual Node names its path in metrics-server's
// annotation metrics.k8s.io/resource-metrics-path (one endpoint serves
// every node); the caller needs get on nodes/metrics of the node, as at a
// kubelet. The data is the provider's own PodMetrics (metrics.k8s.io) of
// the pods' remote namespaces, read with the tenant's credentials, every
// call bounded by the connect timeout. A provider reports CPU as a rate:
// the agent integrates it into a per-container counter on its own clock
// (counters.go), so metrics-server's rate between two scrapes is the
// provider's rate again; the provider's timestamps only say whether a
// sample is new. The provider is not trusted: only pods of that node and
// containers of their spec count, and usage is kept between 0 and the
// container's limit (the node's capacity without one). An unreachable
// provider gets 502; a namespace whose metrics cannot be read is left out
// and scrape_error is 1.
package kubeletserver
