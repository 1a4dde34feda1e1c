package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

func TestLocationCodec(t *testing.T) {
	l := Location{Gen: 1, GenOff: 1 << 40, Off: 3, Len: ^uint64(0), Sum: 0xdeadbeef}
	b := AppendLocation([]byte("x"), l)
	if len(b) != 1+LocationSize {
		t.Fatalf("encoded %d bytes, want %d", len(b)-1, LocationSize)
	}
	// The layout is the protocol: five little-endian words in this order.
	for k, want := range []uint64{l.Gen, l.GenOff, l.Off, l.Len, l.Sum} {
		if got := binary.LittleEndian.Uint64(b[1+8*k:]); got != want {
			t.Fatalf("word %d = %#x, want %#x", k, got, want)
		}
	}
	if got := DecodeLocation(b[1:]); got != l {
		t.Fatalf("DecodeLocation = %+v, want %+v", got, l)
	}
}

func TestChecksumIsCRC32C(t *testing.T) {
	// The CRC-32C check value (RFC 3720, B.4).
	if got := Checksum([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("Checksum = %#x, want 0xe3069283", got)
	}
}

// arena makes a memfd of size bytes holding mem, and maps it.
func arena(t *testing.T, mem []byte) *Mapping {
	t.Helper()
	fd, err := unix.MemfdCreate("shm-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Skipf("memfd unavailable: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, mem); err != nil {
		t.Fatal(err)
	}
	if _, err := MapShared(fd, int64(len(mem))+1, 7); err == nil {
		t.Fatal("MapShared of more than the file holds succeeded")
	}
	m, err := MapShared(fd, int64(len(mem)), 7)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestMappingCopy(t *testing.T) {
	mem := make([]byte, 64)
	binary.LittleEndian.PutUint64(mem[8:], 5) // generation word
	copy(mem[16:], "sample")
	m := arena(t, mem)
	if m.ID() != 7 {
		t.Fatalf("ID = %d", m.ID())
	}
	loc := Location{Gen: 5, GenOff: 8, Off: 16, Len: 6, Sum: Checksum([]byte("sample"))}
	got, err := m.Copy([]byte("pre:"), loc)
	if err != nil || string(got) != "pre:sample" {
		t.Fatalf("Copy = %q, %v", got, err)
	}
	stale := loc
	stale.Gen = 3
	if got, err := m.Copy([]byte("pre:"), stale); !errors.Is(err, ErrMoved) || string(got) != "pre:" {
		t.Fatalf("Copy of a moved value = %q, %v; want ErrMoved", got, err)
	}
	bad := loc
	bad.Sum++
	if _, err := m.Copy(nil, bad); !errors.Is(err, ErrChecksum) {
		t.Fatalf("Copy with a wrong checksum: %v, want ErrChecksum", err)
	}
	if got, err := m.CopyUnverified(nil, bad); err != nil || !bytes.Equal(got, []byte("sample")) {
		t.Fatalf("CopyUnverified = %q, %v", got, err)
	}
	for _, out := range []Location{
		{GenOff: 64, Off: 0, Len: 1},
		{GenOff: 8, Off: 63, Len: 2},
		{GenOff: 12, Off: 0, Len: 1},
		{GenOff: 8, Off: 16, Len: ^uint64(0)},
	} {
		if _, err := m.Copy(nil, out); err == nil || errors.Is(err, ErrMoved) {
			t.Fatalf("Copy(%+v) = %v, want a range error", out, err)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
