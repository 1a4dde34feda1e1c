package member

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []Meta{
		{},
		{PeerAddr: "10.0.0.7:7947", Capacity: 64 << 30, Build: "shade v0.3.1 (abc123)",
			Datasets: []string{"fashion-mnist=9f86d081", "imagenet=1b4f0e98"}},
		{Capacity: 1<<63 - 1, Datasets: []string{""}},
		{Version: MetaVersion, PeerAddr: "[::1]:7947"},
	} {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("marshal %+v: %v", m, err)
		}
		var got Meta
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("unmarshal %+v: %v", m, err)
		}
		m.Version = MetaVersion
		if !metaEqual(got, m) {
			t.Errorf("round trip: got %+v, want %+v", got, m)
		}
	}
}

func TestMetaMarshalRefuses(t *testing.T) {
	for _, tc := range []struct {
		m    Meta
		want error
	}{
		{Meta{Version: 2}, ErrMetaVersion},
		{Meta{Capacity: -1}, ErrMeta},
		{Meta{Build: strings.Repeat("x", 510)}, ErrMeta},
		{Meta{Datasets: make([]string, 600)}, ErrMeta},
	} {
		if _, err := tc.m.MarshalBinary(); !errors.Is(err, tc.want) {
			t.Errorf("marshal %.40v: %v, want %v", tc.m, err, tc.want)
		}
	}
}

func TestMetaUnmarshalRefuses(t *testing.T) {
	good, _ := Meta{PeerAddr: "h:1", Build: "b", Datasets: []string{"d=1"}}.MarshalBinary()
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"nil", nil, ErrMeta},
		{"version only", []byte{1}, ErrMeta},
		{"version 0", []byte{0, 0, 0, 0, 0, 0}, ErrMetaVersion},
		{"version 2", append([]byte{2}, good[1:]...), ErrMetaVersion},
		{"unknown flag", append([]byte{1, 0x80}, good[2:]...), ErrMeta},
		{"truncated", good[:len(good)-1], ErrMeta},
		{"trailing", append(bytes.Clone(good), 0), ErrMeta},
		{"oversize", append(bytes.Clone(good), make([]byte, MaxMetaSize)...), ErrMeta},
		{"string overrun", []byte{1, 0, 0x7f, 'a'}, ErrMeta},
		{"bad varint", []byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, ErrMeta},
		{"capacity overflow", []byte{1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0}, ErrMeta},
		{"dataset count", []byte{1, 0, 0, 0, 0, 0xff, 0xff, 0x03}, ErrMeta},
		{"garbage", []byte("not a meta at all"), ErrMeta},
	} {
		m := Meta{Build: "untouched"}
		if err := m.UnmarshalBinary(tc.in); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if m.Build != "untouched" {
			t.Errorf("%s: failed unmarshal changed the Meta to %+v", tc.name, m)
		}
	}
}

func TestMetaLeavingFlagIsInternal(t *testing.T) {
	m := Meta{PeerAddr: "h:1"}
	b, err := m.encode(flagLeaving)
	if err != nil {
		t.Fatal(err)
	}
	var got Meta
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	_, flags, _ := decodeMeta(b)
	if got.PeerAddr != "h:1" || flags != flagLeaving {
		t.Fatalf("got %+v flags %#x", got, flags)
	}
}

func FuzzMetaUnmarshal(f *testing.F) {
	for _, m := range []Meta{{}, {PeerAddr: "127.0.0.1:7947", Capacity: 1 << 40, Build: "b", Datasets: []string{"a=1", "b=2"}}} {
		b, _ := m.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{1, 1, 0, 0, 0, 0})
	f.Add([]byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Meta
		if err := m.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrMeta) {
				t.Fatalf("error %v does not wrap ErrMeta", err)
			}
			return
		}
		// Whatever decodes re-encodes to a form that decodes to the same.
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded %+v but cannot encode it: %v", m, err)
		}
		var again Meta
		if err := again.UnmarshalBinary(b); err != nil || !metaEqual(again, m) {
			t.Fatalf("re-decode: %+v, %v; want %+v", again, err, m)
		}
	})
}

func TestDecodeKey(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	for _, s := range []string{
		base64.StdEncoding.EncodeToString(key),
		base64.RawStdEncoding.EncodeToString(key),
		base64.URLEncoding.EncodeToString(key),
		" " + base64.StdEncoding.EncodeToString(key[:16]) + "\n",
	} {
		got, err := DecodeKey(s)
		if err != nil || !bytes.HasPrefix(key, got) || len(got) < 16 {
			t.Errorf("DecodeKey(%q) = %q, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "   ", "not base64!", base64.StdEncoding.EncodeToString(key[:20])} {
		if _, err := DecodeKey(s); !errors.Is(err, ErrKey) {
			t.Errorf("DecodeKey(%q) = %v, want ErrKey", s, err)
		}
	}
}
