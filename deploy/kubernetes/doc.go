// Package kubernetes holds shade-peer's Kubernetes manifests (a DaemonSet,
// a headless Service, a ConfigMap, a Secret and their Namespace) and the
// test that decodes them strictly and checks them against the daemon's
// flags, ports and probes.
package kubernetes
