package kubernetes

import (
	"bytes"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/shade-mesh/shade/admin"
	"github.com/shade-mesh/shade/internal/testsupport"
	"github.com/shade-mesh/shade/transport/peer"
)

// manifests holds every object of this folder, decoded strictly.
type manifests struct {
	daemonSet  *appsv1.DaemonSet
	service    *corev1.Service
	secret     *corev1.Secret
	configMap  *corev1.ConfigMap
	namespaces []*corev1.Namespace
}

// load decodes every .yaml file of the folder into its k8s.io/api type,
// refusing unknown and duplicate fields.
func load(t *testing.T) manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var m manifests
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte("\n---")) {
			t.Fatalf("%s: one object per file, please", f)
		}
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(data, &head); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var obj any
		switch head.APIVersion + " " + head.Kind {
		case "apps/v1 DaemonSet": // decoding allocates each object
			obj = &m.daemonSet
		case "v1 Service":
			obj = &m.service
		case "v1 Secret":
			obj = &m.secret
		case "v1 ConfigMap":
			obj = &m.configMap
		case "v1 Namespace":
			ns := &corev1.Namespace{}
			m.namespaces = append(m.namespaces, ns)
			obj = ns
		default:
			t.Fatalf("%s: unexpected %s %s", f, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict(data, obj); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if m.daemonSet == nil || m.service == nil || m.secret == nil || m.configMap == nil {
		t.Fatalf("want a DaemonSet, a Service, a Secret and a ConfigMap; have %+v", m)
	}
	return m
}

// daemonHelp is shade-peer's --help: its flags and their defaults.
type daemonHelp struct {
	bin   string            // the built binary
	flags map[string]string // name -> the rest of its help line
	text  string
}

// bins holds the shade-peer built once for every test.
var bins *testsupport.Binaries

func TestMain(m *testing.M) {
	testsupport.Main(m, testsupport.BuildOptions{Commands: []string{"shade-peer"}}, &bins)
}

// daemonHelpOf reads the built shade-peer's --help.
func daemonHelpOf(t *testing.T) daemonHelp {
	t.Helper()
	bin := bins.Path("shade-peer")
	out, err := exec.Command(bin, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("shade-peer --help: %v\n%s", err, out)
	}
	h := daemonHelp{bin: bin, flags: map[string]string{}, text: string(out)}
	line := regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)(.*)$`)
	for _, m := range line.FindAllStringSubmatch(h.text, -1) {
		h.flags[m[1]] = m[2]
	}
	if len(h.flags) < 10 {
		t.Fatalf("found only %d flags in --help:\n%s", len(h.flags), out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("shade-peer --help:\n%s", h.text)
		}
	})
	return h
}

// defaultOf returns the flag's (default "...") value.
func (h daemonHelp) defaultOf(t *testing.T, flag string) string {
	t.Helper()
	rest, ok := h.flags[flag]
	if !ok {
		t.Fatalf("shade-peer has no --%s", flag)
	}
	m := regexp.MustCompile(`\(default "?([^")]*)"?\)\s*$`).FindStringSubmatch(rest)
	if m == nil {
		t.Fatalf("--%s has no default in --help: %q", flag, rest)
	}
	return m[1]
}

// flagOf maps SHADE_CACHE_SIZE to cache-size.
func flagOf(env string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, "SHADE_")), "_", "-")
}

