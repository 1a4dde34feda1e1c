// Package s3test runs a real S3 server for tests: the Versity S3 Gateway
// (versitygw) over a POSIX directory, on a free 127.0.0.1 port, with its own
// root keys and an access log that tests read to count requests.
//
// Tests only: nothing outside _test.go files may import it.
//
// The binary is found, in order, at $SHADE_VERSITYGW, on $PATH, or in the
// cache directory .ci/versitygw.sh installs into; failing all three, Binary
// runs that script (one build per machine, serialised by a lock file) and
// skips the test with the reason only if the build fails.
package s3test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/shade-mesh/shade/internal/testsupport"
)

// Version is the versitygw release the tests run (.ci/versitygw.sh's default).
const Version = "v1.8.0"

// Binary returns the path of the versitygw binary, building it once per
// machine if needed; it skips t if the binary cannot be had.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("SHADE_VERSITYGW"); p != "" {
		return p
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	cached := filepath.Join(cacheDir(), "versitygw-"+Version, "versitygw")
	if _, err := os.Stat(cached); err == nil {
		return cached
	}
	script, err := findScript()
	if err != nil {
		t.Skipf("versitygw not installed and %v; run .ci/versitygw.sh", err)
	}
	// One build at a time across test processes: take a lock, then look
	// again (another process may have built it meanwhile).
	if err := os.MkdirAll(cacheDir(), 0o755); err != nil {
		t.Skipf("versitygw: %v", err)
	}
	lock, err := os.OpenFile(filepath.Join(cacheDir(), ".versitygw.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Skipf("versitygw: %v", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Skipf("versitygw: lock: %v", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	t.Logf("building versitygw %s with %s (once per machine)", Version, script)
	cmd := exec.Command(script)
	cmd.Env = append(os.Environ(), "SHADE_VERSITYGW_VERSION="+Version)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("versitygw %s could not be built (%v): %s", Version, err, lastLines(stderr.String(), 5))
	}
	return strings.TrimSpace(string(out))
}

func cacheDir() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "shade", "bin")
}

// findScript finds .ci/versitygw.sh in the working directory or above it.
func findScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, ".ci", "versitygw.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf(".ci/versitygw.sh not found above the working directory")
		}
		dir = parent
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Gateway is a running versitygw process. Its fields are read-only.
type Gateway struct {
	// Endpoint is http://127.0.0.1:PORT.
	Endpoint string
	// AccessKey and SecretKey are the gateway's root credentials.
	AccessKey, SecretKey string
	// Root is the POSIX directory holding the buckets (one folder each).
	Root string
	// LogPath is the gateway's S3 access log.
	LogPath string

	bin    string
	addr   string // host:port of Endpoint, kept across Stop and Restart
	client *minio.Client
	// The running process: set by start, read by Stop and the cleanup,
	// all on the test's goroutine.
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been waited for
	out    *bytes.Buffer
}

