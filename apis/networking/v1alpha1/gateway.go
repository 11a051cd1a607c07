package v1alpha1

// The gateway's published identity. A cluster whose agent runs with a
// gateway (--gateway-config) keeps its WireGuard private key in the Secret
// and publishes the public half, with the address its gateway is reachable
// at, in the ConfigMap; `annexctl network connect` copies the ConfigMap of
// each side into the other side's NetworkConfiguration (spec.tunnel).
const (
	// GatewaySecretName is the Secret (in annex-system) holding the
	// gateway's private key under GatewayPrivateKey.
	GatewaySecretName = "annex-gateway"
	// GatewayConfigMapName is the ConfigMap (in annex-system) publishing
	// GatewayPublicKey and GatewayAddress.
	GatewayConfigMapName = "annex-gateway"

	// GatewayPrivateKey is the Secret key of the private key (base64).
	GatewayPrivateKey = "privateKey"
	// GatewayPublicKey is the ConfigMap key of the public key (base64).
	GatewayPublicKey = "publicKey"
	// GatewayAddress is the ConfigMap key of the IP address the gateway's
	// UDP ports are reachable at from the other clusters' gateways.
	GatewayAddress = "address"

	// DefaultTunnelPort is the first UDP port `network connect` gives a
	// link; each further link of a cluster gets the next free one.
	DefaultTunnelPort = 51820
)
