package main

import (
	"encoding/json"
	"fmt"
)

func jsonField(data []byte, field string) (string, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return "", err
	}
	s, ok := m[field].(string)
	if !ok || s == "" {
		return "", fmt.Errorf("no %q in the go command's JSON output", field)
	}
	return s, nil
}
