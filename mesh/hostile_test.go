package mesh

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/shade-mesh/shade/transport"
)

func TestIdleAndHalfCommandsTimeOut(t *testing.T) {
	p := startPeer(t, Config{CacheSize: 1 << 20}, transport.SocketConfig{IdleTimeout: 300 * time.Millisecond})
	for _, send := range []string{"", "*2\r\n$3\r\nGET\r\n$10\r\nabc"} { // silence; half a command, then silence
		c, err := net.Dial("unix", p.path)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(send))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		_, err = bufio.NewReader(c).ReadString('\n')
		// The server's close ends the read (EOF); our own 5s deadline
		// would end it with a timeout.
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("after %q the server did not close the idle connection (err %v after %v)", send, err, time.Since(start))
		}
		c.Close()
	}
	if err := p.client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("the daemon stopped serving: %v", err)
	}
}

func TestVanishedOrChangedSampleIsAnErrorNotWrongBytes(t *testing.T) {
	dir, files := makeDataset(t, 20, 100, 200)
	p := startPeer(t, Config{CacheSize: 1 << 20, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}}, transport.SocketConfig{})
	c := p.client(t)
	ctx := context.Background()
	m := p.node.ordered[0].manifest
	os.Remove(filepath.Join(dir, m.Names.At(3)))
	os.WriteFile(filepath.Join(dir, m.Names.At(4)), append(files[4], 'x'), 0o644)
	for _, k := range []string{"ds/3", "ds/4"} {
		err := c.Get(ctx, k).Err()
		if err == nil || errorsIsNil(err) || !strings.Contains(err.Error(), "changed") {
			t.Errorf("GET %s of a vanished or resized file: %v; want an error naming the change", k, err)
		}
	}
	vals, err := c.MGet(ctx, "ds/2", "ds/3", "ds/5").Result()
	if err != nil {
		t.Fatal(err)
	}
	if vals[0].(string) != string(files[2]) || vals[2].(string) != string(files[5]) {
		t.Error("the good samples of an MGET were not served")
	}
	if _, isErr := vals[1].(error); !isErr {
		t.Errorf("the vanished sample's element is %T %v; want an error reply", vals[1], vals[1])
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("the daemon stopped serving: %v", err)
	}
}

func errorsIsNil(err error) bool { return err == redis.Nil }

func TestInfoLogsCarryNoBytesKeysOrSecrets(t *testing.T) {
	var logs bytes.Buffer
	dir, files := makeDataset(t, 30, 100, 200)
	log := zerolog.New(&logs).Level(zerolog.InfoLevel)
	const secret = "hunter2-very-secret"
	p := startPeer(t, Config{CacheSize: 4096, Datasets: []DatasetConfig{{Name: "ds", Dir: dir}}, Logger: log},
		transport.SocketConfig{RequirePass: secret, Logger: log})
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: p.path, Password: secret, Protocol: 2})
	defer c.Close()
	ctx := context.Background()
	const freeKey, freeVal = "user-key-7f3a", "user-value-9c2e"
	c.Set(ctx, freeKey, freeVal, 0)
	c.Get(ctx, freeKey)
	for i := 0; i < 30; i++ {
		c.Get(ctx, "ds/"+string(rune('0'+i%10)))
	}
	c.Do(ctx, "SHADE.REPORT", "ds", 0, 1, "nan") // refused
	wrong := redis.NewClient(&redis.Options{Network: "unix", Addr: p.path, Password: "guess-" + secret, Protocol: 2})
	wrong.Ping(ctx)
	wrong.Close()
	p.sock.Close()
	p.node.Close()
	out := logs.String()
	for _, needle := range []string{secret, freeKey, freeVal, string(files[1][:16])} {
		if strings.Contains(out, needle) {
			t.Errorf("info-level logs contain %q:\n%s", needle, out)
		}
	}
	if !strings.Contains(out, "dataset loaded") {
		t.Errorf("no info logs were written at all: %q", out)
	}
}

func TestWorldWritableSocketDirectoryIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "open")
	os.Mkdir(dir, 0o777)
	os.Chmod(dir, 0o777) // past the umask
	node, err := New(Config{Name: "w", CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	if s, err := transport.ListenSocket(transport.SocketConfig{Path: filepath.Join(dir, "s.sock")}, node); !errors.Is(err, transport.ErrSocketDir) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("a socket in a world-writable directory: %v; want ErrSocketDir", err)
	}
	fresh := filepath.Join(t.TempDir(), "new", "dir")
	s, err := transport.ListenSocket(transport.SocketConfig{Path: filepath.Join(fresh, "s.sock")}, node)
	if err != nil {
		t.Fatalf("a missing socket directory is not created: %v", err)
	}
	s.Close()
	if fi, _ := os.Stat(fresh); fi.Mode().Perm()&0o007 != 0 {
		t.Errorf("created socket directory has mode %v; others must have no access", fi.Mode().Perm())
	}
}
