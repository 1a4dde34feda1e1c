// Package grafana holds a Grafana dashboard of shade-peer's metrics
// (shade.json) and the test that checks every metric its queries name
// against what a running peer exports.
package grafana