func portOf(t *testing.T, hostPort string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(hostPort)
	if err != nil {
		t.Fatalf("%q: %v", hostPort, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%q: %v", hostPort, err)
	}
	return int32(n)
}

// defaultPorts are the daemon's default ports, by container port name.
func defaultPorts(t *testing.T, h daemonHelp) map[string]corev1.ContainerPort {
	t.Helper()
	// Gossip has no default address (standalone) but binds :7946 when
	// seeds are given; QUIC takes the gossip host with port 7947.
	if !strings.Contains(h.flags["gossip-addr"], ":7946") {
		t.Fatalf("--gossip-addr no longer documents :7946: %q", h.flags["gossip-addr"])
	}
	if !strings.Contains(h.flags["peer-addr"], "port 7947") || portOf(t, peer.DefaultListenAddr) != 7947 {
		t.Fatalf("--peer-addr no longer defaults to port 7947: %q, %s", h.flags["peer-addr"], peer.DefaultListenAddr)
	}
	adminPort := portOf(t, h.defaultOf(t, "admin-addr"))
	if adminPort != portOf(t, admin.DefaultAddr) {
		t.Fatalf("--admin-addr default %s, admin.DefaultAddr %s", h.defaultOf(t, "admin-addr"), admin.DefaultAddr)
	}
	return map[string]corev1.ContainerPort{
		"gossip-tcp": {ContainerPort: 7946, Protocol: corev1.ProtocolTCP},
		"gossip-udp": {ContainerPort: 7946, Protocol: corev1.ProtocolUDP},
		"quic":       {ContainerPort: 7947, Protocol: corev1.ProtocolUDP},
		"admin":      {ContainerPort: adminPort, Protocol: corev1.ProtocolTCP},
	}
}

func peerContainer(t *testing.T, m manifests) corev1.Container {
	t.Helper()
	cs := m.daemonSet.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "shade-peer" {
		t.Fatalf("want one container shade-peer, have %d", len(cs))
	}
	return cs[0]
}

// settings returns the container's SHADE_* settings: the ConfigMap's, then
// the container's env (which wins, as in Kubernetes). Values from secrets
// are "<secret>".
func settings(t *testing.T, m manifests) map[string]string {
	t.Helper()
	c := peerContainer(t, m)
	out := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil || from.ConfigMapRef.Name != m.configMap.Name {
			t.Fatalf("envFrom %+v: want the ConfigMap %s", from, m.configMap.Name)
		}
		for k, v := range m.configMap.Data {
			out[k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			out[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			out[e.Name] = "<secret>"
		default:
			out[e.Name] = "<field>"
		}
	}
	return out
}

// TestManifests decodes the manifests and checks them against the daemon
// built from this tree.
func TestManifests(t *testing.T) {
	m := load(t)
	h := daemonHelpOf(t)
	for _, c := range []struct {
		name string
		test func(*testing.T, manifests, daemonHelp)
	}{
		{"EverySettingIsADaemonFlag", testEverySettingIsADaemonFlag},
		{"SettingsParse", testSettingsParse},
		{"PortsAndProbes", testPortsAndProbes},
		{"SocketIsTheSharedHostPath", testSocketIsTheSharedHostPath},
		{"Wiring", testWiring},
	} {
		t.Run(c.name, func(t *testing.T) { c.test(t, m, h) })
	}
}

func testEverySettingIsADaemonFlag(t *testing.T, m manifests, h daemonHelp) {
	for name := range m.configMap.Data {
		if !strings.HasPrefix(name, "SHADE_") {
			t.Errorf("ConfigMap key %s: every setting is SHADE_<FLAG>", name)
		}
	}
	for name := range settings(t, m) {
		if !strings.HasPrefix(name, "SHADE_") {
			continue
		}
		if _, ok := h.flags[flagOf(name)]; !ok {
			t.Errorf("%s: shade-peer has no --%s", name, flagOf(name))
		}
	}
}

// The settings parse: the daemon reads them (as SHADE_* variables, with
// the node's name and address filled in) and gets as far as --version.
func testSettingsParse(t *testing.T, m manifests, h daemonHelp) {
	fields := map[string]string{"SHADE_NAME": "gpu-node-1", "POD_IP": "10.0.0.11"}
	ref := regexp.MustCompile(`\$\(([A-Z0-9_]+)\)`)
	env := []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range settings(t, m) {
		switch v {
		case "<secret>":
			continue
		case "<field>":
			v = fields[k]
		}
		v = ref.ReplaceAllStringFunc(v, func(s string) string { return fields[ref.FindStringSubmatch(s)[1]] })
		env = append(env, k+"="+v)
	}
	cmd := exec.Command(h.bin, "--version")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("shade-peer --version with the manifests' settings: %v\n%s\nenv: %q", err, out, env[1:])
	}
}

func testPortsAndProbes(t *testing.T, m manifests, h daemonHelp) {
	want := defaultPorts(t, h)
	spec := m.daemonSet.Spec.Template.Spec
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v, dnsPolicy %q: the peer gossips on the node's address and resolves the Service", spec.HostNetwork, spec.DNSPolicy)
	}
	c := peerContainer(t, m)
	byName := map[string]corev1.ContainerPort{}
	for _, p := range c.Ports {
		byName[p.Name] = p
		if p.HostPort != 0 && p.HostPort != p.ContainerPort {
			t.Errorf("port %s: hostPort %d differs from containerPort %d on the host network", p.Name, p.HostPort, p.ContainerPort)
		}
	}
	for name, w := range want {
		p, ok := byName[name]
		if !ok || p.ContainerPort != w.ContainerPort || p.Protocol != w.Protocol {
			t.Errorf("container port %s: %+v, want %d/%s", name, p, w.ContainerPort, w.Protocol)
		}
	}
	if len(c.Ports) != len(want) {
		t.Errorf("%d container ports, want %d", len(c.Ports), len(want))
	}

	// The addresses the daemon is given use those ports.
	env := settings(t, m)
	for flag, port := range map[string]string{"SHADE_GOSSIP_ADDR": "gossip-tcp", "SHADE_PEER_ADDR": "quic", "SHADE_ADMIN_ADDR": "admin"} {
		v, ok := env[flag]
		if !ok {
			t.Errorf("%s is not set", flag)
			continue
		}
		if got := portOf(t, v); got != want[port].ContainerPort {
			t.Errorf("%s=%s: port %d, container port %s is %d", flag, v, got, port, want[port].ContainerPort)
		}
	}

	adminPort := want["admin"].ContainerPort
	for _, p := range []struct {
		name, path string
		probe      *corev1.Probe
	}{
		{"liveness", "/healthz", c.LivenessProbe},
		{"readiness", "/readyz", c.ReadinessProbe},
		{"startup", "/healthz", c.StartupProbe},
	} {
		if p.probe == nil {
			if p.name != "startup" {
				t.Errorf("no %s probe", p.name)
			}
			continue
		}
		g := p.probe.HTTPGet
		if g == nil {
			t.Errorf("%s probe is not an HTTP GET", p.name)
			continue
		}
		port := g.Port.IntVal
		if g.Port.StrVal != "" {
			port = byName[g.Port.StrVal].ContainerPort
		}
		if g.Path != p.path || port != adminPort {
			t.Errorf("%s probe: GET %s on port %v, want %s on the admin port %d", p.name, g.Path, g.Port.String(), p.path, adminPort)
		}
	}

	// The Service publishes the same ports.
	svc := m.service.Spec
	for _, sp := range svc.Ports {
		cp, ok := byName[sp.Name]
		if !ok || sp.Port != cp.ContainerPort || sp.Protocol != cp.Protocol || sp.TargetPort.IntValue() != int(cp.ContainerPort) {
			t.Errorf("service port %s: %d/%s -> %s, container port %+v", sp.Name, sp.Port, sp.Protocol, sp.TargetPort.String(), cp)
		}
	}
}

