package install

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	ok := DefaultOptions()
	for _, tc := range []struct {
		name    string
		mutate  func(*Options)
		wantErr string
	}{
		{name: "defaults", mutate: func(*Options) {}},
		{name: "cluster ID", mutate: func(o *Options) { o.ClusterID = "alpha-1" }},
		{name: "cluster ID not a DNS label", mutate: func(o *Options) { o.ClusterID = "Alpha_1" }, wantErr: "--cluster-id"},
		{name: "cluster ID too long", mutate: func(o *Options) { o.ClusterID = strings.Repeat("a", 33) }, wantErr: "at most 32"},
		{name: "pod CIDR garbage", mutate: func(o *Options) { o.PodCIDR = "ten" }, wantErr: "--pod-cidr \"ten\" is not a CIDR"},
		{name: "host bits", mutate: func(o *Options) { o.ExternalCIDR = "10.70.1.0/16" }, wantErr: "did you mean 10.70.0.0/16"},
		{name: "overlap", mutate: func(o *Options) { o.PodCIDR = "10.96.0.0/16" }, wantErr: "overlaps"},
		{name: "no image", mutate: func(o *Options) { o.Image = "" }, wantErr: "--image"},
		{name: "no image but local agent", mutate: func(o *Options) { o.Image, o.LocalAgent = "", true }},
		{name: "pull policy Never", mutate: func(o *Options) { o.ImagePullPolicy = "Never" }},
		{name: "pull policy unknown", mutate: func(o *Options) { o.ImagePullPolicy = "Sometimes" }, wantErr: "--image-pull-policy"},
		{name: "gateway", mutate: func(o *Options) { o.GatewayEndpoint, o.GatewayNode = "192.0.2.10", "node-1" }},
		{name: "gateway endpoint not an IP", mutate: func(o *Options) { o.GatewayEndpoint = "gw.example.com" }, wantErr: "--gateway-endpoint"},
		{name: "gateway endpoint IPv6", mutate: func(o *Options) { o.GatewayEndpoint = "fd00::1" }, wantErr: "IPv4"},
		{name: "gateway with local agent", mutate: func(o *Options) { o.GatewayEndpoint, o.LocalAgent = "192.0.2.10", true }, wantErr: "--local-agent"},
		{name: "gateway node without endpoint", mutate: func(o *Options) { o.GatewayNode = "node-1" }, wantErr: "needs --gateway-endpoint"},
		{name: "agent resources", mutate: func(o *Options) { o.AgentCPURequest, o.AgentMemoryRequest, o.AgentMemoryLimit = "1", "1Gi", "1Gi" }},
		{name: "agent memory limit empty: the chart's", mutate: func(o *Options) { o.AgentMemoryLimit = "" }},
		{name: "agent CPU request garbage", mutate: func(o *Options) { o.AgentCPURequest = "fast" }, wantErr: `--agent-cpu-request "fast"`},
		{name: "agent memory limit negative", mutate: func(o *Options) { o.AgentMemoryLimit = "-1Gi" }, wantErr: "--agent-memory-limit"},
		{name: "agent memory request over limit", mutate: func(o *Options) { o.AgentMemoryRequest = "1Gi" }, wantErr: "--agent-memory-request 1Gi is larger than --agent-memory-limit 512Mi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.mutate(&o)
			err := o.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
