package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// sample is one line of the Prometheus text format.
type sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// parseMetrics reads the samples of the metrics named in names (all when
// names is empty) from the Prometheus text exposition format.
func parseMetrics(r io.Reader, names ...string) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("%w in line %q", err, line)
		}
		if len(names) == 0 || contains(names, s.Name) {
			out = append(out, s)
		}
	}
	return out, sc.Err()
}

// parseSample parses `name{a="x",b="y"} value [timestamp]`.
func parseSample(line string) (sample, error) {
	s := sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, errors.New("no metric name")
	}
	s.Name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			line = strings.TrimLeft(line, " ,")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.Index(line, `="`)
			if eq <= 0 {
				return s, errors.New("bad label")
			}
			name := line[:eq]
			line = line[eq+2:]
			var val strings.Builder
			closed := false
			for j := 0; j < len(line); j++ {
				c := line[j]
				if c == '\\' && j+1 < len(line) {
					j++
					switch line[j] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(line[j])
					}
					continue
				}
				if c == '"' {
					line, closed = line[j+1:], true
					break
				}
				val.WriteByte(c)
			}
			if !closed {
				return s, errors.New("unterminated label value")
			}
			s.Labels[name] = val.String()
		}
	}
	f := strings.Fields(line)
	if len(f) < 1 {
		return s, errors.New("no value")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, err
	}
	s.Value = v
	return s, nil
}

// scrape fetches and parses an agent's /metrics.
func scrape(ctx context.Context, addr string, names ...string) ([]sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	//nolint:gosec // G704: the loopback metrics address of an agent the benchmark started
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req) //nolint:gosec // G704: see above
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET http://%s/metrics: %s", addr, resp.Status)
	}
	return parseMetrics(resp.Body, names...)
}

// requestMetric is client-go's request counter, registered by
// controller-runtime on the agent's metrics endpoint: every REST client of
// the process (its own API server's and the peers') counts there, by
// method, host and response code.
const requestMetric = "rest_client_requests_total"

// requestCounts sums requestMetric by host and method.
func requestCounts(samples []sample) map[hostMethod]float64 {
	out := map[hostMethod]float64{}
	for _, s := range samples {
		if s.Name != requestMetric {
			continue
		}
		out[hostMethod{Host: s.Labels["host"], Method: s.Labels["method"]}] += s.Value
	}
	return out
}

type hostMethod struct{ Host, Method string }

// isWrite reports whether an HTTP method changes something.
func isWrite(method string) bool {
	switch strings.ToUpper(method) {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}
