package peer

import (
	"strings"
	"testing"
)

func TestValidateRemoteServer(t *testing.T) {
	for _, tc := range []struct {
		server  string
		wantErr bool
	}{
		{server: ""},
		{server: "https://172.31.2.254:41234"},
		{server: "https://api.example.com/"},
		{server: "http://172.31.2.254:6443", wantErr: true},
		{server: "172.31.2.254:6443", wantErr: true},
		{server: "https://", wantErr: true},
		{server: "https://host/api", wantErr: true},
		{server: "https://host?x=1", wantErr: true},
		{server: "https://user@host", wantErr: true},
	} {
		o := DefaultOptions()
		o.RemoteServer = tc.server
		err := o.Validate()
		if (err != nil) != tc.wantErr {
			t.Errorf("RemoteServer %q: error %v, want error %v", tc.server, err, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "--remote-server") {
			t.Errorf("RemoteServer %q: error %q does not name the flag", tc.server, err)
		}
	}
}