// Start starts a gateway, waits until it answers and stops it (by its PID)
// in t.Cleanup. It fails t if the gateway does not come up within 30 s.
func Start(t testing.TB) *Gateway {
	t.Helper()
	dir := t.TempDir()
	g := &Gateway{
		AccessKey: "shadetestaccess", SecretKey: "shade-test-secret-key-0123456789",
		Root: filepath.Join(dir, "root"), LogPath: filepath.Join(dir, "access.log"),
		bin: Binary(t),
	}
	if err := os.MkdirAll(g.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	for attempt := 0; ; attempt++ {
		g.addr = testsupport.LoopbackAddr(t)
		g.Endpoint = "http://" + g.addr
		err := g.start()
		if err == nil {
			break
		}
		if attempt == 2 {
			t.Fatalf("versitygw did not start: %v\n%s", err, g.out)
		}
	}
	t.Cleanup(func() {
		g.stop()
		if t.Failed() {
			t.Logf("versitygw output:\n%s", lastLines(g.out.String(), 40))
		}
	})
	var err error
	// The helpers' own requests each on a new connection: after a PUT of
	// an empty object (a folder marker), the gateway fails to parse the
	// next request on the same connection.
	g.client, err = minio.New(g.addr, &minio.Options{
		Creds: credentials.NewStaticV4(g.AccessKey, g.SecretKey, ""), BucketLookup: minio.BucketLookupPath,
		Transport: &http.Transport{DisableKeepAlives: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Stop stops the gateway (SIGTERM to its PID, SIGKILL after 1 s) and
// returns once it has exited: the store is down, its port closed, until
// Restart. Stopping a stopped gateway does nothing. Call Stop, Restart and
// the other methods from the test's goroutine.
func (g *Gateway) Stop(t testing.TB) {
	t.Helper()
	g.stop()
}

// Restart starts a stopped gateway again with the same port, root, keys
// and access log (appended to), and waits until it answers; it fails t if
// it does not within 30 s (for instance if another process took the port
// meanwhile). Restarting a running gateway stops it first.
func (g *Gateway) Restart(t testing.TB) {
	t.Helper()
	g.stop()
	if err := g.start(); err != nil {
		t.Fatalf("versitygw did not start again on %s: %v\n%s", g.addr, err, g.out)
	}
}

func (g *Gateway) stop() {
	if g.cmd == nil {
		return
	}
	select {
	case <-g.exited:
		return
	default:
	}
	// On SIGTERM the gateway waits up to 10 s for its clients to close
	// the connections they keep open; a store going away does not.
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(time.Second):
		g.cmd.Process.Kill()
		<-g.exited
	}
}

// start runs the gateway on g.addr and waits until it answers HTTP; an
// error if it exits first (the port was taken meanwhile) or 30 s pass.
// Its output goes to g.out (appended to across restarts).
func (g *Gateway) start() error {
	if g.out == nil {
		g.out = new(bytes.Buffer)
	}
	// --keep-alive: connections stay open between requests, as S3's do;
	// without it the gateway closes each after one answer, and every GET
	// pays a connection's setup.
	g.cmd = exec.Command(g.bin, "--access", g.AccessKey, "--secret", g.SecretKey, "--port", g.addr,
		"--access-log", g.LogPath, "--keep-alive", "posix", g.Root)
	g.cmd.Stdout, g.cmd.Stderr = g.out, g.out
	// Killed with the test process too, should it die before Cleanup.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := g.cmd.Start(); err != nil {
		return err
	}
	cmd, exited := g.cmd, make(chan struct{})
	var waitErr error
	g.exited = exited
	go func() { // owned by this process: ends when it does
		waitErr = cmd.Wait()
		close(exited)
	}()
	hc := &http.Client{Timeout: time.Second}
	var exitErr error
	_, err := testsupport.Poll(context.Background(), 30*time.Second, func() bool {
		select {
		case <-exited:
			exitErr = fmt.Errorf("exited: %v", waitErr)
			return true
		default:
		}
		resp, err := hc.Get(g.Endpoint + "/")
		if err != nil {
			return false
		}
		resp.Body.Close() // any answer (403 for an anonymous GET) means it serves
		return true
	})
	switch {
	case exitErr != nil:
		return exitErr
	case err != nil:
		cmd.Process.Kill()
		<-exited
		return fmt.Errorf("no answer on %s within 30s", g.addr)
	}
	return nil
}

// CreateBucket creates a bucket, failing t on error.
func (g *Gateway) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	if err := g.client.MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("create bucket %s: %v", bucket, err)
	}
}

// Put writes an object, failing t on error.
func (g *Gateway) Put(t testing.TB, bucket, key string, data []byte) {
	t.Helper()
	_, err := g.client.PutObject(context.Background(), bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		t.Fatalf("put %s/%s: %v", bucket, key, err)
	}
}

// Delete removes an object, failing t on error.
func (g *Gateway) Delete(t testing.TB, bucket, key string) {
	t.Helper()
	if err := g.client.RemoveObject(context.Background(), bucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatalf("delete %s/%s: %v", bucket, key, err)
	}
}

// Request is one line of the access log.
type Request struct {
	Bucket, Operation, Key string
	URI                    string // the request's path and query
	Status                 string
}

// Requests reads the access log so far. The gateway writes each line as
// its request completes, unbuffered.
func (g *Gateway) Requests(t testing.TB) []Request {
	t.Helper()
	f, err := os.Open(g.LogPath)
	if err != nil {
		t.Fatalf("access log: %v", err)
	}
	defer f.Close()
	var reqs []Request
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if r, ok := parseLine(sc.Text()); ok {
			reqs = append(reqs, r)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("access log: %v", err)
	}
	return reqs
}

// parseLine parses one access log line: owner bucket [time] remote
// requester request-id operation key uri status ...; the time holds a
// space, so fields are taken after its closing bracket.
func parseLine(line string) (Request, bool) {
	head, rest, ok := strings.Cut(line, "] ")
	if !ok {
		return Request{}, false
	}
	hf := strings.Fields(head)
	f := strings.Fields(rest)
	if len(hf) < 2 || len(f) < 7 {
		return Request{}, false
	}
	return Request{Bucket: hf[1], Operation: f[3], Key: f[4], URI: f[5], Status: f[6]}, true
}

// GetCounts returns how many GetObject requests (whatever their status)
// the access log holds for each key of bucket.
func (g *Gateway) GetCounts(t testing.TB, bucket string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for _, r := range g.Requests(t) {
		if r.Bucket == bucket && strings.HasSuffix(r.Operation, "GetObject") {
			counts[r.Key]++
		}
	}
	return counts
}

// Lists returns how many listing requests (ListObjects, whatever their
// status) the access log holds.
func (g *Gateway) Lists(t testing.TB) int {
	t.Helper()
	n := 0
	for _, r := range g.Requests(t) {
		if strings.Contains(r.Operation, "ListObjects") {
			n++
		}
	}
	return n
}