func testSocketIsTheSharedHostPath(t *testing.T, m manifests, h daemonHelp) {
	sock, ok := settings(t, m)["SHADE_SOCKET"]
	if !ok {
		sock = h.defaultOf(t, "socket")
	}
	if def := h.defaultOf(t, "socket"); sock != def {
		t.Logf("SHADE_SOCKET %s differs from the daemon's default %s", sock, def)
	}
	dir := path.Dir(sock)
	c := peerContainer(t, m)
	volumes := map[string]corev1.Volume{}
	for _, v := range m.daemonSet.Spec.Template.Spec.Volumes {
		volumes[v.Name] = v
	}
	found := false
	for _, vm := range c.VolumeMounts {
		if vm.MountPath != dir {
			continue
		}
		found = true
		hp := volumes[vm.Name].HostPath
		if hp == nil || hp.Path != dir || vm.ReadOnly {
			t.Errorf("the socket's folder %s is mounted from %+v (read-only %v), want the writable hostPath %s", dir, volumes[vm.Name], vm.ReadOnly, dir)
		}
	}
	if !found {
		t.Errorf("no volume mounted at the socket's folder %s (--socket %s)", dir, sock)
	}
}

func testWiring(t *testing.T, m manifests, _ daemonHelp) {
	ns := m.daemonSet.Namespace
	for _, o := range []struct{ kind, ns string }{
		{"Service", m.service.Namespace}, {"Secret", m.secret.Namespace}, {"ConfigMap", m.configMap.Namespace},
	} {
		if o.ns != ns {
			t.Errorf("%s in namespace %q, the DaemonSet in %q", o.kind, o.ns, ns)
		}
	}
	if len(m.namespaces) > 0 && m.namespaces[0].Name != ns {
		t.Errorf("Namespace %s, objects in %s", m.namespaces[0].Name, ns)
	}

	// The headless Service selects the peers and its name is the seed list.
	labels := m.daemonSet.Spec.Template.Labels
	for k, v := range m.daemonSet.Spec.Selector.MatchLabels {
		if labels[k] != v {
			t.Errorf("DaemonSet selector %s=%s does not match its pods", k, v)
		}
	}
	svc := m.service.Spec
	if svc.ClusterIP != corev1.ClusterIPNone || !svc.PublishNotReadyAddresses {
		t.Errorf("Service: clusterIP %q, publishNotReadyAddresses %v; want a headless Service that lists peers before they are ready", svc.ClusterIP, svc.PublishNotReadyAddresses)
	}
	if len(svc.Selector) == 0 {
		t.Error("Service selects nothing")
	}
	for k, v := range svc.Selector {
		if labels[k] != v {
			t.Errorf("Service selector %s=%s does not match the peers' labels %v", k, v, labels)
		}
	}
	env := settings(t, m)
	seed := fmt.Sprintf("%s.%s.svc.cluster.local:7946", m.service.Name, ns)
	if env["SHADE_SEEDS"] != seed {
		t.Errorf("SHADE_SEEDS=%q, want the headless Service's name %q", env["SHADE_SEEDS"], seed)
	}

	// Certificates and keys come from the Secret's mount.
	spec := m.daemonSet.Spec.Template.Spec
	c := peerContainer(t, m)
	var tlsDir string
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			if v.Secret.SecretName != m.secret.Name {
				t.Errorf("volume %s mounts Secret %s, not %s", v.Name, v.Secret.SecretName, m.secret.Name)
			}
			for _, vm := range c.VolumeMounts {
				if vm.Name == v.Name {
					tlsDir = vm.MountPath
				}
			}
		}
	}
	if tlsDir != "/etc/shade/tls" {
		t.Errorf("the Secret is mounted at %q, want /etc/shade/tls", tlsDir)
	}
	for _, k := range []string{"SHADE_TLS_CA", "SHADE_TLS_CERT", "SHADE_TLS_KEY"} {
		if !strings.HasPrefix(env[k], tlsDir+"/") {
			t.Errorf("%s=%q is not in the Secret's folder %s", k, env[k], tlsDir)
		}
	}
	keys := map[string]bool{}
	for k := range m.secret.StringData {
		keys[k] = true
	}
	for k := range m.secret.Data {
		keys[k] = true
	}
	if !keys[path.Base(env["SHADE_TLS_CA"])] {
		t.Errorf("the Secret has no %s", path.Base(env["SHADE_TLS_CA"]))
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		if ref.Name != m.secret.Name || (!keys[ref.Key] && !optional) {
			t.Errorf("%s from Secret %s key %s: not in %s (keys %v)", e.Name, ref.Name, ref.Key, m.secret.Name, slices.Sorted(maps.Keys(keys)))
		}
	}
}
