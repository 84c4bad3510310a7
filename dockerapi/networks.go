package dockerapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Network is a network as Docker lists it: enough for the operator's
// tools to name networks and to know which subnets are in use.
type Network struct {
	ID      string
	Name    string
	Driver  string
	Subnets []string
}

// Networks lists Docker's networks (GET /networks), every driver's.
func (d *Client) Networks(ctx context.Context) ([]Network, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/networks", nil)
	if err != nil {
		return nil, err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("list Docker's networks at %s: %w", d.host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("list Docker's networks at %s: %w", d.host, err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Api-Version") == "" {
		return nil, fmt.Errorf("list Docker's networks at %s: status %d (Api-Version %q): %s: is it the Docker API socket?", d.host, resp.StatusCode, resp.Header.Get("Api-Version"), truncate(strings.TrimSpace(string(body)), 200))
	}
	var raw []struct {
		ID     string `json:"Id"`
		Name   string `json:"Name"`
		Driver string `json:"Driver"`
		IPAM   struct {
			Config []struct {
				Subnet string `json:"Subnet"`
			} `json:"Config"`
		} `json:"IPAM"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("list Docker's networks at %s: %w", d.host, err)
	}
	out := make([]Network, 0, len(raw))
	for _, r := range raw {
		n := Network{ID: r.ID, Name: r.Name, Driver: r.Driver}
		for _, c := range r.IPAM.Config {
			if c.Subnet != "" {
				n.Subnets = append(n.Subnets, c.Subnet)
			}
		}
		out = append(out, n)
	}
	return out, nil
}
