package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
)

// Applier is what Run drives (a *Dataplane).
type Applier interface {
	Apply(Config) error
	Stats(peer string) (Stats, bool)
	Close() error
}

// Stats reports a link's WireGuard state.
type Stats struct {
	LastHandshakeUnix int64
	RxBytes, TxBytes  int64
}

// LinkStatus is one link's entry in the status file.
type LinkStatus struct {
	Peer          string    `json:"peer"`
	LastHandshake time.Time `json:"lastHandshake,omitzero"`
	RxBytes       int64     `json:"rxBytes"`
	TxBytes       int64     `json:"txBytes"`
}

// resync is how often the Config is applied again although the file did
// not change, repairing whatever else changed the namespace (a deleted
// rule or route); Apply is idempotent, so this changes nothing otherwise.
const resync = 30 * time.Second

// Run applies the Config in configPath, again whenever the file changes
// (checked every interval), every resync and, on error, until it succeeds;
// it writes the links' state to statusPath (when set) every interval. When
// ctx ends it removes everything it programmed.
func Run(ctx context.Context, log logr.Logger, dp Applier, configPath, statusPath string, interval time.Duration) error {
	var applied []byte
	var appliedAt time.Time
	var cfg Config
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		data, err := os.ReadFile(configPath)
		switch {
		case err != nil:
			log.Error(err, "Cannot read the configuration", "path", configPath)
		case bytes.Equal(data, applied) && time.Since(appliedAt) >= resync:
			if err := dp.Apply(cfg); err != nil {
				log.Error(err, "Cannot apply the configuration again; retrying", "path", configPath)
				break
			}
			appliedAt = time.Now()
		case !bytes.Equal(data, applied):
			next, err := ParseConfig(data)
			if err != nil {
				log.Error(err, "Invalid configuration", "path", configPath)
				break
			}
			if err := dp.Apply(next); err != nil {
				log.Error(err, "Cannot apply the configuration; retrying", "path", configPath)
				break
			}
			applied, cfg, appliedAt = data, next, time.Now()
			log.Info("Configuration applied", "links", len(cfg.Links))
		}
		if statusPath != "" {
			if err := writeStatus(dp, cfg, statusPath); err != nil {
				log.Error(err, "Cannot write the status", "path", statusPath)
			}
		}
		select {
		case <-ctx.Done():
			return dp.Close()
		case <-tick.C:
		}
	}
}

func writeStatus(dp Applier, cfg Config, path string) error {
	out := []LinkStatus{}
	for _, l := range cfg.Links {
		s, ok := dp.Stats(l.Peer)
		if !ok {
			continue
		}
		st := LinkStatus{Peer: l.Peer, RxBytes: s.RxBytes, TxBytes: s.TxBytes}
		if s.LastHandshakeUnix > 0 {
			st.LastHandshake = time.Unix(s.LastHandshakeUnix, 0).UTC()
		}
		out = append(out, st)
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}
